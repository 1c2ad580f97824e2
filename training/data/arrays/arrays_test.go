package arrays

import (
	"archive/zip"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/npy"
)

// encode is the raw elements of vals as the type descr names (either byte
// order).
func encode(descr string, vals []float64) []byte {
	var o binary.AppendByteOrder = binary.LittleEndian
	if descr[0] == '>' {
		o = binary.BigEndian
	}
	var out []byte
	for _, v := range vals {
		switch descr[1:] {
		case "f2":
			out = o.AppendUint16(out, uint16(dtype.ToFloat16(float32(v))))
		case "f4":
			out = o.AppendUint32(out, math.Float32bits(float32(v)))
		case "f8":
			out = o.AppendUint64(out, math.Float64bits(v))
		case "i1", "u1", "b1":
			out = append(out, byte(int8(v)))
		case "i2", "u2":
			out = o.AppendUint16(out, uint16(int16(v)))
		case "i4", "u4":
			out = o.AppendUint32(out, uint32(int32(v)))
		case "i8":
			out = o.AppendUint64(out, uint64(int64(v)))
		case "u8":
			out = o.AppendUint64(out, uint64(v))
		default:
			panic(descr)
		}
	}
	return out
}

// save writes an .npy file of vals (C order) in dir.
func save(t *testing.T, dir, name, descr string, shape []int, vals []float64) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, npy.Encode(descr, false, shape, encode(descr, vals)), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// member is an array of an .npz archive.
type member struct {
	name, descr string
	fortran     bool
	shape       []int
	vals        []float64 // in C order
}

// saveNPZ writes an .npz archive of the members, deflated or stored.
func saveNPZ(t testing.TB, path string, deflate bool, ms ...member) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	z := zip.NewWriter(f)
	for _, m := range ms {
		method := zip.Store
		if deflate {
			method = zip.Deflate
		}
		w, err := z.CreateHeader(&zip.FileHeader{Name: m.name, Method: method})
		if err != nil {
			t.Fatal(err)
		}
		vals := m.vals
		if m.fortran {
			vals = fortran(m.shape, vals)
		}
		w.Write(npy.Encode(m.descr, m.fortran, m.shape, encode(m.descr, vals)))
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// fortran reorders C-order values of shape into Fortran order.
func fortran(shape []int, c []float64) []float64 {
	out := make([]float64, len(c))
	idx := make([]int, len(shape))
	for i := range c {
		// idx is the C index of element i; its Fortran offset:
		off, s := 0, 1
		for k := range shape {
			off += idx[k] * s
			s *= shape[k]
		}
		out[off] = c[i]
		for k := len(shape) - 1; k >= 0; k-- {
			if idx[k]++; idx[k] < shape[k] {
				break
			}
			idx[k] = 0
		}
	}
	return out
}

func seq(n int, f func(i int) float64) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = f(i)
	}
	return out
}

// regressor is a model taking x [batch, 3] with an MSE target [batch, 1].
var regressor = []Input{{Name: "x", DType: "float32", Shape: []int64{-1, 3}}, {Name: "target", DType: "float32", Shape: []int64{-1, 1}}}

// load reads every sample of ds into one sample buffer per tensor.
func load(t *testing.T, ds *Dataset) map[string][]float64 {
	t.Helper()
	out := map[string][]float64{}
	for i := range ds.Len() {
		s := make(data.Sample, len(ds.Spec()))
		for k, sp := range ds.Spec() {
			s[k] = data.Tensor{Name: sp.Name, DType: sp.DType, Shape: sp.Shape}
			switch sp.DType {
			case data.Float32:
				s[k].F32 = make([]float32, sp.Elems())
			case data.Int64:
				s[k].I64 = make([]int64, sp.Elems())
			case data.Uint8:
				s[k].U8 = make([]uint8, sp.Elems())
			}
		}
		if err := ds.Load(i, nil, s); err != nil {
			t.Fatal(err)
		}
		for _, x := range s {
			for _, v := range x.F32 {
				out[x.Name] = append(out[x.Name], float64(v))
			}
			for _, v := range x.I64 {
				out[x.Name] = append(out[x.Name], float64(v))
			}
			for _, v := range x.U8 {
				out[x.Name] = append(out[x.Name], float64(v))
			}
		}
	}
	return out
}

