package eval_test

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/training/data/nifti"
)

const templates = "/usr/share/mricron/templates/"

func needMricron(t *testing.T) {
	if _, err := os.Stat(templates + "ch2.nii.gz"); err != nil {
		t.Fatalf("the real MRI volumes are missing (%v): ./scripts/setup installs Debian's mricron-data", err)
	}
}

// TestCompareRealVolumes compares the brain-extracted ch2bet with ch2 and
// checks the figures against scikit-image 0.19.3 and nibabel (Debian's), run
// as:
//
//	a = nib.load("ch2bet.nii.gz").get_fdata(); b = nib.load("ch2.nii.gz").get_fdata()
//	peak_signal_noise_ratio(b, a, data_range=254)      # 14.97311515952996
//	structural_similarity(b, a, gaussian_weights=True, sigma=1.5,
//	    use_sample_covariance=False, data_range=254)   # 0.5949980544333702
//	np.abs(a - b).mean()                               # 22.31280322773355
//
// Both sides compute in float64 on the same voxels; the tolerance 1e-12
// relative leaves room for summation order only.
func TestCompareRealVolumes(t *testing.T) {
	needMricron(t)
	m, entry, err := eval.CompareFiles(templates+"ch2bet.nii.gz", templates+"ch2.nii.gz", 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"data range", m.DataRange, 254},
		{"PSNR", m.PSNR, 14.97311515952996},
		{"SSIM", *m.SSIM, 0.5949980544333702},
		{"MAE", m.MAE, 22.31280322773355},
	} {
		if math.Abs(c.got-c.want) > 1e-12*math.Abs(c.want) {
			t.Errorf("%s = %.16g, scikit-image %.16g", c.name, c.got, c.want)
		}
	}
	if m.MSSSIM == nil || *m.MSSSIM <= 0 || *m.MSSSIM >= 1 {
		t.Errorf("MS-SSIM of a 181×217×181 pair = %v (%s), want a value in (0, 1)", m.MSSSIM, m.MSSSIMNote)
	}
	if entry.Shape != [3]int{181, 217, 181} || entry.Spacing != [3]float64{1, 1, 1} {
		t.Errorf("report entry shape %v spacing %v, want 181×217×181 at 1 mm", entry.Shape, entry.Spacing)
	}
}

func TestCompareBadInput(t *testing.T) {
	needMricron(t)
	dir := t.TempDir()
	small := filepath.Join(dir, "small.nii")
	h := nifti.Header{Version: 1, Dim: [8]int64{3, 4, 5, 6, 1, 1, 1, 1}, PixDim: [8]float64{1, 1, 1, 1}, Datatype: nifti.Float32, BitPix: 32, SclSlope: 1}
	data := make([]float32, 4*5*6)
	if err := nifti.Write(small, h, data); err != nil {
		t.Fatal(err)
	}
	ramp := filepath.Join(dir, "ramp.nii")
	for i := range data {
		data[i] = float32(i)
	}
	if err := nifti.Write(ramp, h, data); err != nil {
		t.Fatal(err)
	}
	data[7] = float32(math.NaN())
	withNaN := filepath.Join(dir, "nan.nii")
	if err := nifti.Write(withNaN, h, data); err != nil {
		t.Fatal(err)
	}
	data[7] = float32(math.Inf(1))
	withInf := filepath.Join(dir, "inf.nii")
	if err := nifti.Write(withInf, h, data); err != nil {
		t.Fatal(err)
	}
	truncated := filepath.Join(dir, "truncated.nii")
	raw, _ := os.ReadFile(small)
	os.WriteFile(truncated, raw[:len(raw)/2], 0o644)

	cases := []struct {
		input, reference, want string
	}{
		{small, templates + "ch2.nii.gz", "differs from the reference"},
		{withNaN, ramp, withNaN + ": 1 voxel is not finite (1 NaN)"},
		// An Inf in the reference names the reference, not the input.
		{ramp, withInf, withInf + ": 1 voxel is not finite (1 +Inf)"},
		{small, small, "constant"},
		{truncated, small, "truncated.nii"},
		{filepath.Join(dir, "missing.nii"), small, "missing.nii"},
	}
	for _, c := range cases {
		_, _, err := eval.CompareFiles(c.input, c.reference, 0)
		var ie *eval.InputError
		if err == nil || !errors.As(err, &ie) || !ie.BadInput() || !strings.Contains(err.Error(), c.want) {
			t.Errorf("CompareFiles(%s, %s) = %v, want a bad-input error saying %q", filepath.Base(c.input), filepath.Base(c.reference), err, c.want)
		}
	}
}

// TestCompareAThinVolume: a volume thinner than SSIM's window gets PSNR,
// MAE and MSE, and SSIM "not computed" rather than failing the whole
// evaluation.
func TestCompareAThinVolume(t *testing.T) {
	shape := [3]int{8, 20, 24}
	ref := make([]float32, shape[0]*shape[1]*shape[2])
	rec := make([]float32, len(ref))
	for i := range ref {
		ref[i] = float32(i%13) / 13
		rec[i] = ref[i] + 0.01
	}
	m, err := eval.Compare("thin", rec, ref, shape, 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.SSIM != nil || !strings.Contains(m.SSIMNote, "at least 11 voxels") || m.MSSSIM != nil || math.Abs(m.MAE-0.01) > 1e-6 {
		t.Errorf("thin volume: SSIM %v (%q), MS-SSIM %v, MAE %v; want SSIM and MS-SSIM not computed, MAE 0.01", m.SSIM, m.SSIMNote, m.MSSSIM, m.MAE)
	}
}

// TestCompareChecksHeadersFirst: an input whose header already differs in
// shape from the reference's is refused from the headers, before its
// data is inflated: here 256 MiB of voxels in a gzip file of 256 kB.
func TestCompareChecksHeadersFirst(t *testing.T) {
	dir := t.TempDir()
	small := filepath.Join(dir, "small.nii")
	h := nifti.Header{Version: 1, Dim: [8]int64{3, 4, 5, 6, 1, 1, 1, 1}, PixDim: [8]float64{1, 1, 1, 1}, Datatype: nifti.Float32, BitPix: 32, SclSlope: 1}
	if err := nifti.Write(small, h, make([]float32, 4*5*6)); err != nil {
		t.Fatal(err)
	}
	// The big volume's header, then its zeros as gzip members of 1 MiB
	// each (a reader inflates them as one stream).
	var raw bytes.Buffer
	if err := nifti.Encode("small", &raw, h, make([]float32, 4*5*6)); err != nil {
		t.Fatal(err)
	}
	head := raw.Bytes()[:352]
	for i, d := range []uint16{512, 512, 256} { // dim[1..3]
		binary.LittleEndian.PutUint16(head[42+2*i:], d)
	}
	member := func(b []byte) []byte {
		var gz bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&gz, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		return gz.Bytes()
	}
	file := member(head)
	mib := member(make([]byte, 1<<20))
	for range 256 {
		file = append(file, mib...)
	}
	bomb := filepath.Join(dir, "bomb.nii.gz")
	if err := os.WriteFile(bomb, file, 0o644); err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, _, err := eval.CompareFiles(bomb, small, 0)
	runtime.ReadMemStats(&after)
	var ie *eval.InputError
	if !errors.As(err, &ie) || !ie.BadInput() || !strings.Contains(err.Error(), bomb) || !strings.Contains(err.Error(), "differs from the reference") {
		t.Errorf("a %d kB file of 256 MiB against a small reference: %v, want the shapes refused naming it", len(file)>>10, err)
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16<<20 {
		t.Errorf("refusing it allocated %d MB", grew>>20)
	}
}
