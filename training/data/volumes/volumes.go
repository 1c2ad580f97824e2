// Package volumes turns NIfTI volumes into the patches a 3D VQ-GAN trains
// on: intensity windowed to [-1, 1], cut on a grid of patch size and stride
// that covers the edges, split into train and validation by patient, with a
// cache of decoded volumes so that gzip is paid once per volume.
package volumes

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"

	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/nifti"
)

// Window maps intensities [Low, High] (a CT window in HU, say [-1000, 1000])
// linearly to [-1, 1], clamping outside. The zero Window maps each volume's
// own minimum and maximum instead.
type Window struct {
	Low, High float32
}

// Config sets up a Dataset. Sizes are in voxels, x first, as in NIfTI.
type Config struct {
	// Files are the volume files: .nii, .nii.gz or .npy (see Find).
	Files []string
	// Root is the data folder Files were found under. A file's patient is
	// then the first entry of its path under Root (Patient): its folder in
	// a one-folder-per-patient dataset, the file itself at Root's top
	// level. Empty: each file is a patient, named by Name.
	Root string
	// Patient, when set, names the patient a file belongs to instead. The
	// split keeps all of a patient's files on one side.
	Patient func(path string) string
	// TrainSplit is the fraction of patients in the training split, in
	// (0, 1]; Val selects the other side. Below 1, each side keeps at
	// least one patient when there are two or more.
	TrainSplit float64
	Val        bool
	// SplitSeed shuffles the patients before the split and MaxPatients.
	SplitSeed uint64
	// MaxPatients keeps only the first so many shuffled patients; 0 keeps
	// all.
	MaxPatients int
	PatchSize   [3]int
	Stride      [3]int
	Window      Window
	// CacheBytes bounds the decoded-volume cache. It must hold the largest
	// volume (as float32); a cache holding all volumes decodes each once.
	CacheBytes int64
	// SkipBadFiles drops files whose header is bad, instead of failing
	// (Skipped lists them).
	SkipBadFiles bool
}

// patch is one sample: a volume and the patch's corner in it.
type patch struct {
	vol     int
	x, y, z int
}

// Dataset is a data.Dataset of patches: tensor "volume", float32
// [1, PatchSize z, PatchSize y, PatchSize x] (NCDHW once batched, x fastest
// as in the file), with "index" int64 [4] = (volume, x, y, z) so that
// evaluation can put patches back.
type Dataset struct {
	cfg      Config
	files    []string
	headers  []nifti.Header
	patients []string
	patches  []patch
	skipped  []error
	// padded lists the volumes smaller than the patch along some axis.
	padded []string
	cache  *cache
	// failed holds, by volume, the error of a volume whose file is bad
	// (malformed, truncated, not finite): its other patches fail at once
	// instead of each reading the file again.
	failed sync.Map
}

