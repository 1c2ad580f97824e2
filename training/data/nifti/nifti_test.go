package nifti

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// templates is where Debian's mricron-data puts its NIfTI volumes.
const templates = "/usr/share/mricron/templates"

func requireMricron(t testing.TB) {
	t.Helper()
	if _, err := os.Stat(filepath.Join(templates, "ch2.nii.gz")); err != nil {
		t.Fatalf("real NIfTI volumes missing (%v): install them with `apt-get install -y mricron-data` (listed in scripts/deps.apt)", err)
	}
}

// TestReadsRealVolumesAsNibabelDoes compares against testdata/mricron.json,
// made with nibabel (see its note): uint8, int16 and float32 volumes.
func TestReadsRealVolumesAsNibabelDoes(t *testing.T) {
	requireMricron(t)
	raw, err := os.ReadFile("testdata/mricron.json")
	if err != nil {
		t.Fatal(err)
	}
	var ref struct {
		Volumes []struct {
			File        string
			Shape       []int
			Datatype    string
			Pixdim      []float64
			QformCode   int `json:"qform_code"`
			SformCode   int `json:"sform_code"`
			Descrip     string
			Affine      [4][4]float64
			Sum         float64
			WeightedSum float64 `json:"weighted_sum"`
			Min, Max    float64
			Voxels      []struct {
				At    [3]int
				Value float64
			}
		}
	}
	if err := json.Unmarshal(raw, &ref); err != nil {
		t.Fatal(err)
	}
	for _, want := range ref.Volumes {
		t.Run(want.File, func(t *testing.T) {
			v, err := Read(filepath.Join(templates, want.File))
			if err != nil {
				t.Fatal(err)
			}
			h := v.Header
			if !slices.Equal(h.Shape(), want.Shape) || h.Datatype.String() != want.Datatype {
				t.Errorf("shape %v %s, want %v %s", h.Shape(), h.Datatype, want.Shape, want.Datatype)
			}
			if h.QformCode != want.QformCode || h.SformCode != want.SformCode || h.Descrip != want.Descrip {
				t.Errorf("qform %d sform %d descrip %q, want %d %d %q", h.QformCode, h.SformCode, h.Descrip, want.QformCode, want.SformCode, want.Descrip)
			}
			for i, p := range want.Pixdim {
				if h.PixDim[i+1] != p {
					t.Errorf("pixdim[%d] = %v, want %v", i+1, h.PixDim[i+1], p)
				}
			}
			a := h.Affine()
			for i := range 4 {
				for j := range 4 {
					if math.Abs(a[i][j]-want.Affine[i][j]) > 1e-5 {
						t.Errorf("affine[%d][%d] = %v, want %v", i, j, a[i][j], want.Affine[i][j])
					}
				}
			}
			nx, ny := want.Shape[0], want.Shape[1]
			var sum, wsum float64
			lo, hi := math.Inf(1), math.Inf(-1)
			for i, f := range v.Data {
				x, y, z := i%nx, i/nx%ny, i/(nx*ny)
				d := float64(f)
				sum += d
				wsum += d * float64(x+2*y+3*z)
				lo, hi = min(lo, d), max(hi, d)
			}
			if rel(sum, want.Sum) > 1e-6 || rel(wsum, want.WeightedSum) > 1e-6 || lo != want.Min || math.Abs(hi-want.Max) > 1e-4 {
				t.Errorf("sum %v weighted %v range [%v, %v], want %v %v [%v, %v]", sum, wsum, lo, hi, want.Sum, want.WeightedSum, want.Min, want.Max)
			}
			for _, p := range want.Voxels {
				got := float64(v.Data[p.At[0]+nx*(p.At[1]+ny*p.At[2])])
				if math.Abs(got-p.Value) > 1e-4 {
					t.Errorf("voxel %v = %v, want %v", p.At, got, p.Value)
				}
			}
		})
	}
}

func rel(a, b float64) float64 { return math.Abs(a-b) / max(1, math.Abs(b)) }

