package volumes

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/npy"
)

// writeVolume writes an x×y×z float32 NIfTI volume of data (zeros if nil)
// at root/rel, making its folders.
func writeVolume(t testing.TB, root, rel string, size [3]int, values []float32) string {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	var h nifti.Header
	h.Dim = [8]int64{3, int64(size[0]), int64(size[1]), int64(size[2]), 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	if values == nil {
		values = make([]float32, size[0]*size[1]*size[2])
	}
	if err := nifti.Write(p, h, values); err != nil {
		t.Fatal(err)
	}
	return p
}

func rels(t testing.TB, root string, paths []string) []string {
	t.Helper()
	var out []string
	for _, p := range paths {
		r, err := filepath.Rel(root, p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, filepath.ToSlash(r))
	}
	return out
}

// TestPatientsByFolder: in a one-folder-per-patient dataset (KiTS's
// case_NNNNN/imaging.nii.gz, nested LIDC-style folders) the patient is the
// top-level folder, so five cases split 4/1 and one patient's files never
// straddle the split; a volume's ID is its path under the root without
// the extension. A flat folder keeps one patient per file.
func TestPatientsByFolder(t *testing.T) {
	root := t.TempDir()
	for _, c := range []string{"case_00000", "case_00001", "case_00002", "case_00003", "case_00004"} {
		writeVolume(t, root, c+"/imaging.nii.gz", [3]int{4, 4, 4}, nil)
	}
	// A patient with two series in nested folders, and one file at the
	// top level, which is its own patient.
	writeVolume(t, root, "LIDC-0001/study/series1.nii.gz", [3]int{4, 4, 4}, nil)
	writeVolume(t, root, "LIDC-0001/study/series2.nii", [3]int{4, 4, 4}, nil)
	writeVolume(t, root, "loose.nii.gz", [3]int{4, 4, 4}, nil)
	files, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"LIDC-0001/study/series1", "LIDC-0001/study/series2", "case_00000/imaging", "case_00001/imaging",
		"case_00002/imaging", "case_00003/imaging", "case_00004/imaging", "loose"}
	var ids []string
	for _, f := range files {
		ids = append(ids, ID(root, f))
	}
	if !slices.Equal(ids, want) {
		t.Errorf("IDs %v, want %v", ids, want)
	}
	if p := Patient(root, files[1]); p != "LIDC-0001" {
		t.Errorf("patient of %s = %q, want LIDC-0001", files[1], p)
	}
	if got := ID("", files[2]); got != "imaging" {
		t.Errorf("ID without a root = %q, want the name", got)
	}

	cfg := Config{Files: files, Root: root, TrainSplit: 0.8, SplitSeed: 1, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20}
	train, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Val = true
	val, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 7 patients at 0.8: round(5.6) = 6 train, 1 validates.
	if len(train.Patients()) != 6 || len(val.Patients()) != 1 {
		t.Errorf("7 patients at 0.8 split as %v / %v", train.Patients(), val.Patients())
	}
	if len(train.Files())+len(val.Files()) != 8 {
		t.Errorf("%d + %d files, want all 8", len(train.Files()), len(val.Files()))
	}
	lidc := func(ds *Dataset) int {
		n := 0
		for _, f := range ds.Files() {
			if strings.Contains(f, "LIDC-0001") {
				n++
			}
		}
		return n
	}
	if a, b := lidc(train), lidc(val); a*b != 0 || a+b != 2 {
		t.Errorf("LIDC-0001's two series: %d in train, %d in validation", a, b)
	}

	// The KiTS cases alone: five patients, not one called "imaging".
	kits := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return !strings.Contains(f, "case_") })
	cfg = Config{Files: kits, Root: root, TrainSplit: 0.8, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20}
	train, err = New(cfg)
	cfg.Val = true
	val, verr := New(cfg)
	if err != nil || verr != nil || len(train.Patients()) != 4 || len(val.Patients()) != 1 || !strings.HasPrefix(val.Patients()[0], "case_") {
		t.Errorf("KiTS layout at 0.8: %v, %v; want 4 cases / 1", err, verr)
	} else if len(train.Files()) != 4 {
		t.Errorf("KiTS layout at 0.8: %d training files, want 4", len(train.Files()))
	}
}

