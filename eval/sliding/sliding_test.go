package sliding

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// TestStarts checks window positions against hand-computed MONAI
// dense_patch_slices results, including the flush-with-the-end window.
func TestStarts(t *testing.T) {
	tests := []struct {
		size, patch int
		overlap     float64
		want        []int
	}{
		{10, 4, 0.5, []int{0, 2, 4, 6}},
		{11, 4, 0.5, []int{0, 2, 4, 6, 7}},
		{10, 4, 0, []int{0, 4, 6}},
		{8, 4, 0, []int{0, 4}},
		{4, 4, 0.5, []int{0}},
		{5, 4, 0.25, []int{0, 1}},         // interval int(4·0.75) = 3, then flush at 1
		{7, 3, 0.9, []int{0, 1, 2, 3, 4}}, // int(0.3) = 0 → interval 1
		{10, 10, 0.7, []int{0}},
		{100, 64, 0.25, []int{0, 36}},
		{604, 64, 0.5, append(seq(0, 540, 32), 540)},
	}
	for _, tc := range tests {
		got, err := Starts(tc.size, tc.patch, Interval(tc.patch, tc.overlap))
		if err != nil {
			t.Errorf("Starts(%d, %d, overlap %v): %v", tc.size, tc.patch, tc.overlap, err)
			continue
		}
		if !slices.Equal(got, tc.want) {
			t.Errorf("Starts(%d, %d, overlap %v) = %v, want %v", tc.size, tc.patch, tc.overlap, got, tc.want)
		}
	}
}

func seq(from, to, step int) []int {
	var s []int
	for i := from; i < to; i += step {
		s = append(s, i)
	}
	return s
}

// TestInterval checks MONAI's truncation int(patch·(1−overlap)) and the
// floor of 1, with the same float64 rounding Python uses.
func TestInterval(t *testing.T) {
	tests := []struct {
		patch   int
		overlap float64
		want    int
	}{
		{64, 0.25, 48}, {64, 0.5, 32}, {64, 0, 64}, {10, 0.7, 3}, {10, 0.9, 1}, {3, 0.9, 1}, {96, 0.625, 36},
	}
	for _, tc := range tests {
		if got := Interval(tc.patch, tc.overlap); got != tc.want {
			t.Errorf("Interval(%d, %v) = %d, want %d", tc.patch, tc.overlap, got, tc.want)
		}
	}
}

// TestImportanceMapGaussian checks the map's peak, symmetry, σ and floor.
func TestImportanceMapGaussian(t *testing.T) {
	for _, patch := range [][3]int{{5, 7, 9}, {4, 6, 8}, {16, 16, 16}, {1, 3, 2}} {
		m, err := ImportanceMap(patch, Gaussian, 0)
		if err != nil {
			t.Fatal(err)
		}
		pd, ph, pw := patch[0], patch[1], patch[2]
		at := func(z, y, x int) float32 { return m[(z*ph+y)*pw+x] }
		if peak := slices.Max(m); peak != 1 {
			t.Errorf("%v: max %v, want 1", patch, peak)
		}
		if c := at(pd/2, ph/2, pw/2); c != 1 {
			t.Errorf("%v: value at the centre voxel %v, want 1", patch, c)
		}
		for z := range pd {
			for y := range ph {
				for x := range pw {
					v := at(z, y, x)
					for _, mirror := range []float32{at(pd-1-z, y, x), at(z, ph-1-y, x), at(z, y, pw-1-x)} {
						if v != mirror {
							t.Fatalf("%v: map not symmetric at (%d,%d,%d): %v vs %v", patch, z, y, x, v, mirror)
						}
					}
					if v < minWeight || v > 1 {
						t.Fatalf("%v: value %v at (%d,%d,%d) outside [1e-3, 1]", patch, v, z, y, x)
					}
				}
			}
		}
	}
	// Odd 9×9×9 patch, σ = 0.125·9: one voxel from the centre along x the
	// weight is exp(−1/(2σ²)); the corner is below 1e-3 and gets the floor.
	m, err := ImportanceMap([3]int{9, 9, 9}, Gaussian, 0)
	if err != nil {
		t.Fatal(err)
	}
	sigma := 0.125 * 9
	want := math.Exp(-1 / (2 * sigma * sigma))
	if got := float64(m[(4*9+4)*9+5]); math.Abs(got-want) > 1e-7 {
		t.Errorf("9³ map one voxel off centre = %v, want %v", got, want)
	}
	if m[0] != float32(minWeight) {
		t.Errorf("9³ map corner = %v, want the floor %v", m[0], minWeight)
	}
	// A wide σ keeps the corner above 1e-3, so no clamping happens there.
	m, err = ImportanceMap([3]int{4, 4, 4}, Gaussian, 1)
	if err != nil {
		t.Fatal(err)
	}
	d := 1.5 // corner distance from the centre 1.5 along each axis
	peak := math.Exp(-0.25 / 32)
	want = math.Pow(math.Exp(-d*d/32)/peak, 3)
	if got := float64(m[0]); math.Abs(got-want) > 1e-6 {
		t.Errorf("4³ map with σ = 4: corner %v, want %v", got, want)
	}
}

