package volumes

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/npy"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

func TestGridCoversTheEdges(t *testing.T) {
	for _, tc := range []struct {
		size, patch, stride int
		want                []int
	}{
		// The seed configuration: 512×512×604 CT, 256×256×128 patches,
		// stride 192×192×96.
		{512, 256, 192, []int{0, 192, 256}},
		{604, 128, 96, []int{0, 96, 192, 288, 384, 476}},
		{10, 4, 4, []int{0, 4, 6}},
		{8, 4, 4, []int{0, 4}},
		{3, 4, 2, []int{0}}, // shorter than a patch: one, padded
		{4, 4, 1, []int{0}},
	} {
		got := Grid(tc.size, tc.patch, tc.stride)
		if !slices.Equal(got, tc.want) {
			t.Errorf("Grid(%d, %d, %d) = %v, want %v", tc.size, tc.patch, tc.stride, got, tc.want)
		}
		if last := got[len(got)-1]; tc.size >= tc.patch && last+tc.patch != tc.size {
			t.Errorf("Grid(%d, %d, %d) leaves the edge uncovered", tc.size, tc.patch, tc.stride)
		}
	}
}

func TestWindowMapsToMinusOneOne(t *testing.T) {
	v := []float32{-2000, -1000, 0, 500, 1000, 3000}
	Apply(Window{-1000, 1000}, v)
	if want := []float32{-1, -1, 0, 0.5, 1, 1}; !slices.EqualFunc(v, want, near) {
		t.Errorf("HU window [-1000, 1000] gave %v, want %v", v, want)
	}
	v = []float32{10, 20, 30}
	Apply(Window{}, v)
	if want := []float32{-1, 0, 1}; !slices.EqualFunc(v, want, near) {
		t.Errorf("per-volume range gave %v, want %v", v, want)
	}
}

func near(a, b float32) bool { return a-b < 1e-6 && b-a < 1e-6 }

func phantoms(t testing.TB, n int, size [3]int) []string {
	t.Helper()
	paths, err := synthetic.WritePhantoms(t.TempDir(), n, size, 20, 1)
	if err != nil {
		t.Fatal(err)
	}
	return paths
}

func TestSplitIsByPatientNeverByPatch(t *testing.T) {
	// Two files per patient, in folders named by patient.
	dir := t.TempDir()
	var files []string
	for _, p := range phantoms(t, 10, [3]int{8, 8, 6}) {
		patient := fmt.Sprintf("p%d", len(files)/2)
		os.MkdirAll(filepath.Join(dir, patient), 0o755)
		dst := filepath.Join(dir, patient, filepath.Base(p))
		if err := os.Rename(p, dst); err != nil {
			t.Fatal(err)
		}
		files = append(files, dst)
	}
	cfg := Config{Files: files, Root: dir, TrainSplit: 0.6, SplitSeed: 3, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 2}, CacheBytes: 1 << 20}
	train, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Val = true
	val, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(train.Patients()) != 3 || len(val.Patients()) != 2 {
		t.Errorf("5 patients at 0.6 split as %v / %v", train.Patients(), val.Patients())
	}
	for _, p := range train.Patients() {
		if slices.Contains(val.Patients(), p) {
			t.Errorf("patient %s is in both splits", p)
		}
	}
	if len(train.Files()) != 6 || train.Len() != 6*2*2*2 {
		t.Errorf("train has %d files and %d patches, want 6 and 48", len(train.Files()), train.Len())
	}
	cfg.Val, cfg.MaxPatients = false, 2
	few, _ := New(cfg)
	if got := len(few.Patients()) + 0; got != 1 { // round(0.6 × 2)
		t.Errorf("max 2 patients gave %d in train", got)
	}
}