// TestSplitKeepsAPatientOnEachSide: a split below 1 of two or more
// patients never leaves a side empty (round(0.9 × n) = n for n ≤ 4), with
// or without max_patients; one patient is a SplitError on the validation
// side.
func TestSplitKeepsAPatientOnEachSide(t *testing.T) {
	root := t.TempDir()
	var files []string
	for _, name := range []string{"a", "b", "c", "d"} {
		files = append(files, writeVolume(t, root, name+".nii", [3]int{4, 4, 4}, nil))
	}
	for _, tc := range []struct {
		n, max     int
		split      float64
		train, val int
	}{
		{4, 0, 0.9, 3, 1}, {3, 0, 0.9, 2, 1}, {2, 0, 0.9, 1, 1}, {4, 2, 0.9, 1, 1}, {4, 0, 0.1, 1, 3}, {4, 0, 0.5, 2, 2},
	} {
		cfg := Config{Files: files[:tc.n], Root: root, TrainSplit: tc.split, MaxPatients: tc.max, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20}
		train, err := New(cfg)
		cfg.Val = true
		val, verr := New(cfg)
		if err != nil || verr != nil || len(train.Patients()) != tc.train || len(val.Patients()) != tc.val {
			t.Errorf("%d patients (max %d) at %g: %v %v, want %d / %d", tc.n, tc.max, tc.split, err, verr, tc.train, tc.val)
			continue
		}
		if got := SplitFiles(cfg); len(got) != tc.val {
			t.Errorf("SplitFiles of the validation side: %v", got)
		}
	}
	cfg := Config{Files: files[:1], Root: root, TrainSplit: 0.9, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20}
	if train, err := New(cfg); err != nil || len(train.Patients()) != 1 {
		t.Errorf("one patient trains: %v", err)
	}
	cfg.Val = true
	var se *SplitError
	if _, err := New(cfg); !errors.As(err, &se) || se.Patients != 1 || !strings.Contains(err.Error(), "leaves none for validation") {
		t.Errorf("one patient's validation side: %v, want a SplitError", err)
	}
}

// TestFindFollowsLinksAndSkipsHidden: a data folder that is a symbolic
// link, linked sub-folders and files are read (each once, a link cycle
// ending), hidden files and folders are not, extensions match in any case,
// and a folder without volumes or a missing one is a FindError naming its
// absolute path.
func TestFindFollowsLinksAndSkipsHidden(t *testing.T) {
	store := t.TempDir()
	writeVolume(t, store, "p1/a.nii.gz", [3]int{4, 4, 4}, nil)
	writeVolume(t, store, "p2/b.nii", [3]int{4, 4, 4}, nil)
	writeVolume(t, store, "other/c.nii.gz", [3]int{4, 4, 4}, nil)
	writeVolume(t, store, "UPPER.NII.GZ", [3]int{4, 4, 4}, nil)
	if err := npy.Write(filepath.Join(store, "Arr.NPY"), []int{4, 4, 4}, make([]float32, 64)); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(store, "._a.nii.gz"), []byte("AppleDouble"), 0o644)
	os.MkdirAll(filepath.Join(store, ".Trash"), 0o755)
	os.WriteFile(filepath.Join(store, ".Trash", "x.nii"), []byte("junk"), 0o644)
	os.WriteFile(filepath.Join(store, "notes.txt"), []byte("not data"), 0o644)
	// A link back up (a cycle), a linked folder, a linked file, a second
	// link to a folder already read and a dangling link.
	for link, target := range map[string]string{
		"p1/loop": "..", "linked": "other", "p2/c-link.nii.gz": "../other/c.nii.gz", "zz-again": "p2", "gone.nii": "nothere.nii",
	} {
		if err := os.Symlink(target, filepath.Join(store, link)); err != nil {
			t.Fatal(err)
		}
	}
	root := filepath.Join(t.TempDir(), "ct")
	if err := os.Symlink(store, root); err != nil {
		t.Fatal(err)
	}
	files, err := Find(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"Arr.NPY", "UPPER.NII.GZ", "gone.nii", "linked/c.nii.gz", "p1/a.nii.gz", "p2/b.nii"}
	if got := rels(t, root, files); !slices.Equal(got, want) {
		t.Errorf("Find through links = %v, want %v", got, want)
	}
	if got := ID(root, files[1]); got != "UPPER" {
		t.Errorf("ID of UPPER.NII.GZ = %q", got)
	}
	for _, f := range []string{files[0], files[1]} {
		if v, err := Read(f); err != nil || len(v.Data) != 64 {
			t.Errorf("Read(%s): %v", f, err)
		}
	}

	empty := t.TempDir()
	os.MkdirAll(filepath.Join(empty, "sub", ".hidden"), 0o755)
	os.WriteFile(filepath.Join(empty, "sub", ".hidden", "a.nii"), []byte("x"), 0o644)
	var fe *FindError
	if _, err := Find(empty); !errors.As(err, &fe) || fe.Path != empty || !strings.Contains(err.Error(), empty+": no volume files") {
		t.Errorf("a folder without volumes: %v", err)
	}
	missing := filepath.Join(empty, "nothere")
	if _, err := Find(missing); !errors.As(err, &fe) || !strings.Contains(err.Error(), missing+": no such file") {
		t.Errorf("a missing folder: %v", err)
	}
	if _, err := Find("relative-nothere"); err == nil || !strings.Contains(err.Error(), filepath.Join(mustGetwd(t), "relative-nothere")) {
		t.Errorf("a missing relative folder: %v, want its absolute path", err)
	}
}

