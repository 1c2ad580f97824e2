package images

import (
	"image"
	"image/color"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// load runs one sample through Load.
func load(t testing.TB, ds *Dataset, i int, seed uint64) ([]float32, int64, error) {
	t.Helper()
	spec := ds.Spec()
	img := make([]float32, spec[0].Elems())
	label := make([]int64, 1)
	s := data.Sample{{Name: "image", DType: data.Float32, F32: img}, {Name: "label", DType: data.Int64, I64: label}}
	err := ds.Load(i, rand.New(rand.NewPCG(seed, 0)), s)
	return img, label[0], err
}

func TestFoldersAndLists(t *testing.T) {
	root := t.TempDir()
	if _, err := synthetic.WriteImageFolder(root, 3, 4, 64, 48, 1); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "class01", "notes.txt"), []byte("not an image"), 0o644)
	items, classes, err := Folders(root)
	if err != nil || len(items) != 12 || len(classes) != 3 || classes[2] != "class02" || items[11].Label != 2 {
		t.Fatalf("Folders: %d items, classes %v, %v", len(items), classes, err)
	}
	list := filepath.Join(root, "val.txt")
	os.WriteFile(list, []byte("class00/img000.jpg 0\n\nclass02/img003.png 2\n"), 0o644)
	got, err := List(list, root)
	if err != nil || len(got) != 2 || got[1] != (Item{filepath.Join(root, "class02/img003.png"), 2}) {
		t.Errorf("List: %v, %v", got, err)
	}
	os.WriteFile(list, []byte("class00/img000.jpg 0\nclass00/img001.jpg cat\n"), 0o644)
	if _, err := List(list, root); err == nil || !strings.HasPrefix(err.Error(), "val.txt:2: ") {
		t.Errorf("bad list line: %v", err)
	}
}

// TestValidationTransform checks resize-256/center-224 and normalisation on
// a PNG whose red channel is its x coordinate: the output's red must be the
// source column it samples, through ImageNet's mean and std.
func TestValidationTransform(t *testing.T) {
	dir := t.TempDir()
	img := image.NewRGBA(image.Rect(0, 0, 256, 128))
	for y := range 128 {
		for x := range 256 {
			img.Set(x, y, color.RGBA{uint8(x), 100, 200, 255})
		}
	}
	p := filepath.Join(dir, "ramp.png")
	if err := synthetic.WriteImage(p, img); err != nil {
		t.Fatal(err)
	}
	for _, layout := range []Layout{NCHW, NHWC} {
		ds, _ := New([]Item{{p, 7}}, Config{Layout: layout})
		out, label, err := load(t, ds, 0, 0)
		if err != nil || label != 7 {
			t.Fatal(err, label)
		}
		at := func(c, y, x int) float32 {
			if layout == NHWC {
				return out[(y*224+x)*3+c]
			}
			return out[c*224*224+y*224+x]
		}
		// Short side 128 → 256 is a factor 2; the 224 center is source
		// columns 72–184, so output column x samples source 72 + x/2.
		for _, x := range []int{0, 100, 223} {
			src := 72 + (float64(x)+0.5)/2 - 0.5
			want := float32((src/255 - 0.485) / 0.229)
			if got := at(0, 50, x); math.Abs(float64(got-want)) > 1e-4 {
				t.Errorf("layout %d: red at x=%d is %v, want %v", layout, x, got, want)
			}
		}
		if got, want := at(2, 10, 10), float32((200.0/255-0.406)/0.225); math.Abs(float64(got-want)) > 1e-5 {
			t.Errorf("blue %v, want %v", got, want)
		}
	}
}

