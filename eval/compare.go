// Package eval evaluates reconstructions: metrics of a volume against its
// reference, sliding-window reconstruction through a model (eval/sliding),
// and the HTML report (eval/report).
package eval

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/ortrain/ortrain/eval/report"
	"github.com/ortrain/ortrain/metrics"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/volumes"
)

// VolumeMetrics are the reconstruction metrics of one volume against its
// reference, computed in the reference's intensity units.
type VolumeMetrics struct {
	// Name is the volume's file, as given or found.
	Name string `json:"name"`
	// ID names the volume in metric rows ("case_00000/imaging/psnr"):
	// its path under the data folder without the extension (volumes.ID),
	// unique among the volumes evaluated. Empty: Name's base name.
	ID        string  `json:"id,omitempty"`
	Shape     [3]int  `json:"shape"` // C order: slowest axis first
	DataRange float64 `json:"data_range"`
	PSNR      float64 `json:"psnr"`
	// SSIM is nil when an axis is shorter than its 11-voxel Gaussian window
	// (scikit-image refuses such a volume too); SSIMNote says so.
	SSIM     *float64 `json:"ssim"`
	SSIMNote string   `json:"ssim_note,omitempty"`
	// MSSSIM is nil when the volume is smaller than MS-SSIM's five scales
	// need (metrics.MSSSIMMinSize voxels on every axis); MSSSIMNote says so.
	MSSSIM     *float64 `json:"ms_ssim"`
	MSSSIMNote string   `json:"ms_ssim_note,omitempty"`
	MAE        float64  `json:"mae"`
	MSE        float64  `json:"mse"`
	// Window is the intensity window of a checkpoint's reconstruction
	// (the model's, or the volume's own min..max); the reference was
	// clamped to it, and Clipped counts the voxels that changed.
	Window  *[2]float64 `json:"window,omitempty"`
	Clipped *int64      `json:"clipped_voxels,omitempty"`
	// Warnings are what the numbers should be read with: volumes whose
	// geometry differs, a .npy that looks transposed against a NIfTI, a
	// data range far below the data's.
	Warnings []string `json:"warnings,omitempty"`
}

// InputError is a volume that cannot be compared: unreadable, of another
// shape than its reference, not 3D, or holding NaN or Inf.
type InputError struct {
	File string
	Err  error
}

func (e *InputError) Error() string {
	if e.File == "" {
		return e.Err.Error()
	}
	return e.File + ": " + e.Err.Error()
}
func (e *InputError) Unwrap() error { return e.Err }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *InputError) BadInput() bool { return true }

// CompareFiles reads two volumes (NIfTI or .npy) and computes PSNR, SSIM
// (3D, Gaussian window as scikit-image's gaussian_weights=True), MS-SSIM,
// MAE and MSE of input against reference. dataRange 0 takes the
// reference's max − min. Volumes are compared voxel by voxel in the order
// they are stored: the result's Warnings say where the two files' geometry
// (NIfTI voxel spacing or orientation) differs, or where a .npy compared
// with a NIfTI looks transposed.
func CompareFiles(input, reference string, dataRange float64) (VolumeMetrics, report.VolumeResult, error) {
	// The headers first: what they declare is checked before the voxels
	// are read, so that a file declaring gigabytes of another shape is
	// refused without inflating them.
	hin, err := readHeader(input)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	href, err := readHeader(reference)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	mixed := isArray(input) != isArray(reference)
	if err := sameShape(input, reference, hin, href, mixed); err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	in, err := readVolume(input)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	ref, err := readVolume(reference)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	if err := sameShape(input, reference, in.Header, ref.Header, mixed); err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	if dataRange == 0 {
		lo, hi, err := finiteRange(ref.Data)
		if err != nil {
			return VolumeMetrics{}, report.VolumeResult{}, &InputError{File: reference, Err: err}
		}
		if hi == lo {
			return VolumeMetrics{}, report.VolumeResult{}, &InputError{File: reference,
				Err: fmt.Errorf("the reference is constant (every voxel %g), so its data range (max - min) is 0: pass --data-range, the intensity range of the data", lo)}
		}
	}
	m, err := Compare(input, in.Data, ref.Data, Shape(ref), dataRange)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	if !mixed && !isArray(input) {
		m.Warnings = append(m.Warnings, geometryWarnings(input, reference, in.Header, ref.Header)...)
	}
	if mixed {
		if w := transposedWarning(in.Data, ref.Data, Shape(ref)); w != "" {
			m.Warnings = append(m.Warnings, w)
		}
	}
	if dataRange > 0 {
		if note := rangeNote("--data-range", dataRange, ref.Data); note != "" {
			m.Warnings = append(m.Warnings, note)
		}
	}
	entry := m.ReportEntry(ref, in.Data)
	if isArray(reference) {
		entry.Spacing, entry.SpacingUnknown = [3]float64{}, true
	}
	return m, entry, nil
}