// New reads the headers of cfg.Files, splits by patient and lays out the
// patches.
func New(cfg Config) (*Dataset, error) {
	for i := range 3 {
		if cfg.PatchSize[i] < 1 || cfg.Stride[i] < 1 {
			return nil, fmt.Errorf("volumes: patch size %v and stride %v must be ≥ 1", cfg.PatchSize, cfg.Stride)
		}
	}
	if !(cfg.TrainSplit > 0 && cfg.TrainSplit <= 1) {
		return nil, fmt.Errorf("volumes: train split %v, want in (0, 1]", cfg.TrainSplit)
	}
	if cfg.Window.High < cfg.Window.Low || (cfg.Window.High == cfg.Window.Low && cfg.Window.Low != 0) {
		return nil, fmt.Errorf("volumes: window [%v, %v] is empty", cfg.Window.Low, cfg.Window.High)
	}
	ids, byPatient, total := split(cfg)
	if len(ids) == 0 {
		return nil, &SplitError{Patients: total, TrainSplit: cfg.TrainSplit, Val: cfg.Val}
	}

	d := &Dataset{cfg: cfg, patients: ids}
	var largest int64
	for _, id := range ids {
		files := byPatient[id]
		slices.Sort(files)
		for _, f := range files {
			h, err := ReadHeader(f)
			if err == nil && h.Voxels() != h.Dim[1]*h.Dim[2]*h.Dim[3] {
				err = &nifti.Error{File: absolute(f), Err: fmt.Errorf("a %d-D volume %v (x, y, z, ...); ortrain trains on 3-D volumes (axes of size 1 aside)", h.Dim[0], h.Shape())}
			}
			if err != nil {
				if !cfg.SkipBadFiles {
					return nil, err
				}
				d.skipped = append(d.skipped, err)
				continue
			}
			v := len(d.files)
			for i := range 3 {
				if int(h.Dim[1+i]) < cfg.PatchSize[i] {
					d.padded = append(d.padded, fmt.Sprintf("%s (%d×%d×%d)", f, h.Dim[1], h.Dim[2], h.Dim[3]))
					break
				}
			}
			d.files = append(d.files, f)
			d.headers = append(d.headers, h)
			largest = max(largest, 4*h.Voxels())
			for _, z := range Grid(int(h.Dim[3]), cfg.PatchSize[2], cfg.Stride[2]) {
				for _, y := range Grid(int(h.Dim[2]), cfg.PatchSize[1], cfg.Stride[1]) {
					for _, x := range Grid(int(h.Dim[1]), cfg.PatchSize[0], cfg.Stride[0]) {
						d.patches = append(d.patches, patch{v, x, y, z})
					}
				}
			}
		}
	}
	if len(d.patches) == 0 { // every file skipped
		return nil, fmt.Errorf("volumes: all %d volume files of this split are bad and were skipped, the first: %w", len(d.skipped), d.skipped[0])
	}
	if cfg.CacheBytes < largest {
		return nil, fmt.Errorf("volumes: cache of %s cannot hold the largest decoded volume (%s)", data.FormatBytes(cfg.CacheBytes), data.FormatBytes(largest))
	}
	d.cache = newCache(cfg.CacheBytes, d.decode)
	return d, nil
}

// Find lists the volume files (.nii, .nii.gz, .npy, in any case) under
// dir and its sub-folders, sorted by path; dir may also be one volume
// file. Symbolic links are followed, dir's own included (a data folder
// linked to the real store), each folder read once: a link back up the
// tree, or a second link to a folder or file already read, adds nothing
// (a patient listed twice could land on both sides of the split). Hidden
// entries (named ".…": macOS's ._a.nii.gz, .Trash) are left out. The
// paths are dir joined with each entry's path under it, so ID and Patient
// see the layout under dir whatever the links resolve to.
//
// A folder that cannot be read, or holds no volume file, is a *FindError.
func Find(dir string) ([]string, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, findError(dir, err)
	}
	if !st.IsDir() {
		if !IsVolume(dir) {
			return nil, &FindError{Path: absolute(dir), Err: errors.New("not a volume file (.nii, .nii.gz, .npy) nor a folder of them")}
		}
		return []string{dir}, nil
	}
	var out []string
	seen := map[string]bool{} // folders and files read, by resolved path
	var walk func(dir string) error
	walk = func(dir string) error {
		resolvedDir, err := filepath.EvalSymlinks(dir)
		if err != nil {
			return findError(dir, err)
		}
		if seen[resolvedDir] {
			return nil
		}
		seen[resolvedDir] = true
		entries, err := os.ReadDir(dir)
		if err != nil {
			return findError(dir, err)
		}
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), ".") {
				continue
			}
			p := filepath.Join(dir, e.Name())
			isDir, resolved := e.IsDir(), filepath.Join(resolvedDir, e.Name())
			if e.Type()&fs.ModeSymlink != 0 {
				st, err := os.Stat(p)
				if err != nil {
					// A dangling link named as a volume is listed, so
					// that reading it says what is wrong; others are
					// not data.
					if IsVolume(p) {
						out = append(out, p)
					}
					continue
				}
				isDir = st.IsDir()
				if resolved, err = filepath.EvalSymlinks(p); err != nil {
					return findError(p, err)
				}
			}
			switch {
			case isDir:
				if err := walk(p); err != nil {
					return err
				}
			case IsVolume(p) && !seen[resolved]:
				seen[resolved] = true
				out = append(out, p)
			}
		}
		return nil
	}
	if err := walk(dir); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, &FindError{Path: absolute(dir), Err: errors.New("no volume files (.nii, .nii.gz, .npy) in it or its sub-folders")}
	}
	return out, nil
}