// TestDecodersAgree: libjpeg-turbo with DCT scaling and crop, and Go's full
// decode, give nearly the same validation crop of a photo-like JPEG.
func TestDecodersAgree(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "photo.jpg")
	if err := synthetic.WriteImage(p, synthetic.Photo(500, 375, 3, rand.New(rand.NewPCG(1, 2)))); err != nil {
		t.Fatal(err)
	}
	gray := image.NewGray(image.Rect(0, 0, 300, 260))
	for i := range gray.Pix {
		gray.Pix[i] = uint8(i * 7)
	}
	g := filepath.Join(dir, "gray.jpg")
	if err := synthetic.WriteImage(g, gray); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{p, g} {
		turbo, _ := New([]Item{{f, 0}}, Config{})
		goDec, _ := New([]Item{{f, 0}}, Config{Decoder: GoJPEG})
		a, _, err := load(t, turbo, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		b, _, err := load(t, goDec, 0, 0)
		if err != nil {
			t.Fatal(err)
		}
		var diff float64
		for i := range a {
			diff += math.Abs(float64(a[i] - b[i]))
		}
		// In normalised units (1/255/0.226 ≈ 0.017 per grey level): the
		// DCT-scaled decode averages the photo's pixel noise (σ ≈ 24 levels)
		// differently from bilinear taps, some 6 levels on average.
		if mean := diff / float64(len(a)); mean > 0.15 {
			t.Errorf("%s: decoders differ by %.3f on average", filepath.Base(f), mean)
		}
	}
}

func TestTrainingCropsAreRandomButReproducible(t *testing.T) {
	root := t.TempDir()
	if _, err := synthetic.WriteImageFolder(root, 1, 1, 500, 375, 1); err != nil {
		t.Fatal(err)
	}
	items, _, _ := Folders(root)
	ds, _ := New(items, Config{Train: true})
	a, _, _ := load(t, ds, 0, 5)
	b, _, _ := load(t, ds, 0, 5)
	c, _, _ := load(t, ds, 0, 6)
	if !equal(a, b) || equal(a, c) {
		t.Error("same seed should give the same crop and another seed another")
	}
	flips := 0
	for seed := range uint64(200) {
		x, y, w, h := randomResizedCrop(500, 375, rand.New(rand.NewPCG(seed, 0)))
		area, ratio := w*h/(500*375), w/h
		if x < 0 || y < 0 || x+w > 500 || y+h > 375 || area < 0.08-1e-2 || ratio < 0.74 || ratio > 1.34 {
			t.Fatalf("crop %v %v %v %v: area %.3f ratio %.3f", x, y, w, h, area, ratio)
		}
		if rand.New(rand.NewPCG(seed, 1)).IntN(2) == 1 {
			flips++
		}
	}
	if flips < 70 || flips > 130 {
		t.Errorf("%d flips in 200", flips)
	}
}

func equal(a, b []float32) bool {
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestCorruptImagesAreErrorsNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jpg")
	synthetic.WriteImage(good, synthetic.Photo(200, 150, 0, rand.New(rand.NewPCG(1, 1))))
	raw, _ := os.ReadFile(good)
	goodPNG := filepath.Join(dir, "good.png")
	synthetic.WriteImage(goodPNG, synthetic.Photo(64, 64, 0, rand.New(rand.NewPCG(1, 1))))
	rawPNG, _ := os.ReadFile(goodPNG)
	garbled := append([]byte{}, raw...)
	for i := 600; i < len(garbled); i += 37 {
		garbled[i] ^= 0x5a
	}
	files := map[string][]byte{
		"empty.jpg":     {},
		"cut.jpg":       raw[:len(raw)/2],
		"header.jpg":    raw[:300],
		"garbled.jpg":   garbled,
		"cut.png":       rawPNG[:len(rawPNG)/2],
		"text.jpg":      []byte("hello"),
		"fakejpeg.jpeg": {0xff, 0xd8, 0xff},
	}
	for name, b := range files {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		for _, dec := range []Decoder{LibJPEGTurbo, GoJPEG} {
			ds, _ := New([]Item{{p, 0}}, Config{Train: true, Decoder: dec})
			_, _, err := load(t, ds, 0, 1)
			if name == "garbled.jpg" && err == nil {
				continue // flipped entropy-coded bits can still decode, to noise
			}
			// The full path: names such as 1.jpg repeat in every class.
			if err == nil || !strings.HasPrefix(err.Error(), p+": ") {
				t.Errorf("%s with decoder %d: %v", name, dec, err)
			}
		}
	}
	// Through the loader: skipped and counted.
	items := []Item{{good, 0}, {filepath.Join(dir, "cut.jpg"), 1}, {good, 2}}
	ds, _ := New(items, Config{Size: 32, Resize: 40})
	l, _ := data.New(ds, data.Config{BatchSize: 3, Workers: 2, MaxBytes: 1 << 20, SkipBadFiles: true})
	b, err := l.Next()
	if err != nil || b.Skipped != 1 || len(b.Indices) != 2 || b.Tensor("label").I64[1] != 2 {
		t.Errorf("skipping a truncated JPEG: %v", err)
	}
	l.Close()
}