func geometry() Header {
	h := Header{Descrip: "test volume", QformCode: 1, SformCode: 2, QuaternB: 0, QuaternC: 0, QuaternD: 1,
		QOffsetX: -10, QOffsetY: 20, QOffsetZ: 5.5, SRowX: [4]float64{-2, 0, 0, 10}, SRowY: [4]float64{0, 2, 0, -20},
		SRowZ: [4]float64{0, 0, 3, 4}, XYZTUnits: 10}
	h.Dim = [8]int64{3, 4, 3, 2, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 2, 2, 3, 1, 1, 1, 1}
	return h
}

func TestWriteThenReadKeepsGeometryAndData(t *testing.T) {
	dir := t.TempDir()
	data := make([]float32, 24)
	for i := range data {
		data[i] = float32(i)*0.5 - 3
	}
	for _, tc := range []struct {
		file    string
		version int
		dim1    int64
	}{
		{"v1.nii", 1, 4},
		{"v1.nii.gz", 1, 4},
		{"v2.nii.gz", 2, 4},
		{"wide.nii", 0, 40000}, // does not fit NIfTI-1's int16 dims: written as NIfTI-2
	} {
		h := geometry()
		h.Version, h.Dim[1] = tc.version, tc.dim1
		values := data
		if tc.dim1 != 4 {
			values = make([]float32, h.Voxels())
			values[len(values)-1] = 7
		}
		p := filepath.Join(dir, tc.file)
		if err := Write(p, h, values); err != nil {
			t.Fatal(err)
		}
		v, err := Read(p)
		if err != nil {
			t.Fatal(err)
		}
		wantVersion := max(tc.version, 1)
		if tc.dim1 > math.MaxInt16 {
			wantVersion = 2
		}
		got := v.Header
		if got.Version != wantVersion || got.Datatype != Float32 || got.Affine() != h.Affine() || got.Dim != h.Dim || got.Descrip != h.Descrip || got.XYZTUnits != 10 {
			t.Errorf("%s: header %+v does not keep %+v", tc.file, got, h)
		}
		if h.QformCode = 0; got.QformCode != 1 || h.Affine() != got.Affine() {
			t.Errorf("%s: qform lost", tc.file)
		}
		if !slices.Equal(v.Data, values) {
			t.Errorf("%s: data changed", tc.file)
		}
	}
	if err := Write(filepath.Join(dir, "bad.nii"), geometry(), data[:5]); err == nil || !strings.Contains(err.Error(), "5 values for a 4×3×2 volume") {
		t.Errorf("writing 5 values into 24 voxels: %v", err)
	}
}

// rawVolume encodes values as a NIfTI-1 stream of datatype dt.
func rawVolume(t *testing.T, dt Datatype, bo byteOrder, slope, inter float32, values []float64) []byte {
	t.Helper()
	h := Header{}
	h.Dim = [8]int64{1, int64(len(values)), 1, 1, 1, 1, 1, 1}
	var buf bytes.Buffer
	if err := Encode("x", &buf, h, make([]float32, len(values))); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[:352]
	le := binary.LittleEndian
	le.PutUint16(b[70:], uint16(dt))
	le.PutUint16(b[72:], uint16(8*dt.Size()))
	le.PutUint32(b[112:], math.Float32bits(slope))
	le.PutUint32(b[116:], math.Float32bits(inter))
	if bo == binary.BigEndian { // swap every header field that is read
		for _, f := range [][2]int{{0, 4}, {56, 4}, {60, 4}, {64, 4}, {68, 2}, {70, 2}, {72, 2}, {74, 2}, {120, 2}, {252, 2}, {254, 2}} {
			slices.Reverse(b[f[0] : f[0]+f[1]])
		}
		for o := 40; o < 56; o += 2 {
			slices.Reverse(b[o : o+2])
		}
		for o := 76; o < 140; o += 4 {
			slices.Reverse(b[o : o+4])
		}
		for o := 256; o < 328; o += 4 {
			slices.Reverse(b[o : o+4])
		}
	}
	for _, v := range values {
		switch dt {
		case Uint8, Int8:
			b = append(b, byte(int64(v)))
		case Int16, Uint16:
			b = bo.AppendUint16(b, uint16(int64(v)))
		case Int32, Uint32:
			b = bo.AppendUint32(b, uint32(int64(v)))
		case Float32:
			b = bo.AppendUint32(b, math.Float32bits(float32(v)))
		case Float64:
			b = bo.AppendUint64(b, math.Float64bits(v))
		case Int64, Uint64:
			b = bo.AppendUint64(b, uint64(int64(v)))
		}
	}
	return b
}