func mustGetwd(t testing.TB) string {
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	return wd
}

// TestNonFiniteVoxelsAreRefused: a volume with NaN or ±Inf voxels is
// refused when it is read, naming its absolute path and the count of each;
// in a dataset it fails its patches (or, with SkipBadFiles, they are
// skipped and counted) after reading the file once.
func TestNonFiniteVoxelsAreRefused(t *testing.T) {
	dir := t.TempDir()
	values := make([]float32, 8*8*8)
	values[5], values[77] = float32(math.NaN()), float32(math.Inf(1))
	bad := writeVolume(t, dir, "nan.nii.gz", [3]int{8, 8, 8}, values)
	good := writeVolume(t, dir, "good.nii.gz", [3]int{8, 8, 8}, nil)
	_, err := Read(bad)
	var nf *NonFiniteError
	if want := bad + ": 2 voxels are not finite (1 NaN, 1 +Inf)"; err == nil || err.Error() != want || !errors.As(err, &nf) || !nf.BadInput() {
		t.Errorf("Read: %v, want %q", err, want)
	}
	values[5], values[77] = float32(math.Inf(-1)), 0
	if err := npy.Write(filepath.Join(dir, "inf.npy"), []int{8, 8, 8}, values); err != nil {
		t.Fatal(err)
	}
	if _, err := Read(filepath.Join(dir, "inf.npy")); err == nil || !strings.HasSuffix(err.Error(), "inf.npy: 1 voxel is not finite (1 -Inf)") {
		t.Errorf("Read of an .npy: %v", err)
	}

	cfg := Config{Files: []string{bad, good}, TrainSplit: 1, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20}
	ds, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l, _ := data.New(ds, data.Config{BatchSize: 16, Workers: 1, MaxBytes: 1 << 22, Epochs: 1})
	if _, err := l.Next(); err == nil || !strings.Contains(err.Error(), bad+": 2 voxels are not finite") {
		t.Errorf("loading a patch of it: %v", err)
	}
	l.Close()
	ds, _ = New(cfg)
	l, _ = data.New(ds, data.Config{BatchSize: 16, Workers: 1, MaxBytes: 1 << 22, Epochs: 1, SkipBadFiles: true})
	defer l.Close()
	b, err := l.Next()
	if err != nil || b.Skipped != 8 || len(b.Indices) != 8 {
		t.Fatalf("skipping it: %v", err)
	}
	if ds.Decodes() != 2 {
		t.Errorf("the bad volume's 8 patches and the good one's decoded %d times, want once each", ds.Decodes())
	}
}