// TestReadsEveryLayout: a folder of .npy files, a stored and a deflated
// .npz, Fortran order and big-endian data read the same samples,
// converted to the types the model's inputs take; only what cannot be
// read in place is held in memory.
func TestReadsEveryLayout(t *testing.T) {
	const n = 5
	x := seq(3*n, func(i int) float64 { return float64(i)/4 - 1 })
	y := seq(n, func(i int) float64 { return float64(i * i) })
	want := map[string][]float64{"x": x, "target": y}

	dir := t.TempDir()
	folder := filepath.Join(dir, "folder")
	os.Mkdir(folder, 0o755)
	save(t, folder, "x.npy", ">f8", []int{n, 3}, x)
	save(t, folder, "target.NPY", "<i4", []int{n}, y) // (N,) feeds [batch, 1]
	os.WriteFile(filepath.Join(folder, ".DS_Store"), []byte("hidden"), 0o644)
	ds, err := Open(Config{Path: folder, Inputs: regressor})
	if err != nil {
		t.Fatal(err)
	}
	if got := load(t, ds); !equal(got, want) || ds.CacheBytes() != 0 {
		t.Errorf("folder: %v (held %d bytes), want %v read in place", got, ds.CacheBytes(), want)
	}
	if sp := ds.Spec(); len(sp) != 2 || sp[0].Name != "target" || !slices.Equal(sp[0].Shape, []int{1}) || sp[1].DType != data.Float32 {
		t.Errorf("spec %+v: want target [1] and x float32", sp)
	}
	ds.Close()

	for _, c := range []struct {
		name    string
		deflate bool
		fortran bool
		held    bool
	}{{"stored", false, false, false}, {"deflated", true, false, true}, {"fortran", false, true, true}} {
		path := filepath.Join(dir, c.name+".npz")
		saveNPZ(t, path, c.deflate, member{"x.npy", "<f2", c.fortran, []int{n, 3}, x}, member{"label.npy", "|u1", false, []int{n, 1}, y})
		ds, err := Open(Config{Path: path, Inputs: regressor})
		if err != nil {
			t.Fatal(err)
		}
		// label.npy feeds the loss's target, as a loader's labels do.
		if got := load(t, ds); !equal(got, map[string][]float64{"x": x, "label": y}) || (ds.CacheBytes() > 0) != c.held {
			t.Errorf("%s: %v (held %d bytes), want %v", c.name, got, ds.CacheBytes(), want)
		}
		ds.Close()
		if c.held {
			_, err := Open(Config{Path: path, Inputs: regressor, MaxBytes: 16})
			if err == nil || !strings.Contains(err.Error(), "x.npy must be held in memory") || !strings.Contains(err.Error(), "over the loader's bound of 16 B") {
				t.Errorf("%s over the memory bound: %v", c.name, err)
			}
		}
	}
}

func equal(got, want map[string][]float64) bool {
	if len(got) != len(want) {
		return false
	}
	for k, w := range want {
		if !slices.Equal(got[k], w) {
			return false
		}
	}
	return true
}