// axisOrder states how ortrain orders the axes of each format.
const axisOrder = "ortrain reads a .npy in NumPy's index order [z,y,x] (the last axis varies fastest) and a NIfTI as [z,y,x] too (nibabel's [x,y,z] shape reversed)"

// isArray says whether path is read as a NumPy array.
func isArray(path string) bool { return strings.EqualFold(filepath.Ext(path), ".npy") }

// geometryWarnings compares two NIfTI headers: voxel spacing, and the
// voxel-to-world transform (a flipped or shifted volume stored with the
// same shape compares voxel by voxel as if aligned).
func geometryWarnings(input, reference string, a, b nifti.Header) []string {
	var out []string
	sa := [3]float64{a.PixDim[1], a.PixDim[2], a.PixDim[3]}
	sb := [3]float64{b.PixDim[1], b.PixDim[2], b.PixDim[3]}
	if !closeAll(sa[:], sb[:]) {
		out = append(out, fmt.Sprintf("the voxel spacing differs: %s has %s mm, the reference %s %s mm (x, y, z); the volumes are compared voxel by voxel as they are stored, not resampled",
			input, spacing(sa), reference, spacing(sb)))
	}
	aa, ab := a.Affine(), b.Affine()
	var ra, rb []float64
	for i := range 3 {
		ra, rb = append(ra, aa[i][:]...), append(rb, ab[i][:]...)
	}
	if closeAll(sa[:], sb[:]) && !closeAll(ra, rb) {
		out = append(out, fmt.Sprintf("the voxel-to-world transform (affine) differs: %s has %s, the reference %s %s; a volume stored flipped or shifted is compared voxel by voxel as if aligned",
			input, affine(aa), reference, affine(ab)))
	}
	return out
}

// closeAll says whether a and b agree to 1e-4 relative (or 1e-4 absolute
// near zero): NIfTI stores float32.
func closeAll(a, b []float64) bool {
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-4*max(1, math.Abs(a[i]), math.Abs(b[i])) {
			return false
		}
	}
	return true
}

func spacing(s [3]float64) string {
	return fmt.Sprintf("%.4g × %.4g × %.4g", s[0], s[1], s[2])
}

func affine(a [4][4]float64) string {
	var rows []string
	for i := range 3 {
		rows = append(rows, fmt.Sprintf("[%.4g %.4g %.4g %.4g]", a[i][0], a[i][1], a[i][2], a[i][3]))
	}
	return "[" + strings.Join(rows, " ") + "]"
}

// transposedWarning is said when a .npy compared with a NIfTI of a shape
// that reads the same reversed ([n, m, n]) matches the reference much
// better with its axes reversed: the array is most likely in nibabel's
// [x,y,z] order.
func transposedWarning(in, ref []float32, shape [3]int) string {
	if shape[0] != shape[2] || shape[0] == 1 {
		return ""
	}
	d, h, w := shape[0], shape[1], shape[2]
	var asIs, reversed float64
	for z := range d {
		for y := range h {
			for x := range w {
				r := float64(ref[(z*h+y)*w+x])
				a := float64(in[(z*h+y)*w+x]) - r
				b := float64(in[(x*h+y)*w+z]) - r // in read as [x,y,z]
				asIs += a * a
				reversed += b * b
			}
		}
	}
	if !(reversed < asIs/4) {
		return ""
	}
	how := "exactly"
	if reversed > 0 {
		how = fmt.Sprintf("%.3g times better (in squared error)", asIs/reversed)
	}
	return fmt.Sprintf("the .npy matches the reference %s with its axes reversed: it is most likely in nibabel's [x,y,z] order (get_fdata()); %s; save its transpose (np.save(path, vol.T))",
		how, axisOrder)
}