func TestDatatypesByteOrderAndScaling(t *testing.T) {
	for _, tc := range []struct {
		dt           Datatype
		bo           byteOrder
		slope, inter float32
		in, want     []float64
	}{
		{Uint8, binary.LittleEndian, 0, 0, []float64{0, 7, 255}, []float64{0, 7, 255}},
		{Int8, binary.LittleEndian, 1, 0, []float64{-128, 0, 127}, []float64{-128, 0, 127}},
		// A CT volume stored as int16 with HU = raw - 1024.
		{Int16, binary.LittleEndian, 1, -1024, []float64{0, 1024, 3000}, []float64{-1024, 0, 1976}},
		{Int16, binary.BigEndian, 2, 1, []float64{-5, 0, 300}, []float64{-9, 1, 601}},
		{Uint16, binary.LittleEndian, 0.5, 0, []float64{0, 65535}, []float64{0, 32767.5}},
		{Int32, binary.BigEndian, 0, 0, []float64{-100000, 100000}, []float64{-100000, 100000}},
		{Uint32, binary.LittleEndian, 0, 0, []float64{4000000000}, []float64{4000000000}},
		{Float32, binary.BigEndian, float32(math.NaN()), 0, []float64{-1.5, 2.25}, []float64{-1.5, 2.25}},
		{Float64, binary.LittleEndian, 0, 0, []float64{1e-3, -7}, []float64{1e-3, -7}},
		{Int64, binary.LittleEndian, 0, 0, []float64{-3, 1 << 40}, []float64{-3, 1 << 40}},
		{Uint64, binary.BigEndian, 0, 0, []float64{9}, []float64{9}},
	} {
		v, err := Decode("x.nii", bytes.NewReader(rawVolume(t, tc.dt, tc.bo, tc.slope, tc.inter, tc.in)))
		if err != nil {
			t.Errorf("%s %v: %v", tc.dt, tc.bo, err)
			continue
		}
		got := make([]float64, len(v.Data))
		for i, f := range v.Data {
			got[i] = float64(f)
		}
		if !slices.EqualFunc(got, tc.want, func(a, b float64) bool { return rel(a, b) < 1e-6 }) || v.Header.BigEndian != (tc.bo == binary.BigEndian) {
			t.Errorf("%s %v slope %v inter %v: got %v, want %v", tc.dt, tc.bo, tc.slope, tc.inter, got, tc.want)
		}
	}
}

