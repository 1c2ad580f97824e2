package images

import (
	"encoding/json"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// python is Debian's interpreter, which has python3-torch; the pyenv python3
// first on PATH does not.
const python = "/usr/bin/python3"

// testPlanes is an h × w photo-like uint8 image: smooth gradients per
// channel plus noise, kept within 20–220 so that AutoContrast and Equalize
// have a range to stretch.
func testPlanes(h, w int, seed uint64) Planes {
	rng := rand.New(rand.NewPCG(seed, 1))
	img := Planes{Pix: make([]uint8, 3*h*w), H: h, W: w}
	for c := range 3 {
		for y := range h {
			for x := range w {
				v := 20 + (c*37+3*x*(c+1)+5*y*(3-c))%160 + rng.IntN(41)
				img.Pix[(c*h+y)*w+x] = uint8(v)
			}
		}
	}
	return img
}

type opCase struct {
	op  Op
	mag float64
}

// opCases are every op at magnitudes of both policies: for the signed ops
// bins 3, 9 and 30 with either sign, every Posterize bit count, Solarize
// thresholds across the range.
func opCases(h, w int) []opCase {
	var cases []opCase
	for o := range numOps {
		switch {
		case o.signed():
			for _, p := range []AutoAugment{TrivialAugmentWide, RandAugment} {
				for _, bin := range []int{3, 9, 30} {
					m := Magnitude(p, o, bin, h, w)
					cases = append(cases, opCase{o, m}, opCase{o, -m})
				}
			}
		case o == Posterize:
			for bits := 2; bits <= 8; bits++ {
				cases = append(cases, opCase{o, float64(bits)})
			}
		case o == Solarize:
			for _, bin := range []int{0, 5, 9, 17, 30} {
				cases = append(cases, opCase{o, Magnitude(RandAugment, o, bin, h, w)})
			}
		default:
			cases = append(cases, opCase{o, 0})
		}
	}
	return cases
}

// TestOpsMatchTorchvision runs each op on a 24 × 32 image (not square, so
// that a swapped axis shows) and compares with torchvision's _apply_op on
// the same uint8 tensor and magnitude, which testdata/autoaugment_ref.py
// computes; it also checks the magnitudes of both policies' 31 bins
// against their _augmentation_space.
//
// Tolerance: the pixel ops compute what torchvision computes in the same
// float32 steps (or in integers) and must match exactly, except Sharpness,
// whose 3 × 3 blur PyTorch sums in its convolution's order: a blurred
// value landing on a rounding tie may differ by 1, so up to 1 % of the
// values may be off by 1. The geometric ops sample the nearest pixel of a
// float32 coordinate, computed as torchvision computes it, though its
// grid_sample may fuse multiply-adds: a coordinate within rounding of a
// half pixel may pick the neighbour, so up to 1 % of the values may
// differ (a wrong map, such as a rotation the other way or shear about the
// centre, changes most of them).
func TestOpsMatchTorchvision(t *testing.T) {
	if out, err := exec.Command(python, "-c", "import torch, torchvision").CombinedOutput(); err != nil {
		t.Skipf("PyTorch is not installed for %s (apt-get install python3-torch python3-torchvision): %v\n%s", python, err, out)
	}
	const h, w = 24, 32
	img := testPlanes(h, w, 7)
	cases := opCases(h, w)
	dir := t.TempDir()
	spec := struct {
		H     int     `json:"h"`
		W     int     `json:"w"`
		Cases [][]any `json:"cases"`
	}{H: h, W: w}
	for _, c := range cases {
		spec.Cases = append(spec.Cases, []any{c.op.String(), c.mag})
	}
	b, _ := json.Marshal(spec)
	if err := os.WriteFile(filepath.Join(dir, "cases.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "image.u8"), img.Pix, 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(python, filepath.Join("testdata", "autoaugment_ref.py"), dir).CombinedOutput(); err != nil {
		t.Fatalf("autoaugment_ref.py: %v\n%s", err, out)
	}
	ref, err := os.ReadFile(filepath.Join(dir, "out.u8"))
	if err != nil || len(ref) != len(cases)*len(img.Pix) {
		t.Fatalf("reference: %d bytes, %v", len(ref), err)
	}
	n := len(img.Pix)
	for k, c := range cases {
		got := Planes{Pix: append([]uint8(nil), img.Pix...), H: h, W: w}
		Apply(got, c.op, c.mag, nil)
		want := ref[k*n : (k+1)*n]
		diff, worst := 0, 0
		for i := range want {
			if d := absDiff(got.Pix[i], want[i]); d > 0 {
				diff++
				worst = max(worst, d)
			}
		}
		maxDiff, maxWorst := 0, 0
		switch c.op {
		case Sharpness:
			maxDiff, maxWorst = n/100, 1
		case ShearX, ShearY, TranslateX, TranslateY, Rotate:
			maxDiff, maxWorst = n/100, 255
		}
		if diff > maxDiff || worst > maxWorst {
			t.Errorf("%v(%g): %d of %d values differ from torchvision's, by up to %d", c.op, c.mag, diff, n, worst)
		} else if diff > 0 {
			t.Logf("%v(%g): %d of %d values differ, by up to %d", c.op, c.mag, diff, n, worst)
		}
	}

	b, err = os.ReadFile(filepath.Join(dir, "space.json"))
	if err != nil {
		t.Fatal(err)
	}
	var space map[string]map[string][]float64
	if err := json.Unmarshal(b, &space); err != nil {
		t.Fatal(err)
	}
	for name, p := range AutoAugments {
		if p == NoAutoAugment {
			continue
		}
		if len(space[name]) != int(numOps) {
			t.Errorf("%s: torchvision has %d ops, want %d", name, len(space[name]), numOps)
		}
		for o := range numOps {
			mags := space[name][o.String()]
			if len(mags) == 1 {
				mags = nil // no magnitude: Magnitude gives 0 at any bin
			} else if len(mags) != MagnitudeBins {
				t.Errorf("%s %v: %d magnitudes", name, o, len(mags))
				continue
			}
			for bin := range MagnitudeBins {
				want := 0.0
				if mags != nil {
					want = mags[bin]
				}
				// torch.linspace computes in float32 in vector chunks
				// whose rounding (fused or not, from start or end)
				// depends on the CPU's vector width: within 2 ulps, and
				// the whole pixels of a translation the same.
				got := Magnitude(p, o, bin, h, w)
				if ulps := math.Abs(float64(math.Float32bits(float32(got))) - float64(math.Float32bits(float32(want)))); ulps > 2 || math.Signbit(got) != math.Signbit(want) ||
					(o == TranslateX || o == TranslateY) && math.Trunc(got) != math.Trunc(want) {
					t.Errorf("%s %v bin %d: magnitude %v, torchvision's %v", name, o, bin, got, want)
				}
			}
		}
	}
}

func absDiff(a, b uint8) int {
	if a > b {
		return int(a - b)
	}
	return int(b - a)
}

// augmentFolder writes a small class folder of photo-like JPEGs.
func augmentFolder(t *testing.T) []Item {
	t.Helper()
	root := t.TempDir()
	if _, err := synthetic.WriteImageFolder(root, 2, 5, 96, 72, 1); err != nil {
		t.Fatal(err)
	}
	items, _, err := Folders(root)
	if err != nil {
		t.Fatal(err)
	}
	return items
}

// batches runs one epoch through a loader and returns its images by
// dataset index.
func batches(t *testing.T, ds *Dataset, workers int, resume *data.Cursor) map[int][]float32 {
	t.Helper()
	l, err := data.New(ds, data.Config{BatchSize: 3, Workers: workers, Prefetch: 1, MaxBytes: 1 << 20, Shuffle: true, Seed: 11, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if resume != nil {
		if err := l.Resume(*resume); err != nil {
			t.Fatal(err)
		}
	}
	out := map[int][]float32{}
	for b, err := l.Next(); err == nil; b, err = l.Next() {
		img := b.Tensor("image").F32
		n := len(img) / len(b.Indices)
		for r, idx := range b.Indices {
			out[idx] = append([]float32(nil), img[r*n:(r+1)*n]...)
		}
	}
	return out
}

// TestAutoAugmentIsSeededBySamplePosition: a sample's augmentation depends
// on the loader's seed, the epoch and the sample's index only, as its crop
// and flip do: the same images come out of one worker or three and after a
// resume, equal to Load with the sample's own seed; and the policies do
// change the images.
func TestAutoAugmentIsSeededBySamplePosition(t *testing.T) {
	items := augmentFolder(t)
	for _, policy := range []AutoAugment{TrivialAugmentWide, RandAugment} {
		ds, err := New(items, Config{Train: true, Size: 48, Decoder: GoJPEG, AutoAugment: policy, RandAugmentM: 15})
		if err != nil {
			t.Fatal(err)
		}
		one := batches(t, ds, 1, nil)
		three := batches(t, ds, 3, nil)
		resumed := batches(t, ds, 2, &data.Cursor{Epoch: 0, Position: 2})
		if len(one) != len(items) || len(resumed) == 0 || len(resumed) >= len(items) {
			t.Fatalf("%d and %d of %d images", len(one), len(resumed), len(items))
		}
		plain, _ := New(items, Config{Train: true, Size: 48, Decoder: GoJPEG})
		changed := 0
		for i := range items {
			if !equal(one[i], three[i]) {
				t.Errorf("policy %d, image %d: 1 and 3 workers differ", policy, i)
			}
			if r, ok := resumed[i]; ok && !equal(one[i], r) {
				t.Errorf("policy %d, image %d: differs after a resume", policy, i)
			}
			s0, s1 := data.SampleSeed(11, 0, i)
			img := make([]float32, 3*48*48)
			smp := data.Sample{{Name: "image", DType: data.Float32, F32: img}, {Name: "label", DType: data.Int64, I64: make([]int64, 1)}}
			if err := ds.Load(i, rand.New(rand.NewPCG(s0, s1)), smp); err != nil {
				t.Fatal(err)
			}
			if !equal(one[i], img) {
				t.Errorf("policy %d, image %d: the loader's differs from Load with the sample's seed", policy, i)
			}
			if err := plain.Load(i, rand.New(rand.NewPCG(s0, s1)), smp); err != nil {
				t.Fatal(err)
			}
			if !equal(one[i], img) {
				changed++
			}
		}
		// Identity is one op of 14 (and RandAugment draws two), so
		// nearly every image changes.
		if changed < len(items)/2 {
			t.Errorf("policy %d changed %d of %d images", policy, changed, len(items))
		}
	}
}

// TestAutoAugmentOffByDefaultAndNeverInValidation: without a policy the
// training images are the plain crop and flip (the pipeline without the
// uint8 rounding); validation images are the same with or without one.
func TestAutoAugmentOffByDefaultAndNeverInValidation(t *testing.T) {
	items := augmentFolder(t)
	if (Config{}).AutoAugment != NoAutoAugment || AutoAugments[""] != NoAutoAugment {
		t.Fatal("auto-augmentation must be off in a zero Config")
	}
	for _, train := range []bool{true, false} {
		plain, _ := New(items, Config{Train: train, Size: 40, Decoder: GoJPEG})
		for _, policy := range []AutoAugment{NoAutoAugment, TrivialAugmentWide, RandAugment} {
			ds, err := New(items, Config{Train: train, Size: 40, Decoder: GoJPEG, AutoAugment: policy})
			if err != nil {
				t.Fatal(err)
			}
			same := 0
			for i := range items {
				a, _, err := load(t, plain, i, uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				b, _, _ := load(t, ds, i, uint64(i))
				if equal(a, b) {
					same++
				}
			}
			if want := !train || policy == NoAutoAugment; (same == len(items)) != want {
				t.Errorf("train %v, policy %d: %d of %d images unchanged", train, policy, same, len(items))
			}
		}
	}
	if _, err := New(items, Config{AutoAugment: RandAugment, RandAugmentM: 31}); err == nil {
		t.Error("RandAugment at bin 31 of 0–30 accepted")
	}
}

// TestAutoAugmentDraws: the policies draw as torchvision's do — the op
// uniformly from the 14, for TrivialAugmentWide a bin uniformly from the 31
// where the op has a magnitude, for RandAugment n ops at bin m, then a sign
// for the signed ops — which a replay of the stream through Apply checks.
func TestAutoAugmentDraws(t *testing.T) {
	for _, a := range []augmenter{{TrivialAugmentWide, 2, 9}, {RandAugment, 2, 9}, {RandAugment, 3, 30}} {
		n := 1
		if a.policy == RandAugment {
			n = a.n
		}
		ops := map[Op]int{}
		bins := map[int]bool{}
		for seed := range uint64(300) {
			img := testPlanes(12, 10, seed)
			got := Planes{Pix: append([]uint8(nil), img.Pix...), H: 12, W: 10}
			a.draw(got, nil, rand.New(rand.NewPCG(seed, 3)))
			rng := rand.New(rand.NewPCG(seed, 3))
			for range n {
				o := Op(rng.IntN(14))
				bin := a.m
				if a.policy == TrivialAugmentWide && o != Identity && o != AutoContrast && o != Equalize {
					bin = rng.IntN(31)
					bins[bin] = true
				}
				mag := Magnitude(a.policy, o, bin, 12, 10)
				if o.signed() && rng.IntN(2) == 1 {
					mag = -mag
				}
				Apply(img, o, mag, nil)
				ops[o]++
			}
			if !slices.Equal(got.Pix, img.Pix) {
				t.Fatalf("%+v, seed %d: draw differs from its replay", a, seed)
			}
		}
		for o := range numOps {
			if ops[o] < 300*n/14/2 {
				t.Errorf("%+v: %v drawn %d times", a, o, ops[o])
			}
		}
		if a.policy == TrivialAugmentWide && len(bins) != 31 {
			t.Errorf("TrivialAugmentWide drew %d of the 31 bins", len(bins))
		}
	}
}