// rangeNote warns of a data range far below the span of the reference's
// intensities (--data-range 1 on CT in HU): PSNR and SSIM would then be
// measured on a scale the data does not have.
func rangeNote(flag string, dataRange float64, ref []float32) string {
	lo, hi, err := finiteRange(ref)
	if err != nil || hi-lo <= 10*dataRange {
		return ""
	}
	return fmt.Sprintf("%s %g is %.0f times smaller than the reference's intensity range %.6g..%.6g: PSNR and SSIM take %g as the span of the intensities", flag, dataRange, (hi-lo)/dataRange, lo, hi, dataRange)
}

// Compare computes the metrics of recon against ref, both of the given shape.
func Compare(name string, recon, ref []float32, shape [3]int, dataRange float64) (VolumeMetrics, error) {
	m := VolumeMetrics{Name: name, Shape: shape, DataRange: dataRange}
	if m.DataRange == 0 {
		lo, hi, err := finiteRange(ref)
		if err != nil {
			return m, &InputError{File: name, Err: fmt.Errorf("reference: %w", err)}
		}
		m.DataRange = hi - lo
		if m.DataRange == 0 {
			return m, &InputError{File: name, Err: errors.New("the reference is constant, so its data range (max - min) is 0: give the data range")}
		}
	}
	x := metrics.Volume{Data: recon, Shape: shape[:]}
	y := metrics.Volume{Data: ref, Shape: shape[:]}
	var err error
	wrap := func(e error) error { return &InputError{File: name, Err: e} }
	if m.PSNR, err = metrics.PSNR(recon, ref, m.DataRange); err != nil {
		return m, wrap(err)
	}
	if min(shape[0], shape[1], shape[2]) < metrics.GaussianWindow {
		m.SSIMNote = fmt.Sprintf("not computed: SSIM's Gaussian window needs at least %d voxels on every axis", metrics.GaussianWindow)
	} else {
		ssim, err := metrics.SSIM(x, y, metrics.GaussianOptions(m.DataRange))
		if err != nil {
			return m, wrap(err)
		}
		m.SSIM = &ssim
	}
	if m.MAE, err = metrics.MAE(recon, ref); err != nil {
		return m, wrap(err)
	}
	if m.MSE, err = metrics.MSE(recon, ref); err != nil {
		return m, wrap(err)
	}
	if min(shape[0], shape[1], shape[2]) < metrics.MSSSIMMinSize {
		m.MSSSIMNote = fmt.Sprintf("not computed: MS-SSIM's 5 scales need at least %d voxels on every axis", metrics.MSSSIMMinSize)
		return m, nil
	}
	ms, err := metrics.MSSSIM(x, y, m.DataRange)
	if err != nil {
		return m, wrap(err)
	}
	m.MSSSIM = &ms
	return m, nil
}

// ReportEntry is the report's view of the volume: ref is the reference
// (its header gives the voxel spacing), recon the reconstruction.
func (m VolumeMetrics) ReportEntry(ref *nifti.Volume, recon []float32) report.VolumeResult {
	vals := map[string]float64{"PSNR": m.PSNR, "MAE": m.MAE, "MSE": m.MSE}
	if m.SSIM != nil {
		vals["SSIM"] = *m.SSIM
	}
	if m.MSSSIM != nil {
		vals["MS-SSIM"] = *m.MSSSIM
	}
	h := ref.Header
	return report.VolumeResult{
		Name: m.Name, Shape: m.Shape, Input: ref.Data, Recon: recon, Metrics: vals,
		Spacing: [3]float64{h.PixDim[3], h.PixDim[2], h.PixDim[1]},
	}
}