func TestBadFilesAreErrorsNamingTheFile(t *testing.T) {
	dir := t.TempDir()
	h := geometry()
	h.Dim = [8]int64{3, 181, 217, 181, 1, 1, 1, 1}
	var full bytes.Buffer
	if err := Encode("x", &full, h, make([]float32, h.Voxels())); err != nil {
		t.Fatal(err)
	}
	gz := func(b []byte) []byte {
		var out bytes.Buffer
		zw := gzip.NewWriter(&out)
		zw.Write(b)
		zw.Close()
		return out.Bytes()
	}
	whole := full.Bytes()
	notNifti := slices.Clone(whole[:400])
	notNifti[0] = 1
	badType := slices.Clone(whole)
	binary.LittleEndian.PutUint16(badType[70:], 32) // complex64
	pair := slices.Clone(whole)
	copy(pair[344:], "ni1\x00")
	for _, tc := range []struct {
		file string
		data []byte
		want string
	}{
		{"short.nii", whole[:100], "short.nii: truncated: 100 bytes, too short for a NIfTI header"},
		{"cut.nii", whole[:3_100_352], "cut.nii: truncated: header says 181×217×181 float32 (28.4 MB) but file holds 3.1 MB"},
		{"cut.nii.gz", gz(whole[:3_100_352]), "cut.nii.gz: truncated: header says 181×217×181 float32 (28.4 MB) but file holds 3.1 MB"},
		{"cutgzip.nii.gz", gz(whole)[:5000], "cutgzip.nii.gz: truncated: header says 181×217×181 float32"},
		{"text.nii", notNifti, "text.nii: not NIfTI: sizeof_hdr is"},
		{"complex.nii", badType, "complex.nii: unsupported datatype 32"},
		{"pair.nii", pair, "pair.nii: a .hdr/.img pair"},
		{"empty.nii.gz", []byte{0x1f, 0x8b}, "empty.nii.gz: gzip: unexpected EOF"},
	} {
		p := filepath.Join(dir, tc.file)
		if err := os.WriteFile(p, tc.data, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := Read(p)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.file, err, tc.want)
		}
	}
}

func TestReadHeaderDoesNotNeedTheData(t *testing.T) {
	requireMricron(t)
	h, err := ReadHeader(filepath.Join(templates, "ch2better.nii.gz"))
	if err != nil || !slices.Equal(h.Shape(), []int{301, 370, 316}) || h.Datatype != Uint8 {
		t.Errorf("ch2better.nii.gz: header %v %s, error %v", h.Shape(), h.Datatype, err)
	}
}

// FuzzDecode feeds arbitrary bytes, seeded with valid NIfTI-1 and NIfTI-2
// streams, to the reader: it must return a volume or an error, never panic,
// and a volume must have as many values as its header has voxels.
func FuzzDecode(f *testing.F) {
	for _, version := range []int{1, 2} {
		h := geometry()
		h.Version = version
		var b bytes.Buffer
		if err := Encode("seed", &b, h, make([]float32, h.Voxels())); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := Decode("fuzz.nii", bytes.NewReader(b))
		if err != nil {
			if !strings.HasPrefix(err.Error(), "fuzz.nii: ") {
				t.Errorf("error does not name the file: %v", err)
			}
			return
		}
		if int64(len(v.Data)) != v.Header.Voxels() {
			t.Errorf("%d values for %d voxels", len(v.Data), v.Header.Voxels())
		}
	})
}

// byteOrder is what both binary.LittleEndian and binary.BigEndian offer.
type byteOrder interface {
	binary.ByteOrder
	binary.AppendByteOrder
}