// TestConversions: integer labels feed int64 inputs, masks uint8 and bool
// inputs; values that the input's type cannot hold are refused when
// loaded, naming the file and the element; float data for an integer
// input is refused when opened.
func TestConversions(t *testing.T) {
	dir := t.TempDir()
	save(t, dir, "image.npy", "<f4", []int{3, 2}, []float64{1, 2, 3, 4, 5, 6})
	save(t, dir, "label.npy", "<u8", []int{3}, []float64{0, 2, 1})
	save(t, dir, "mask.npy", "|b1", []int{3, 2}, []float64{1, 0, 0, 1, 1, 1})
	in := []Input{{Name: "image", DType: "float32", Shape: []int64{-1, 2}}, {Name: "target", DType: "int64", Shape: []int64{-1}}, {Name: "mask", DType: "bool", Shape: []int64{-1, 2}}}
	ds, err := Open(Config{Path: dir, Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	got := load(t, ds)
	if !slices.Equal(got["label"], []float64{0, 2, 1}) || !slices.Equal(got["mask"], []float64{1, 0, 0, 1, 1, 1}) {
		t.Errorf("labels %v, mask %v", got["label"], got["mask"])
	}
	spec := ds.Spec()
	if spec[1].DType != data.Int64 || spec[2].DType != data.Uint8 {
		t.Errorf("spec %+v: want label int64, mask uint8", spec)
	}

	// A uint8 mask from int16 values, one of them 300.
	save(t, dir, "mask.npy", "<i2", []int{3, 2}, []float64{1, 0, 0, 300, 1, 1})
	in[2].DType = "uint8"
	ds, err = Open(Config{Path: dir, Inputs: in})
	if err != nil {
		t.Fatal(err)
	}
	s := data.Sample{{DType: data.Float32, F32: make([]float32, 2)}, {DType: data.Int64, I64: make([]int64, 1)}, {DType: data.Uint8, U8: make([]uint8, 2)}}
	if err := ds.Load(0, nil, s); err != nil {
		t.Errorf("sample 0: %v", err)
	}
	err = ds.Load(1, nil, s)
	var ae *Error
	if !errors.As(err, &ae) || !ae.BadInput() || !strings.Contains(err.Error(), filepath.Join(dir, "mask.npy")+": the value 300 at [1, 1] is out of the model's input's range: uint8 (0 to 255)") {
		t.Errorf("a mask value of 300: %v", err)
	}

	// Class indices past the model's classes.
	in[1].Classes, in[2].DType = 2, "bool"
	save(t, dir, "mask.npy", "|u1", []int{3, 2}, []float64{1, 0, 0, 1, 1, 1})
	if ds, err = Open(Config{Path: dir, Inputs: in}); err != nil {
		t.Fatal(err)
	}
	if err := ds.Load(0, nil, s); err != nil {
		t.Errorf("sample 0: %v", err)
	}
	if err := ds.Load(1, nil, s); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "label.npy")+": the value 2 at [1] is out of the model's input's range: class indices 0 to 1 (the model has 2 classes)") {
		t.Errorf("a label past the classes: %v", err)
	}
	in[1].Classes = 0

	// Float labels for class indices.
	save(t, dir, "label.npy", "<f8", []int{3}, []float64{0, 2, 1})
	save(t, dir, "mask.npy", "|u1", []int{3, 2}, []float64{1, 0, 0, 1, 1, 1})
	if _, err := Open(Config{Path: dir, Inputs: in}); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "label.npy")+": holds float64 values, but the model's input \"target\" takes int64 (class indices)") {
		t.Errorf("float labels: %v", err)
	}
	// The model's type unknown: the arrays' own kinds.
	ds, err = Open(Config{Path: dir})
	if err != nil {
		t.Fatal(err)
	}
	if sp := ds.Spec(); sp[0].DType != data.Float32 || sp[1].DType != data.Float32 || sp[2].DType != data.Uint8 {
		t.Errorf("spec without a model: %+v", sp)
	}
}

