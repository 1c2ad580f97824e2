// Package eval evaluates reconstructions: metrics of a volume against its
// reference, sliding-window reconstruction through a model (eval/sliding),
// and the HTML report (eval/report).
package eval

import (
	"errors"
	"fmt"
	"math"
	"path/filepath"

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

// CompareFiles reads two NIfTI volumes and computes PSNR, SSIM (3D, Gaussian
// window as scikit-image's gaussian_weights=True), MS-SSIM, MAE and MSE of
// input against reference. dataRange 0 takes the reference's max − min.
func CompareFiles(input, reference string, dataRange float64) (VolumeMetrics, report.VolumeResult, error) {
	in, err := readVolume(input)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	ref, err := readVolume(reference)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	if Shape(in) != Shape(ref) {
		return VolumeMetrics{}, report.VolumeResult{}, &InputError{File: input,
			Err: fmt.Errorf("shape %v differs from the reference %s's %v", Shape(in), reference, Shape(ref))}
	}
	m, err := Compare(input, in.Data, ref.Data, Shape(ref), dataRange)
	if err != nil {
		return VolumeMetrics{}, report.VolumeResult{}, err
	}
	return m, m.ReportEntry(ref, in.Data), nil
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
			return m, &InputError{File: name, Err: errors.New("the reference is constant, so its data range is 0: pass --data-range")}
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
	vals := map[string]float64{"PSNR": m.PSNR, "MAE": m.MAE}
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

func readVolume(path string) (*nifti.Volume, error) {
	v, err := volumes.Read(path)
	if err != nil {
		return nil, &InputError{Err: err} // the readers' errors name the file
	}
	d := v.Header.Dim
	for i := 4; i <= int(d[0]) && i < len(d); i++ {
		if d[i] > 1 {
			return nil, &InputError{File: path, Err: fmt.Errorf("a %d-D volume (dim %v); ortrain compares 3-D volumes", d[0], d[1:d[0]+1])}
		}
	}
	return v, nil
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