// TestHugeHeaderInTinyGzip: a few hundred bytes of gzip whose header claims
// 2048³ float32 voxels (32 GiB) and whose trailer agrees with it (the
// inflated size modulo 2^32 is the header's 352 bytes) is refused as
// truncated, naming the full path, without reserving the 32 GiB: deflate
// cannot inflate that file past ~1032 times its size.
func TestHugeHeaderInTinyGzip(t *testing.T) {
	h := Header{}
	h.Dim = [8]int64{3, 2, 2, 2, 1, 1, 1, 1}
	var buf bytes.Buffer
	if err := Encode("x", &buf, h, make([]float32, 8)); err != nil {
		t.Fatal(err)
	}
	b := buf.Bytes()[:352]
	for i := range 3 {
		binary.LittleEndian.PutUint16(b[42+2*i:], 2048)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(b)
	zw.Close()
	path := filepath.Join(t.TempDir(), "huge.nii.gz")
	if err := os.WriteFile(path, gz.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := Read(path)
	runtime.ReadMemStats(&after)
	if err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "truncated") {
		t.Errorf("%d bytes claiming 32 GiB: %v, want a truncation naming %s", gz.Len(), err, path)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 64<<20 {
		t.Errorf("reading it allocated %d MB", grew>>20)
	}
}

// TestGzipTrailerAndPaths: a .nii.gz whose trailer's CRC-32 or size does
// not match the data inflated is refused (the stream is read to its end);
// errors name the file's absolute path, as the .npy reader's do, and are
// bad input.
func TestGzipTrailerAndPaths(t *testing.T) {
	dir := t.TempDir()
	h := geometry()
	var raw bytes.Buffer
	if err := Encode("x", &raw, h, make([]float32, h.Voxels())); err != nil {
		t.Fatal(err)
	}
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	zw.Write(raw.Bytes())
	zw.Close()
	good := gz.Bytes()
	for name, at := range map[string]int{"crc.nii.gz": len(good) - 8, "size.nii.gz": len(good) - 2} {
		b := slices.Clone(good)
		b[at] ^= 0xff
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p+": gzip: invalid checksum") {
			t.Errorf("%s: %v, want the gzip trailer refused", name, err)
		}
	}
	p := filepath.Join(dir, "cut-trailer.nii.gz")
	os.WriteFile(p, good[:len(good)-3], 0o644)
	if _, err := Read(p); err == nil || !strings.Contains(err.Error(), p+": truncated") {
		t.Errorf("a cut trailer: %v", err)
	}
	os.WriteFile(filepath.Join(dir, "ok.NII.GZ"), good, 0o644)
	if _, err := Read(filepath.Join(dir, "ok.NII.GZ")); err != nil {
		t.Errorf("the intact file: %v", err)
	}

	wd, _ := os.Getwd()
	defer os.Chdir(wd)
	os.Chdir(dir)
	os.WriteFile("junk.nii", make([]byte, 400), 0o644)
	for _, read := range []func(string) error{
		func(p string) error { _, err := Read(p); return err },
		func(p string) error { _, err := ReadHeader(p); return err },
	} {
		err := read("junk.nii")
		var ne *Error
		if err == nil || !strings.HasPrefix(err.Error(), filepath.Join(dir, "junk.nii")+": not NIfTI") || !errors.As(err, &ne) || !ne.BadInput() {
			t.Errorf("a relative path: %v, want bad input naming %s", err, filepath.Join(dir, "junk.nii"))
		}
	}
}

// TestTrailingGzipDataRefused: a .nii.gz holding more than its header's
// volume, in the same gzip member or in members after it, is refused
// naming the file, and only a bounded amount past the volume is
// inflated to find out (the 2 GiB here would take seconds).
func TestTrailingGzipDataRefused(t *testing.T) {
	dir := t.TempDir()
	h := geometry()
	var raw bytes.Buffer
	if err := Encode("x", &raw, h, make([]float32, h.Voxels())); err != nil {
		t.Fatal(err)
	}
	member := func(parts ...[]byte) []byte {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
		for _, p := range parts {
			zw.Write(p)
		}
		zw.Close()
		return gz.Bytes()
	}
	// 2 GiB of zeros in 2048 members of 1 MiB: about 2 MB, made at once.
	mib := member(make([]byte, 1<<20))
	var big bytes.Buffer
	for range 2048 {
		big.Write(mib)
	}
	for name, b := range map[string][]byte{
		"same-member.nii.gz":   member(raw.Bytes(), []byte("extra")),
		"second-member.nii.gz": append(member(raw.Bytes()), member([]byte("extra"))...),
		"2gib-after.nii.gz":    append(member(raw.Bytes()), big.Bytes()...),
	} {
		p := filepath.Join(dir, name)
		os.WriteFile(p, b, 0o644)
		start := time.Now()
		_, err := Read(p)
		var ne *Error
		if !errors.As(err, &ne) || !ne.BadInput() || !strings.Contains(err.Error(), p+": ") || !strings.Contains(err.Error(), "more data follows the volume") {
			t.Errorf("%s: %v, want the data after the volume refused, naming the file", name, err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("%s: took %v", name, d)
		}
	}
	p := filepath.Join(dir, "exact.nii.gz")
	os.WriteFile(p, member(raw.Bytes()), 0o644)
	if _, err := Read(p); err != nil {
		t.Errorf("a volume and nothing after it: %v", err)
	}
}