func TestPatchesComeFromTheVolumeAndGzipIsPaidOnce(t *testing.T) {
	files := phantoms(t, 3, [3]int{20, 18, 9})
	ds, err := New(Config{Files: files, TrainSplit: 1, PatchSize: [3]int{8, 8, 4}, Stride: [3]int{6, 6, 4}, Window: Window{-1000, 1000}, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	l, err := data.New(ds, data.Config{BatchSize: 4, Workers: 2, Prefetch: 2, MaxBytes: 2 << 20, Shuffle: true, Epochs: 2})
	if err != nil {
		t.Fatal(err)
	}
	vols := map[int][]float32{}
	for i, f := range ds.Files() {
		v, err := nifti.Read(f)
		if err != nil {
			t.Fatal(err)
		}
		Apply(Window{-1000, 1000}, v.Data)
		vols[i] = v.Data
	}
	n := 0
	for b, err := l.Next(); err == nil; b, err = l.Next() {
		x, idx := b.Tensor("volume"), b.Tensor("index").I64
		if !slices.Equal(x.Shape, []int{len(b.Indices), 1, 4, 8, 8}) {
			t.Fatalf("batch shape %v", x.Shape)
		}
		for r := range len(b.Indices) {
			v, px, py, pz := int(idx[4*r]), int(idx[4*r+1]), int(idx[4*r+2]), int(idx[4*r+3])
			for k, got := range x.F32[r*256 : (r+1)*256] {
				x, y, z := px+k%8, py+k/8%8, pz+k/64
				want := float32(-1)
				if x < 20 && y < 18 && z < 9 {
					want = vols[v][(z*18+y)*20+x]
				}
				if got != want {
					t.Fatalf("patch of volume %d at (%d,%d,%d): voxel %d = %v, want %v", v, px, py, pz, k, got, want)
				}
			}
			n++
		}
	}
	if n != 2*ds.Len() || ds.Len() != 3*3*3*3 {
		t.Errorf("%d patches over 2 epochs of %d", n, ds.Len())
	}
	if ds.Decodes() != 3 {
		t.Errorf("3 volumes decoded %d times with a cache that holds all", ds.Decodes())
	}
}

func TestSmallCacheStaysWithinItsBound(t *testing.T) {
	files := phantoms(t, 4, [3]int{16, 16, 8}) // 8 KiB each decoded
	ds, err := New(Config{Files: files, TrainSplit: 1, PatchSize: [3]int{8, 8, 8}, Stride: [3]int{8, 8, 8}, CacheBytes: 2 * 8192})
	if err != nil {
		t.Fatal(err)
	}
	l, _ := data.New(ds, data.Config{BatchSize: 2, Workers: 4, MaxBytes: 1 << 20, Shuffle: true, Epochs: 3})
	for _, err := l.Next(); err == nil; _, err = l.Next() {
		ds.cache.mu.Lock()
		used := ds.cache.used
		ds.cache.mu.Unlock()
		if used > 2*8192 {
			t.Fatalf("cache holds %d bytes, bound %d", used, 2*8192)
		}
	}
	if ds.Decodes() <= 4 {
		t.Errorf("a 2-volume cache over 4 volumes decoded only %d times", ds.Decodes())
	}
	if _, err := New(Config{Files: files, TrainSplit: 1, PatchSize: [3]int{8, 8, 8}, Stride: [3]int{8, 8, 8}, CacheBytes: 8000}); err == nil || !strings.Contains(err.Error(), "cannot hold the largest decoded volume (8.0 KiB)") {
		t.Errorf("a cache smaller than a volume: %v", err)
	}
}

func TestBadVolumesNameTheFileOrAreSkipped(t *testing.T) {
	files := phantoms(t, 3, [3]int{8, 8, 8})
	raw, _ := os.ReadFile(files[1])
	os.WriteFile(files[1], raw[:len(raw)/2], 0o644) // header intact, data cut
	os.WriteFile(files[2], []byte("not a volume at all, just text"), 0o644)
	cfg := Config{Files: files, TrainSplit: 1, PatchSize: [3]int{8, 8, 8}, Stride: [3]int{8, 8, 8}, CacheBytes: 1 << 20}
	if _, err := New(cfg); err == nil || !strings.Contains(err.Error(), "patient002.nii.gz: ") {
		t.Errorf("bad header: %v", err)
	}
	cfg.SkipBadFiles = true
	ds, err := New(cfg)
	if err != nil || len(ds.Skipped()) != 1 || ds.Len() != 2 {
		t.Fatalf("skipping: %v, %d skipped, %d patches", err, len(ds.Skipped()), ds.Len())
	}
	l, _ := data.New(ds, data.Config{BatchSize: 2, Workers: 1, MaxBytes: 1 << 21})
	if _, err := l.Next(); err == nil || !strings.Contains(err.Error(), "patient001.nii.gz: truncated") {
		t.Errorf("truncated data: %v", err)
	}
	l, _ = data.New(ds, data.Config{BatchSize: 2, Workers: 1, MaxBytes: 1 << 21, SkipBadFiles: true})
	b, err := l.Next()
	if err != nil || len(b.Indices) != 1 || b.Skipped != 1 {
		t.Errorf("skipping truncated data: %v", err)
	}
}

func TestRealMRIVolume(t *testing.T) {
	ch2 := "/usr/share/mricron/templates/ch2.nii.gz"
	if _, err := os.Stat(ch2); err != nil {
		t.Fatalf("%v: install it with `apt-get install -y mricron-data` (listed in scripts/deps.apt)", err)
	}
	ds, err := New(Config{Files: []string{ch2}, TrainSplit: 1, PatchSize: [3]int{96, 96, 64}, Stride: [3]int{64, 64, 48}, CacheBytes: 32 << 20})
	if err != nil {
		t.Fatal(err)
	}
	// 181×217×181: x and y at 0, 64, 85 / 0, 64, 121; z at 0, 48, 96, 117.
	if ds.Len() != 3*3*4 {
		t.Errorf("%d patches, want 36", ds.Len())
	}
	l, err := data.New(ds, data.Config{BatchSize: 6, Workers: 2, MaxBytes: 80 << 20, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var lo, hi float32 = 1, -1
	for b, err := l.Next(); err == nil; b, err = l.Next() {
		for _, v := range b.Tensor("volume").F32 {
			lo, hi = min(lo, v), max(hi, v)
		}
	}
	if lo != -1 || hi != 1 || ds.Decodes() != 1 {
		t.Errorf("ch2 patches span [%v, %v] after min-max windowing, decoded %d times", lo, hi, ds.Decodes())
	}
	t.Logf("36 patches of ch2 in %v", time.Since(start))
}

// TestPaddedVolumesAreListed: volumes smaller than the patch along an axis
// (a single slice here) are padded, and listed with their size so train
// can say so; volumes that fit are not.
func TestPaddedVolumesAreListed(t *testing.T) {
	flat := phantoms(t, 1, [3]int{12, 12, 1})
	full := phantoms(t, 1, [3]int{12, 12, 8})
	ds, err := New(Config{Files: append(flat, full...), TrainSplit: 1, PatchSize: [3]int{8, 8, 4}, Stride: [3]int{8, 8, 4}, Window: Window{-1000, 1000}, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if p := ds.Padded(); len(p) != 1 || !strings.Contains(p[0], flat[0]) || !strings.Contains(p[0], "12×12×1") {
		t.Errorf("Padded() = %v, want only %s (12×12×1)", p, flat[0])
	}
}

// TestNumPyVolumes: a volume saved as a NumPy array indexed [z, y, x] (in
// C order, with or without a leading channel axis, or in Fortran order:
// np.asfortranarray of it) is found next to NIfTI files and gives the
// patches the NIfTI file of the same voxels gives; its patient is the
// file's name.
func TestNumPyVolumes(t *testing.T) {
	files := phantoms(t, 1, [3]int{12, 10, 6})
	ref, err := nifti.Read(files[0])
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(files[0])
	// The same voxels in memory order, x fastest: shape (z, y, x) in C order.
	if err := npy.Write(filepath.Join(dir, "lidc0001.npy"), []int{6, 10, 12}, ref.Data); err != nil {
		t.Fatal(err)
	}
	if err := npy.Write(filepath.Join(dir, "lidc0002.npy"), []int{1, 6, 10, 12}, ref.Data); err != nil {
		t.Fatal(err)
	}
	// The same array in Fortran order, shape (z, y, x) = (6, 10, 12) with
	// z fastest in the file: the bytes of the C-order array [x, y, z].
	xyzOrder := make([]float32, len(ref.Data))
	for z := range 6 {
		for y := range 10 {
			for x := range 12 {
				xyzOrder[(x*10+y)*6+z] = ref.Data[(z*10+y)*12+x]
			}
		}
	}
	if err := npy.Write(filepath.Join(dir, "lidc0003.npy"), []int{12, 10, 6}, xyzOrder); err != nil {
		t.Fatal(err)
	}
	raw, _ := os.ReadFile(filepath.Join(dir, "lidc0003.npy"))
	fortran := strings.Replace(string(raw), "'fortran_order': False, 'shape': (12, 10, 6)", "'fortran_order': True, 'shape': (6, 10, 12) ", 1)
	os.WriteFile(filepath.Join(dir, "lidc0003.npy"), []byte(fortran), 0o644)
	// A 2-D array is not a volume.
	npy.Write(filepath.Join(dir, "slice.npy"), []int{10, 12}, ref.Data[:120])

	found, err := Find(dir)
	if err != nil || len(found) != 5 {
		t.Fatalf("Find: %v, %v; want the NIfTI file and four arrays", found, err)
	}
	if _, err := New(Config{Files: found, TrainSplit: 1, PatchSize: [3]int{8, 8, 4}, Stride: [3]int{4, 4, 2}, CacheBytes: 1 << 20}); err == nil ||
		!strings.Contains(err.Error(), filepath.Join(dir, "slice.npy")) || !strings.Contains(err.Error(), "2-D array") {
		t.Errorf("a 2-D array: %v, want an error naming it", err)
	}
	os.Remove(filepath.Join(dir, "slice.npy"))
	found, _ = Find(dir)
	ds, err := New(Config{Files: found, TrainSplit: 1, PatchSize: [3]int{8, 8, 4}, Stride: [3]int{4, 4, 2}, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if got := ds.Patients(); len(got) != 4 || !slices.Contains(got, "lidc0003") {
		t.Errorf("patients %v", got)
	}
	patches := map[string][][]float32{}
	l, err := data.New(ds, data.Config{BatchSize: 1, Workers: 1, MaxBytes: 2 << 20, Epochs: 1})
	if err != nil {
		t.Fatal(err)
	}
	for b, err := l.Next(); err == nil; b, err = l.Next() {
		name := Name(ds.Files()[b.Tensor("index").I64[0]])
		patches[name] = append(patches[name], slices.Clone(b.Tensor("volume").F32))
	}
	want := patches[Name(files[0])]
	if len(want) == 0 {
		t.Fatal("no patches of the NIfTI volume")
	}
	for _, name := range []string{"lidc0001", "lidc0002", "lidc0003"} {
		if h := ds.Header(slices.IndexFunc(ds.Files(), func(f string) bool { return Name(f) == name })); !slices.Equal(h.Shape(), []int{12, 10, 6}) {
			t.Errorf("%s: shape %v, want x, y, z = [12 10 6]", name, h.Shape())
		}
		got := patches[name]
		if len(got) != len(want) {
			t.Errorf("%s: %d patches, the NIfTI volume %d", name, len(got), len(want))
			continue
		}
		for i := range want {
			if !slices.Equal(got[i], want[i]) {
				t.Errorf("%s: patch %d differs from the NIfTI volume's", name, i)
				break
			}
		}
	}
}