// FindError is a data folder Find cannot use: missing, unreadable, or
// without volume files. It names the folder by its absolute path and is
// the user's to fix (exit code 2).
type FindError struct {
	Path string
	Err  error
}

func (e *FindError) Error() string  { return e.Path + ": " + e.Err.Error() }
func (e *FindError) Unwrap() error  { return e.Err }
func (e *FindError) BadInput() bool { return true }

// findError turns an error of the file system about path into a
// *FindError, without repeating the path.
func findError(path string, err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		path, err = pe.Path, pe.Err
	}
	return &FindError{Path: absolute(path), Err: err}
}

// absolute is path made absolute, for errors that name it.
func absolute(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// SplitError is a patient split that leaves the side asked for empty: one
// patient with TrainSplit below 1 has none to validate on (New keeps at
// least one patient on each side of two or more).
type SplitError struct {
	Patients   int
	TrainSplit float64
	Val        bool
}

func (e *SplitError) Error() string {
	side := "training"
	if e.Val {
		side = "validation"
	}
	return fmt.Sprintf("volumes: a split of %d patient%s at %g leaves none for %s", e.Patients, plural(e.Patients), e.TrainSplit, side)
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// Grid is the start of each patch along an axis of size voxels: every
// stride, and one more flush with the far edge so that the edge is covered.
// An axis shorter than the patch gets one patch, padded.
func Grid(size, patch, stride int) []int {
	if size <= patch {
		return []int{0}
	}
	var s []int
	for x := 0; x+patch < size; x += stride {
		s = append(s, x)
	}
	return append(s, size-patch)
}

// Len is the number of patches.
func (d *Dataset) Len() int { return len(d.patches) }

// Patients are the patients of this split, sorted.
func (d *Dataset) Patients() []string { return d.patients }

// Files are the volumes of this split, in the order of the "index" tensor.
func (d *Dataset) Files() []string { return d.files }

// Header is the header of volume v, for writing outputs with its geometry.
func (d *Dataset) Header(v int) nifti.Header { return d.headers[v] }

// Padded lists the volumes smaller than the patch along some axis (with
// their size), whose patches are padded with the window's low value.
func (d *Dataset) Padded() []string { return d.padded }

// Skipped are the errors of files dropped by SkipBadFiles.
func (d *Dataset) Skipped() []error { return d.skipped }

// CacheBytes is the cache bound, which the loader counts (data.Cacher).
func (d *Dataset) CacheBytes() int64 { return d.cfg.CacheBytes }

// Decodes counts the volumes decoded so far: the gzip paid.
func (d *Dataset) Decodes() int64 { return d.cache.decodes.Load() }

// Spec is the patch and its index.
func (d *Dataset) Spec() []data.TensorSpec {
	p := d.cfg.PatchSize
	return []data.TensorSpec{
		{Name: "volume", DType: data.Float32, Shape: []int{1, p[2], p[1], p[0]}},
		{Name: "index", DType: data.Int64, Shape: []int{4}},
	}
}

// Load copies patch i out of its (cached) volume, padding with -1 where a
// volume is smaller than a patch.
func (d *Dataset) Load(i int, _ *rand.Rand, dst data.Sample) error {
	p := d.patches[i]
	if err, ok := d.failed.Load(p.vol); ok {
		return err.(error)
	}
	h := &d.headers[p.vol]
	vol, release, err := d.cache.get(p.vol, 4*h.Voxels())
	if err != nil {
		return err
	}
	defer release()
	nx, ny, nz := int(h.Dim[1]), int(h.Dim[2]), int(h.Dim[3])
	px, py, pz := d.cfg.PatchSize[0], d.cfg.PatchSize[1], d.cfg.PatchSize[2]
	out := dst[0].F32
	w := min(px, nx-p.x)
	for z := range pz {
		for y := range py {
			row := out[(z*py+y)*px : (z*py+y+1)*px]
			if p.z+z >= nz || p.y+y >= ny {
				fill(row, -1)
				continue
			}
			off := ((p.z+z)*ny+p.y+y)*nx + p.x
			copy(row, vol[off:off+w])
			fill(row[w:], -1)
		}
	}
	copy(dst[1].I64, []int64{int64(p.vol), int64(p.x), int64(p.y), int64(p.z)})
	return nil
}

func fill(s []float32, v float32) {
	for i := range s {
		s[i] = v
	}
}

// decode reads volume v and windows it to [-1, 1].
func (d *Dataset) decode(v int) ([]float32, error) {
	vol, err := Read(d.files[v])
	if err != nil {
		// A bad file stays bad; an error of the system may pass.
		var bad interface{ BadInput() bool }
		if errors.As(err, &bad) && bad.BadInput() {
			d.failed.Store(v, err)
		}
		return nil, err
	}
	if !slices.Equal(vol.Header.Shape(), d.headers[v].Shape()) {
		return nil, fmt.Errorf("%s: changed since the dataset was planned: now %v", absolute(d.files[v]), vol.Header.Shape())
	}
	Apply(d.cfg.Window, vol.Data)
	return vol.Data, nil
}

// Apply maps v in place to [-1, 1] through w (see Window).
func Apply(w Window, v []float32) {
	lo, hi := w.Low, w.High
	if lo == 0 && hi == 0 && len(v) > 0 {
		lo, hi = v[0], v[0]
		for _, x := range v {
			lo, hi = min(lo, x), max(hi, x)
		}
	}
	if hi == lo {
		fill(v, -1)
		return
	}
	s := 2 / (hi - lo)
	for i, x := range v {
		v[i] = min(max((x-lo)*s-1, -1), 1)
	}
}

// split returns the patients on cfg's side of the split (cfg.Val), sorted,
// every patient's files, and the number of patients split (after
// MaxPatients).
func split(cfg Config) ([]string, map[string][]string, int) {
	patient := cfg.Patient
	if patient == nil {
		patient = func(path string) string { return Patient(cfg.Root, path) }
	}
	byPatient := map[string][]string{}
	for _, f := range cfg.Files {
		id := patient(f)
		byPatient[id] = append(byPatient[id], f)
	}
	ids := make([]string, 0, len(byPatient))
	for id := range byPatient {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rand.New(rand.NewPCG(cfg.SplitSeed, 0x5eed)).Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	if cfg.MaxPatients > 0 && len(ids) > cfg.MaxPatients {
		ids = ids[:cfg.MaxPatients]
	}
	n := len(ids)
	nTrain := int(math.Round(cfg.TrainSplit * float64(n)))
	if cfg.TrainSplit < 1 && n >= 2 {
		// round(0.9 × 4) = 4 would leave validation empty, round(0.1 × 4)
		// training: a split keeps one patient on each side.
		nTrain = min(max(nTrain, 1), n-1)
	}
	nTrain = max(nTrain, min(n, 1)) // one patient trains
	if cfg.Val {
		ids = ids[nTrain:]
	} else {
		ids = ids[:nTrain]
	}
	slices.Sort(ids)
	return ids, byPatient, n
}

// SplitFiles returns the files of the patients on cfg's side of the
// train/validation split (cfg.Val), as New would patch them: the split is by
// patient, seeded by cfg.SplitSeed, never by file or patch.
func SplitFiles(cfg Config) []string {
	ids, byPatient, _ := split(cfg)
	var files []string
	for _, id := range ids {
		f := slices.Clone(byPatient[id])
		slices.Sort(f)
		files = append(files, f...)
	}
	return files
}