// TestImportanceMapConstant checks that constant mode weighs all voxels 1.
func TestImportanceMapConstant(t *testing.T) {
	m, err := ImportanceMap([3]int{2, 3, 4}, Constant, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 24 || slices.Min(m) != 1 || slices.Max(m) != 1 {
		t.Errorf("constant map = %v, want 24 ones", m)
	}
}

func randomVolume(n int, seed uint64) []float32 {
	r := rand.New(rand.NewPCG(seed, 1))
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64()*100 + 50)
	}
	return v
}

// addConst returns a predictor that adds c to every value, recording the
// batch sizes it was called with.
func addConst(c float32, calls *[]int) PredictFunc {
	return func(batch []float32, n int) ([]float32, error) {
		*calls = append(*calls, n)
		out := make([]float32, len(batch))
		for i, v := range batch {
			out[i] = v + c
		}
		return out, nil
	}
}

// TestInferIdentity checks that an identity (and a +constant) predictor
// reproduces the input (plus the constant) in both modes, for several
// overlaps, batch sizes, channel counts and sizes the patch does not divide.
// Exactness is up to float32 rounding of Σw·x/Σw: at most a few ulp.
func TestInferIdentity(t *testing.T) {
	tests := []struct {
		shape    [3]int
		patch    [3]int
		overlap  float64
		batch    int
		channels int
	}{
		{[3]int{10, 11, 13}, [3]int{4, 5, 6}, 0.5, 3, 1},
		{[3]int{10, 11, 13}, [3]int{4, 5, 6}, 0, 1, 1},
		{[3]int{9, 9, 9}, [3]int{9, 4, 3}, 0.25, 4, 2},
		{[3]int{17, 6, 20}, [3]int{8, 6, 7}, 0.75, 5, 1},
		{[3]int{12, 12, 12}, [3]int{3, 3, 3}, 0.9, 64, 3},
	}
	for _, tc := range tests {
		c := max(tc.channels, 1)
		vol := randomVolume(c*tc.shape[0]*tc.shape[1]*tc.shape[2], 7)
		for _, mode := range []Mode{Constant, Gaussian} {
			for _, add := range []float32{0, 3.5} {
				var calls []int
				opt := Options{Patch: tc.patch, Overlap: tc.overlap, Mode: mode, BatchSize: tc.batch, Channels: tc.channels, Workers: 3}
				out, err := Infer(context.Background(), vol, tc.shape, opt, addConst(add, &calls))
				if err != nil {
					t.Fatalf("%v %v %v: %v", tc.shape, tc.patch, mode, err)
				}
				for i := range vol {
					want := vol[i] + add
					if d := math.Abs(float64(out[i] - want)); d > 4e-6*math.Max(1, math.Abs(float64(want))) {
						t.Fatalf("%v patch %v overlap %v %v +%v: voxel %d = %v, want %v", tc.shape, tc.patch, tc.overlap, mode, add, i, out[i], want)
					}
				}
				var g geometry
				for i := range 3 {
					g.starts[i], _ = Starts(tc.shape[i], tc.patch[i], Interval(tc.patch[i], tc.overlap))
				}
				if sum(calls) != g.windows() || slices.Max(calls) > tc.batch {
					t.Errorf("%v: predictor batch sizes %v, want %d windows in batches ≤ %d", tc.shape, calls, g.windows(), tc.batch)
				}
			}
		}
	}
}

func sum(s []int) int {
	t := 0
	for _, v := range s {
		t += v
	}
	return t
}

// TestInferBlends checks the blending itself: a predictor whose output is
// the window's index makes each voxel the weighted mean of the indices of
// the windows covering it, computed here by brute force.
func TestInferBlends(t *testing.T) {
	shape, patch := [3]int{7, 6, 9}, [3]int{4, 4, 5}
	for _, mode := range []Mode{Constant, Gaussian} {
		opt := Options{Patch: patch, Overlap: 0.5, Mode: mode, BatchSize: 2}
		window := 0
		predict := func(batch []float32, n int) ([]float32, error) {
			out := make([]float32, len(batch))
			per := len(batch) / n
			for k := range n {
				for i := range per {
					out[k*per+i] = float32(window)
				}
				window++
			}
			return out, nil
		}
		out, err := Infer(context.Background(), make([]float32, shape[0]*shape[1]*shape[2]), shape, opt, predict)
		if err != nil {
			t.Fatal(err)
		}
		w, _ := ImportanceMap(patch, mode, 0)
		g, _ := plan(len(out), shape, opt)
		num := make([]float64, len(out))
		den := make([]float64, len(out))
		for k := range g.windows() {
			o := g.origin(k)
			for z := range patch[0] {
				for y := range patch[1] {
					for x := range patch[2] {
						v := ((o[0]+z)*shape[1]+o[1]+y)*shape[2] + o[2] + x
						wt := float64(w[(z*patch[1]+y)*patch[2]+x])
						num[v] += wt * float64(k)
						den[v] += wt
					}
				}
			}
		}
		for i := range out {
			if want := num[i] / den[i]; math.Abs(float64(out[i])-want) > 1e-5*math.Max(1, want) {
				t.Fatalf("%v: voxel %d = %v, want %v", mode, i, out[i], want)
			}
		}
	}
}