// TestRefusals: what cannot feed the model is refused when opened (or,
// for values, loaded), naming the file by its full path and what is
// wrong.
func TestRefusals(t *testing.T) {
	root := t.TempDir()
	mk := func(name string, files ...func(dir string)) string {
		dir := filepath.Join(root, name)
		os.Mkdir(dir, 0o755)
		for _, f := range files {
			f(dir)
		}
		return dir
	}
	arr := func(name, descr string, shape ...int) func(string) {
		return func(dir string) {
			n := 1
			for _, d := range shape {
				n *= d
			}
			save(t, dir, name, descr, shape, seq(n, func(i int) float64 { return float64(i % 3) }))
		}
	}
	x, y := arr("x.npy", "<f4", 4, 3), arr("target.npy", "<f4", 4, 1)
	for _, c := range []struct {
		name  string
		path  string
		in    []Input
		feeds data.Feeds
		say   []string
	}{
		{"missing folder", filepath.Join(root, "nope"), regressor, nil, []string{filepath.Join(root, "nope") + ": no such file or directory"}},
		{"no arrays", mk("empty"), regressor, nil, []string{filepath.Join(root, "empty") + ": holds no .npy arrays"}},
		{"another file", mk("notes", x, y, func(d string) { os.WriteFile(filepath.Join(d, "notes.txt"), nil, 0o644) }), regressor, nil,
			[]string{filepath.Join(root, "notes", "notes.txt") + ": is not a .npy array"}},
		{"one .npy", filepath.Join(mk("one", x), "x.npy"), regressor, nil, []string{filepath.Join(root, "one", "x.npy") + ": is one array"}},
		{"unequal first axes", mk("unequal", x, arr("target.npy", "<f4", 5, 1)), regressor, nil,
			[]string{filepath.Join(root, "unequal", "target.npy") + " has 5 samples (shape [5 1])", filepath.Join(root, "unequal", "x.npy") + " has 4 (shape [4 3])"}},
		{"0-d", mk("scalar", x, y, arr("s.npy", "<f4")), regressor, nil, []string{filepath.Join(root, "scalar", "s.npy") + ": is a 0-d array"}},
		{"no samples", mk("none", arr("x.npy", "<f4", 0, 3), arr("target.npy", "<f4", 0, 1)), regressor, nil, []string{"the arrays hold no samples"}},
		{"a file for no input", mk("extra", x, y, arr("w.npy", "<f4", 4)), regressor, nil,
			[]string{filepath.Join(root, "extra", "w.npy") + ": feeds none of the model's inputs (x, target)"}},
		{"a feed to no input", mk("feedless", x, y, arr("w.npy", "<f4", 4)), regressor, data.Feeds{"weights": "w"},
			[]string{"w.npy: feeds none of the model's inputs: [data.feeds] weights = \"w\""}},
		{"an input without a file", mk("nox", arr("X.npy", "<f4", 4, 3), y), regressor, nil,
			[]string{filepath.Join(root, "nox") + `: no array feeds the model's input "x" (the arrays: X.npy, target.npy); names are matched exactly: rename X.npy to x.npy, or map it with [data.feeds] x = "X"`}},
		{"a feed naming no file", mk("badfeed", x, y), regressor, data.Feeds{"target": "y"}, []string{`[data.feeds] target = "y" names no array`}},
		{"other sizes", mk("sizes", arr("x.npy", "<f4", 4, 5), y), regressor, nil,
			[]string{filepath.Join(root, "sizes", "x.npy") + ": holds samples of [5] (the array is [4 5], first axis the samples), but the model's input \"x\" takes [3] per sample"}},
		{"other rank", mk("rank", arr("x.npy", "<f4", 4, 3, 2), y), regressor, nil, []string{"holds samples of [3 2]", "takes [3] per sample"}},
		{"a type no loader gives", mk("f16", x, y), []Input{{Name: "x", DType: "float16"}, regressor[1]}, nil, []string{`takes float16`}},
		{"complex", mk("complex", x, y, func(d string) {
			os.WriteFile(filepath.Join(d, "c.npy"), npy.Encode("<c8", false, []int{4}, make([]byte, 32)), 0o644)
		}), regressor, nil, []string{filepath.Join(root, "complex", "c.npy"), `element type "<c8"`}},
	} {
		_, err := Open(Config{Path: c.path, Inputs: c.in, Feeds: c.feeds})
		t.Logf("%s: %v", c.name, err)
		var bad interface{ BadInput() bool }
		if !errors.As(err, &bad) || !bad.BadInput() {
			t.Errorf("%s: %v; want a bad-input error", c.name, err)
			continue
		}
		for _, s := range c.say {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("%s: %v\nwant it to say %q", c.name, err, s)
			}
		}
	}

	// NaN and overflowing float64 values are refused when their sample is
	// read, naming the file, the sample and the first element.
	dir := mk("nan", y)
	vals := seq(12, func(i int) float64 { return float64(i) })
	vals[7], vals[8] = math.NaN(), 1e300
	save(t, dir, "x.npy", "<f8", []int{4, 3}, vals)
	ds, err := Open(Config{Path: dir, Inputs: regressor})
	if err != nil {
		t.Fatal(err)
	}
	s := data.Sample{{DType: data.Float32, F32: make([]float32, 1)}, {DType: data.Float32, F32: make([]float32, 3)}}
	if err := ds.Load(1, nil, s); err != nil {
		t.Error(err)
	}
	err = ds.Load(2, nil, s)
	if err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "x.npy")+": sample 2: 2 of its 3 values are not finite as float32 (1 NaN, 1 +Inf), the first at [2, 1]") {
		t.Errorf("NaN: %v", err)
	}
}

