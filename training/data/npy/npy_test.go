package npy

import (
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestReadWhatNumPyWrites: arrays np.save wrote — every numeric type, both
// byte orders, Fortran order (of 3 and 4 axes), format version 2, a 0-d
// and a 1-d array — read as the float32 values NumPy holds, in C order
// whatever the file's memory order: indexed by the shape NumPy reports.
func TestReadWhatNumPyWrites(t *testing.T) {
	const python = "/usr/bin/python3" // Debian's, with python3-numpy
	if err := exec.Command(python, "-c", "import numpy").Run(); err != nil {
		t.Skip("skipping: /usr/bin/python3 cannot import numpy: ", err)
	}
	dir := t.TempDir()
	script := `
import numpy as np, sys, os
d = sys.argv[1]
rng = np.random.default_rng(0)
base = rng.normal(0, 100, size=(3, 4, 5))
cases = {}
for t in ['<f4', '>f4', '<f8', '>f8', '<f2', '|i1', '|u1', '<i2', '>i2', '<u2', '<i4', '<u4', '<i8', '>u8']:
    a = base if t[1] == 'f' else np.abs(base) if t[1] == 'u' else base
    cases[t.replace('<', 'le').replace('>', 'be').replace('|', '')] = a.astype(t)
cases['bool'] = base > 0
cases['fortran'] = np.asfortranarray(base.astype('<f4'))
cases['fortran4'] = np.asfortranarray(rng.normal(0, 100, size=(2, 3, 4, 5)).astype('>f8'))
cases['channel'] = base.astype('<f4')[None]
cases['scalar'] = np.array(3.5, dtype='<f4')
cases['vector'] = np.arange(7, dtype='<i4')
for name, a in cases.items():
    np.save(os.path.join(d, name + '.npy'), a)
    a.ravel(order='C').astype('<f4').tofile(os.path.join(d, name + '.want'))
    open(os.path.join(d, name + '.shape'), 'w').write(' '.join(map(str, a.shape)))
v2 = np.zeros((2, 3), dtype='<f4') + 1.25
with open(os.path.join(d, 'version2.npy'), 'wb') as f:
    np.lib.format.write_array(f, v2, version=(2, 0))
v2.ravel().tofile(os.path.join(d, 'version2.want'))
open(os.path.join(d, 'version2.shape'), 'w').write('2 3')
`
	if out, err := exec.Command(python, "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.npy"))
	if len(files) < 20 {
		t.Fatalf("numpy wrote %d arrays", len(files))
	}
	for _, f := range files {
		name := strings.TrimSuffix(filepath.Base(f), ".npy")
		h, got, err := Read(f)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		raw, _ := os.ReadFile(strings.TrimSuffix(f, ".npy") + ".want")
		want := make([]float32, len(raw)/4)
		for i := range want {
			want[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s (%s): values differ from NumPy's: %v... want %v...", name, h.Descr, got[:min(4, len(got))], want[:min(4, len(want))])
		}
		shape, _ := os.ReadFile(strings.TrimSuffix(f, ".npy") + ".shape")
		var wantShape []int
		for _, s := range strings.Fields(string(shape)) {
			var d int
			for _, c := range s {
				d = 10*d + int(c-'0')
			}
			wantShape = append(wantShape, d)
		}
		if !slices.Equal(h.Shape, wantShape) || h.FortranOrder != strings.HasPrefix(name, "fortran") {
			t.Errorf("%s: shape %v fortran %v, want %v %v", name, h.Shape, h.FortranOrder, wantShape, strings.HasPrefix(name, "fortran"))
		}
		if hh, err := ReadHeader(f); err != nil || !slices.Equal(hh.Shape, h.Shape) || hh.Offset != h.Offset {
			t.Errorf("%s: ReadHeader %+v, %v; Read's header %+v", name, hh, err, h)
		}
	}
}

// TestWriteReadsBack: Write's file reads back, and NumPy reads it too.
func TestWriteReadsBack(t *testing.T) {
	path := filepath.Join(t.TempDir(), "v.npy")
	data := []float32{1, -2, 3.5, 4, 5, 6}
	if err := Write(path, []int{1, 2, 3}, data); err != nil {
		t.Fatal(err)
	}
	h, got, err := Read(path)
	if err != nil || !slices.Equal(got, data) || !slices.Equal(h.Shape, []int{1, 2, 3}) || h.Offset%64 != 0 {
		t.Fatalf("read back %+v %v, %v", h, got, err)
	}
	const python = "/usr/bin/python3"
	if exec.Command(python, "-c", "import numpy").Run() == nil {
		out, err := exec.Command(python, "-c", "import numpy, sys; a = numpy.load(sys.argv[1]); print(a.shape, a.dtype, a.ravel().tolist())", path).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "(1, 2, 3) float32 [1.0, -2.0, 3.5, 4.0, 5.0, 6.0]" {
			t.Errorf("numpy.load: %v: %s", err, out)
		}
	}
}

// TestBadFiles: what is not a readable array is an error naming the file
// and what is wrong.
func TestBadFiles(t *testing.T) {
	dir := t.TempDir()
	header := func(dict string) []byte {
		b := []byte(magic + "\x01\x00")
		b = binary.LittleEndian.AppendUint16(b, uint16(len(dict)))
		return append(b, dict...)
	}
	for name, c := range map[string]struct {
		body []byte
		want string
	}{
		"text":       {[]byte("hello, world"), "not a NumPy .npy file"},
		"complex":    {header("{'descr': '<c8', 'fortran_order': False, 'shape': (2,), }"), `element type "<c8"`},
		"strings":    {header("{'descr': '<U5', 'fortran_order': False, 'shape': (2,), }"), `element type "<U5"`},
		"structured": {header("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"), "structured"},
		"truncated":  {append(header("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }"), 0, 0, 0, 0), "truncated"},
		"version":    {[]byte(magic + "\x07\x00\x00\x00"), "format version 7.0"},
		"noshape":    {header("{'descr': '<f4', 'fortran_order': False}"), `no "shape"`},
	} {
		path := filepath.Join(dir, name+".npy")
		os.WriteFile(path, c.body, 0o644)
		_, _, err := Read(path)
		if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want an error naming %s and %q", name, err, path, c.want)
		}
		if name == "truncated" {
			if _, err := ReadHeader(path); err == nil || !strings.Contains(err.Error(), "truncated") {
				t.Errorf("ReadHeader of a truncated file: %v", err)
			}
		}
	}
}

// FuzzDecode: any bytes are an array or an error, never a panic or an
// allocation the input's size cannot back.
func FuzzDecode(f *testing.F) {
	var b bytes.Buffer
	b.WriteString(magic + "\x01\x00")
	dict := "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }"
	b.Write(binary.LittleEndian.AppendUint16(nil, uint16(len(dict))))
	b.WriteString(dict)
	b.Write(make([]byte, 8))
	f.Add(b.Bytes())
	f.Add([]byte(magic + "\x02\x00\x10\x00\x00\x00{'shape': (9999999999, 9999999999), 'descr': '>u8', 'fortran_order': True}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		h, data, err := decode("fuzz.npy", bytes.NewReader(in), int64(len(in)))
		if err == nil && int64(len(data)) != h.Len() {
			t.Fatalf("%d values for shape %v", len(data), h.Shape)
		}
	})
}