func TestLoaderBatchesImages(t *testing.T) {
	root := t.TempDir()
	if _, err := synthetic.WriteImageFolder(root, 2, 6, 160, 120, 1); err != nil {
		t.Fatal(err)
	}
	items, _, _ := Folders(root)
	ds, _ := New(items, Config{Train: true, Size: 64, Resize: 72, Layout: NHWC})
	l, err := data.New(ds, data.Config{BatchSize: 4, Workers: 2, Prefetch: 1, MaxBytes: 1 << 20, Shuffle: true, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	start, n := time.Now(), 0
	for b, err := l.Next(); err == nil; b, err = l.Next() {
		if got := b.Tensor("image").Shape; got[0] != 4 || got[1] != 64 || got[3] != 3 {
			t.Errorf("image batch shape %v", got)
		}
		n += len(b.Indices)
	}
	if n != 12 {
		t.Errorf("%d images in an epoch of 12", n)
	}
	t.Logf("12 images in %v", time.Since(start))
}

// TestResampleMatchesBilinear checks resample's separable evaluation against
// a direct bilinear tap per output sample, for up- and downscaling crops,
// flips and both layouts. Default builds agree exactly; the bound allows a
// GOAMD64=v3 build to contract the two differently into FMAs.
func TestResampleMatchesBilinear(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 2))
	for n := range 40 {
		cols, rows := 20+rng.IntN(300), 20+rng.IntN(300)
		r := region{pix: make([]byte, 3*cols*rows), stride: 3 * cols, cols: cols, rows: rows}
		for i := range r.pix {
			r.pix[i] = byte(rng.IntN(256))
		}
		r.w, r.h = 1+rng.Float64()*float64(cols-1), 1+rng.Float64()*float64(rows-1)
		r.x, r.y = rng.Float64()*(float64(cols)-r.w), rng.Float64()*(float64(rows)-r.h)
		layout, flip, S := Layout(n%2), n%3 == 0, 16+rng.IntN(240)
		ds, _ := New([]Item{{}}, Config{Size: S, Resize: S, Layout: layout})
		got := make([]float32, 3*S*S)
		ds.resample(r, flip, new(scratch), got)
		sx, sy := r.w/float64(S), r.h/float64(S)
		for oy := range S {
			fy := min(max(r.y+(float64(oy)+0.5)*sy-0.5, 0), float64(rows-1))
			j := min(int(fy), max(rows-2, 0))
			j1, wy := min(j+1, rows-1), float32(fy-float64(j))
			for ox := range S {
				fx := min(max(r.x+(float64(ox)+0.5)*sx-0.5, 0), float64(cols-1))
				i := min(int(fx), max(cols-2, 0))
				i1, wx := min(i+1, cols-1), float32(fx-float64(i))
				dx := ox
				if flip {
					dx = S - 1 - ox
				}
				for c := range 3 {
					p := func(y, x int) float32 { return float32(r.pix[y*r.stride+3*x+c]) }
					a := p(j, i) + wx*(p(j, i1)-p(j, i))
					b := p(j1, i) + wx*(p(j1, i1)-p(j1, i))
					want := (a+wy*(b-a))*(1/(255*ds.cfg.Std[c])) - ds.cfg.Mean[c]/ds.cfg.Std[c]
					at := c*S*S + oy*S + dx
					if layout == NHWC {
						at = (oy*S+dx)*3 + c
					}
					if d := math.Abs(float64(got[at] - want)); d > 1e-5 {
						t.Fatalf("case %d (%dx%d → %d, flip %v, layout %d): output (%d, %d, %d) = %v, want %v", n, cols, rows, S, flip, layout, c, oy, dx, got[at], want)
					}
				}
			}
		}
	}
}