// Label is how metric rows name the volume: its ID, or its file's name
// without the extension.
func (m VolumeMetrics) Label() string {
	if m.ID != "" {
		return m.ID
	}
	return volumes.Name(m.Name)
}

// volumeIDs are the IDs of files found under the data folder root
// (volumes.ID). Files given one by one (root "") are named by their file
// names, or, where two share a name, by their paths without extension, so
// that no two rows of metrics share a name.
func volumeIDs(root string, files []string) []string {
	ids := make([]string, len(files))
	seen := map[string]int{}
	for i, f := range files {
		ids[i] = volumes.ID(root, f)
		seen[ids[i]]++
	}
	for i, f := range files {
		if seen[ids[i]] > 1 {
			p := filepath.ToSlash(filepath.Clean(f))
			ids[i] = p[:len(p)-len(filepath.Base(p))] + volumes.Name(p)
		}
	}
	return ids
}

// Shape returns a NIfTI volume's size in C order (z, y, x), the order of its
// data with x varying fastest.
func Shape(v *nifti.Volume) [3]int {
	d := v.Header.Dim
	return [3]int{int(d[3]), int(d[2]), int(d[1])}
}

// sameShape refuses an input whose shape is not the reference's.
func sameShape(input, reference string, in, ref nifti.Header, mixed bool) error {
	si, sr := headerShape(in), headerShape(ref)
	if si == sr {
		return nil
	}
	msg := fmt.Sprintf("shape %v differs from the reference %s's %v (shapes are [z,y,x]: the slowest axis first)", si, reference, sr)
	if mixed {
		msg += "; " + axisOrder
		if [3]int{si[2], si[1], si[0]} == sr {
			msg += ": the .npy's axes are those of the NIfTI reversed, as an array saved from nibabel's get_fdata() is; save its transpose (np.save(path, vol.T))"
		}
	}
	return &InputError{File: input, Err: errors.New(msg)}
}

func headerShape(h nifti.Header) [3]int {
	return [3]int{int(h.Dim[3]), int(h.Dim[2]), int(h.Dim[1])}
}

// readHeader reads a volume file's header, refusing more than 3-D.
func readHeader(path string) (nifti.Header, error) {
	h, err := volumes.ReadHeader(path)
	if err != nil {
		return h, &InputError{Err: err} // the readers' errors name the file
	}
	return h, only3D(path, h)
}

func readVolume(path string) (*nifti.Volume, error) {
	v, err := volumes.Read(path)
	if err != nil {
		return nil, &InputError{Err: err} // the readers' errors name the file
	}
	return v, only3D(path, v.Header)
}

func only3D(path string, h nifti.Header) error {
	d := h.Dim
	for i := 4; i <= int(d[0]) && i < len(d); i++ {
		if d[i] > 1 {
			return &InputError{File: path, Err: fmt.Errorf("a %d-D volume (dim %v); ortrain compares 3-D volumes", d[0], d[1:d[0]+1])}
		}
	}
	return nil
}

func finiteRange(x []float32) (lo, hi float64, err error) {
	if len(x) == 0 {
		return 0, 0, errors.New("empty volume")
	}
	lo, hi = float64(x[0]), float64(x[0])
	for i, v := range x {
		f := float64(v)
		if math.IsNaN(f) || math.IsInf(f, 0) {
			return 0, 0, fmt.Errorf("voxel %d is %v", i, v)
		}
		lo, hi = min(lo, f), max(hi, f)
	}
	return lo, hi, nil
}

// CSV is the metrics as metric,value rows at full precision, as eval
// --reference --out-dir writes metrics.csv; SSIM and MS-SSIM read "not
// computed" where the volume is too small for them.
func (m VolumeMetrics) CSV() [][]string {
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
	opt := func(x *float64) string {
		if x == nil {
			return "not computed"
		}
		return f(*x)
	}
	return [][]string{{"metric", "value"}, {"psnr", f(m.PSNR)}, {"ssim", opt(m.SSIM)}, {"ms_ssim", opt(m.MSSSIM)},
		{"mae", f(m.MAE)}, {"mse", f(m.MSE)}, {"data_range", f(m.DataRange)}}
}