// TestReadsWhatNumPyWrites: arrays np.save, np.savez and
// np.savez_compressed wrote (several types, byte orders, Fortran order)
// read as NumPy holds them. Skipped without /usr/bin/python3 and numpy.
func TestReadsWhatNumPyWrites(t *testing.T) {
	const python = "/usr/bin/python3" // Debian's, with python3-numpy
	if err := exec.Command(python, "-c", "import numpy").Run(); err != nil {
		t.Skip("skipping: /usr/bin/python3 cannot import numpy: ", err)
	}
	dir := t.TempDir()
	script := `
import numpy as np, sys, os
d = sys.argv[1]
rng = np.random.default_rng(0)
arrays = {
    'x': np.asfortranarray(rng.normal(size=(6, 3, 2))),               # float64, Fortran order
    'h': rng.normal(size=(6, 4)).astype('>f4'),                       # big-endian
    'half': rng.normal(size=(6,)).astype(np.float16),
    'label': rng.integers(0, 10, size=6),                             # int64
    'small': rng.integers(-5, 5, size=(6, 1)).astype(np.int8),
    'mask': rng.normal(size=(6, 2, 2)) > 0,                           # bool
}
os.mkdir(os.path.join(d, 'folder'))
for k, a in arrays.items():
    np.save(os.path.join(d, 'folder', k + '.npy'), a)
    a.astype(np.float64).ravel(order='C').tofile(os.path.join(d, k + '.want'))
np.savez(os.path.join(d, 'plain.npz'), **arrays)
np.savez_compressed(os.path.join(d, 'packed.npz'), **arrays)
`
	if out, err := exec.Command(python, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	want := map[string][]float64{}
	for _, k := range []string{"x", "h", "half", "label", "small", "mask"} {
		raw, err := os.ReadFile(filepath.Join(dir, k+".want"))
		if err != nil {
			t.Fatal(err)
		}
		for i := 0; i < len(raw); i += 8 {
			v := math.Float64frombits(binary.LittleEndian.Uint64(raw[i:]))
			if k == "x" || k == "h" {
				v = float64(float32(v)) // fed as float32
			}
			want[k] = append(want[k], v)
		}
	}
	in := []Input{
		{Name: "x", DType: "float32", Shape: []int64{-1, 3, 2}}, {Name: "h", DType: "float32", Shape: []int64{-1, 4}},
		{Name: "half", DType: "float32", Shape: []int64{-1}}, {Name: "label", DType: "int64", Shape: []int64{-1}},
		{Name: "small", DType: "int64", Shape: []int64{-1}}, {Name: "mask", DType: "uint8", Shape: []int64{-1, 2, 2}},
	}
	for _, p := range []string{"folder", "plain.npz", "packed.npz"} {
		ds, err := Open(Config{Path: filepath.Join(dir, p), Inputs: in})
		if err != nil {
			t.Errorf("%s: %v", p, err)
			continue
		}
		got := load(t, ds)
		for k, w := range want {
			if !slices.Equal(got[k], w) {
				t.Errorf("%s: %s = %v, NumPy has %v", p, k, got[k], w)
			}
		}
		// Only the Fortran-order x (and, compressed, every array) is held.
		held := int64(6 * 3 * 2 * 8)
		if p == "packed.npz" {
			held = 6 * (3*2*8 + 4*4 + 2 + 8 + 1 + 4)
		}
		if ds.CacheBytes() != held {
			t.Errorf("%s: %d bytes held in memory, want %d", p, ds.CacheBytes(), held)
		}
		ds.Close()
	}
}

// FuzzOpenArchive: any bytes given as an .npz archive open as arrays
// whose every sample loads, or are an error naming the file; never a
// panic or an allocation the file's size cannot back.
func FuzzOpenArchive(f *testing.F) {
	dir := f.TempDir()
	for i, deflate := range []bool{false, true} {
		path := filepath.Join(dir, "seed"+string(rune('0'+i))+".npz")
		saveNPZ(f, path, deflate, member{"x.npy", "<f4", false, []int{2, 3}, seq(6, func(i int) float64 { return float64(i) })},
			member{"y.npy", "<i8", true, []int{2, 2}, []float64{1, 2, 3, 4}})
		b, _ := os.ReadFile(path)
		f.Add(b)
	}
	// One file per process, rewritten for each input: a directory per
	// input (t.TempDir) would be most of the work.
	path := filepath.Join(f.TempDir(), "a.npz")
	f.Fuzz(func(t *testing.T, in []byte) {
		if err := os.WriteFile(path, in, 0o644); err != nil {
			t.Fatal(err)
		}
		ds, err := Open(Config{Path: path, MaxBytes: 64 << 20})
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("an error not naming the file: %v", err)
			}
			return
		}
		defer ds.Close()
		for i := range min(ds.Len(), 16) {
			s := make(data.Sample, len(ds.Spec()))
			for k, sp := range ds.Spec() {
				s[k] = data.Tensor{Name: sp.Name, DType: sp.DType, Shape: sp.Shape}
				switch sp.DType {
				case data.Float32:
					s[k].F32 = make([]float32, sp.Elems())
				case data.Int64:
					s[k].I64 = make([]int64, sp.Elems())
				case data.Uint8:
					s[k].U8 = make([]uint8, sp.Elems())
				}
			}
			if err := ds.Load(i, nil, s); err != nil && !strings.Contains(err.Error(), path) {
				t.Fatalf("sample %d: an error not naming the file: %v", i, err)
			}
		}
	})
}