// TestValidationResizeFollowsTheCrop: validation resizes the shorter side
// to torchvision's 256/224 of the crop, at every crop size, unless a size
// is given.
func TestValidationResizeFollowsTheCrop(t *testing.T) {
	for _, c := range []struct{ size, resize, want int }{{224, 0, 256}, {64, 0, 73}, {288, 0, 329}, {224, 232, 232}} {
		ds, err := New([]Item{{Path: "a.jpg"}}, Config{Size: c.size, Resize: c.resize})
		if err != nil {
			t.Fatal(err)
		}
		if ds.cfg.Resize != c.want {
			t.Errorf("crop %d, resize %d: resize %d, want %d", c.size, c.resize, ds.cfg.Resize, c.want)
		}
	}
}

// TestRandomErasing: with probability 1 every training image gets a box of
// zeros (all channels) of 2–33 % of its area, as RandomErasing draws it;
// with 0, or for validation, none.
func TestRandomErasing(t *testing.T) {
	root := t.TempDir()
	if _, err := synthetic.WriteImageFolder(root, 2, 4, 64, 48, 1); err != nil {
		t.Fatal(err)
	}
	items, _, err := Folders(root)
	if err != nil {
		t.Fatal(err)
	}
	zeroShare := func(img []float32, s int) float64 {
		n := 0
		for p := range s * s {
			if img[p] == 0 && img[s*s+p] == 0 && img[2*s*s+p] == 0 {
				n++
			}
		}
		return float64(n) / float64(s*s)
	}
	for _, tc := range []struct {
		train bool
		p     float64
	}{{true, 1}, {true, 0}, {false, 1}} {
		ds, err := New(items, Config{Train: tc.train, Size: 32, RandomErase: tc.p, Decoder: GoJPEG})
		if err != nil {
			t.Fatal(err)
		}
		erased := 0
		for i := range items {
			img, _, err := load(t, ds, i, uint64(i))
			if err != nil {
				t.Fatal(err)
			}
			if z := zeroShare(img, 32); z >= 0.015 {
				if z > 0.34 {
					t.Errorf("image %d: %.0f %% erased, over RandomErasing's 33 %%", i, 100*z)
				}
				erased++
			}
		}
		if want := tc.train && tc.p == 1; (erased >= len(items)-1) != want || (!want && erased > 0) {
			t.Errorf("train %v, p %g: %d of %d images erased", tc.train, tc.p, erased, len(items))
		}
	}
}

// TestHugeJPEGHeaderRefused: a small JPEG whose frame header claims
// 65500 × 65500 pixels is refused by both decoders, naming the file, as
// PIL refuses a decompression bomb, instead of decoding to garbage.
func TestHugeJPEGHeaderRefused(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.jpg")
	synthetic.WriteImage(good, synthetic.Photo(64, 48, 0, rand.New(rand.NewPCG(1, 1))))
	raw, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	sof := -1
	for i := 2; i+9 < len(raw); i++ {
		if raw[i] == 0xff && (raw[i+1] == 0xc0 || raw[i+1] == 0xc2) {
			sof = i
			break
		}
	}
	if sof < 0 {
		t.Fatal("no SOF marker in the synthetic JPEG")
	}
	raw[sof+5], raw[sof+6], raw[sof+7], raw[sof+8] = 0xff, 0xdc, 0xff, 0xdc // height, width 65500
	p := filepath.Join(dir, "bomb.jpg")
	os.WriteFile(p, raw, 0o644)
	for _, train := range []bool{true, false} {
		for _, dec := range []Decoder{LibJPEGTurbo, GoJPEG} {
			ds, _ := New([]Item{{p, 0}}, Config{Train: train, Decoder: dec, Size: 32, Resize: 40})
			_, _, err := load(t, ds, 0, 1)
			if err == nil || !strings.HasPrefix(err.Error(), p+": ") || !strings.Contains(err.Error(), "65500 × 65500 pixels") {
				t.Errorf("decoder %d, train %v: %v, want the 65500 × 65500 header refused naming the file", dec, train, err)
			}
		}
	}
}