// TestInferErrors checks that bad input is refused with a message naming
// the numbers involved, and that no predictor output is trusted blindly.
func TestInferErrors(t *testing.T) {
	ok := func(b []float32, n int) ([]float32, error) { return b, nil }
	short := func(b []float32, n int) ([]float32, error) { return b[1:], nil }
	boom := errors.New("session closed")
	failing := func(b []float32, n int) ([]float32, error) { return nil, boom }
	vol := make([]float32, 8*8*8)
	patch := [3]int{4, 4, 4}
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		vol     []float32
		shape   [3]int
		opt     Options
		predict PredictFunc
		want    string
	}{
		{"too small", context.Background(), make([]float32, 8*3*8), [3]int{8, 3, 8}, Options{Patch: patch}, ok, "volume shape [8 3 8] is smaller than the patch [4 4 4] along axis 1"},
		{"length", context.Background(), vol[:500], [3]int{8, 8, 8}, Options{Patch: patch}, ok, "volume has 500 values, shape 1×[8 8 8] needs 512"},
		{"channels", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, Channels: 2}, ok, "volume has 512 values, shape 2×[8 8 8] needs 1024"},
		{"overlap 1", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, Overlap: 1}, ok, "overlap 1, want a fraction in [0, 1)"},
		{"overlap NaN", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, Overlap: math.NaN()}, ok, "overlap NaN"},
		{"zero patch", context.Background(), vol, [3]int{8, 8, 8}, Options{}, ok, "patch size [0 0 0]"},
		{"mode", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, Mode: 7}, ok, "unknown blend mode Mode(7)"},
		{"sigma", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, Mode: Gaussian, SigmaScale: -1}, ok, "sigma scale -1"},
		{"nil predictor", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch}, nil, "nil predictor"},
		{"short output", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch, BatchSize: 2}, short, "predictor returned 127 values for 2 windows of 1×[4 4 4], want 128"},
		{"predictor error", context.Background(), vol, [3]int{8, 8, 8}, Options{Patch: patch}, failing, "predicting windows 1–1 of 8: session closed"},
		{"cancelled", cancelled, vol, [3]int{8, 8, 8}, Options{Patch: patch}, ok, "context canceled"},
	}
	for _, tc := range tests {
		_, err := Infer(tc.ctx, tc.vol, tc.shape, tc.opt, tc.predict)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
	}
	if _, err := Starts(3, 4, 1); err == nil || !strings.Contains(err.Error(), "size 3 is smaller than the patch size 4") {
		t.Errorf("Starts(3, 4, 1): error %v", err)
	}
}

// BenchmarkInfer blends a 256×256×128 volume from 64³ windows with 50 %
// overlap (7·7·3 = 147 windows) through an identity predictor, so it
// measures the copying and blending Infer adds around a model.
func BenchmarkInfer(b *testing.B) {
	shape := [3]int{128, 256, 256}
	vol := randomVolume(shape[0]*shape[1]*shape[2], 1)
	identity := func(batch []float32, n int) ([]float32, error) { return batch, nil }
	for _, mode := range []Mode{Constant, Gaussian} {
		b.Run(mode.String(), func(b *testing.B) {
			opt := Options{Patch: [3]int{64, 64, 64}, Overlap: 0.5, Mode: mode, BatchSize: 4}
			b.SetBytes(int64(4 * len(vol)))
			for b.Loop() {
				if _, err := Infer(context.Background(), vol, shape, opt, identity); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestInferProgress: Progress hears of every predictor call with the
// windows done so far and the total, which Windows gives up front.
func TestInferProgress(t *testing.T) {
	shape := [3]int{10, 11, 13}
	opt := Options{Patch: [3]int{4, 5, 6}, Overlap: 0.5, BatchSize: 3}
	total, err := Windows(shape, opt)
	if err != nil {
		t.Fatal(err)
	}
	if want := 4 * 4 * 4; total != want { // starts 0,2,4,6 / 0,2,4,6 / 0,3,6,7
		t.Errorf("Windows = %d, want %d", total, want)
	}
	var seen [][2]int
	opt.Progress = func(done, n int) { seen = append(seen, [2]int{done, n}) }
	var calls []int
	if _, err := Infer(context.Background(), randomVolume(10*11*13, 1), shape, opt, addConst(0, &calls)); err != nil {
		t.Fatal(err)
	}
	if len(seen) != len(calls) || seen[len(seen)-1] != [2]int{total, total} || seen[0] != [2]int{3, total} {
		t.Errorf("progress %v for batches %v, want one call per batch ending at %d/%d", seen, calls, total, total)
	}
	if _, err := Windows(shape, Options{Patch: opt.Patch, Overlap: math.NaN()}); err == nil {
		t.Error("Windows with overlap NaN: no error")
	}
}