// TestBadHeadersNameTheAbsolutePath: a 4-D series and a malformed header
// in a training folder are bad input naming the file's absolute path, as
// .npy errors do; with SkipBadFiles they are listed in Skipped.
func TestBadHeadersNameTheAbsolutePath(t *testing.T) {
	dir := t.TempDir()
	good := writeVolume(t, dir, "good.nii.gz", [3]int{4, 4, 4}, nil)
	var h nifti.Header
	h.Dim = [8]int64{4, 4, 4, 4, 3, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	series := filepath.Join(dir, "series.nii.gz")
	if err := nifti.Write(series, h, make([]float32, 4*4*4*3)); err != nil {
		t.Fatal(err)
	}
	junk := filepath.Join(dir, "junk.nii")
	os.WriteFile(junk, make([]byte, 400), 0o644)
	wd := mustGetwd(t)
	defer os.Chdir(wd)
	os.Chdir(dir)
	for _, tc := range []struct{ file, want string }{
		{"series.nii.gz", series + ": a 4-D volume [4 4 4 3]"},
		{"junk.nii", junk + ": not NIfTI: sizeof_hdr is 0"},
	} {
		_, err := New(Config{Files: []string{"good.nii.gz", tc.file}, TrainSplit: 1, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20})
		var bad interface{ BadInput() bool }
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) || !errors.As(err, &bad) || !bad.BadInput() {
			t.Errorf("%s: %v, want bad input starting %q", tc.file, err, tc.want)
		}
	}
	ds, err := New(Config{Files: []string{good, series, junk}, TrainSplit: 1, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20, SkipBadFiles: true})
	if err != nil || len(ds.Skipped()) != 2 || len(ds.Files()) != 1 {
		t.Fatalf("skipping: %v", err)
	}
	if _, err := New(Config{Files: []string{series, junk}, TrainSplit: 1, PatchSize: [3]int{4, 4, 4}, Stride: [3]int{4, 4, 4}, CacheBytes: 1 << 20, SkipBadFiles: true}); err == nil ||
		!strings.Contains(err.Error(), "all 2 volume files of this split are bad") {
		t.Errorf("every file skipped: %v", err)
	}
}

// TestUpperCaseExtensions: .NII.GZ, .NII and .NPY are volumes, named
// without their extension, and written in the format they name.
func TestUpperCaseExtensions(t *testing.T) {
	for _, tc := range []struct{ path, name string }{
		{"B.NII.GZ", "B"}, {"c.Nii", "c"}, {"d.NPY", "d"}, {"e.nii.gz", "e"}, {"f.txt", "f.txt"},
	} {
		if IsVolume(tc.path) != (tc.name != tc.path) || Name(tc.path) != tc.name {
			t.Errorf("%s: IsVolume %v, Name %q", tc.path, IsVolume(tc.path), Name(tc.path))
		}
	}
	dir := t.TempDir()
	var h nifti.Header
	h.Dim = [8]int64{3, 4, 3, 2, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	values := make([]float32, 24)
	for i := range values {
		values[i] = float32(i)
	}
	for _, name := range []string{"w.NII.GZ", "w.NPY"} {
		p := filepath.Join(dir, name)
		if err := Write(p, h, values); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(p)
		if gz := raw[0] == 0x1f && raw[1] == 0x8b; gz != strings.HasSuffix(name, ".GZ") || strings.HasSuffix(name, ".NPY") != strings.HasPrefix(string(raw), "\x93NUMPY") {
			t.Errorf("%s written in the wrong format (%q...)", name, raw[:6])
		}
		v, err := Read(p)
		if err != nil || !slices.Equal(v.Data, values) || !slices.Equal(v.Header.Shape(), []int{4, 3, 2}) {
			t.Errorf("%s reads back as %v, %v", name, v, err)
		}
	}
}
