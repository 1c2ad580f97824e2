package eval

import (
	"context"

	"github.com/ortrain/ortrain/eval/sliding"
	"github.com/ortrain/ortrain/training/data/volumes"
)

// Reconstruction is a whole volume passed through a model.
type Reconstruction struct {
	// Reference is the input in its own units, clamped to the intensity
	// window the model was trained on: what a perfect model gives back.
	Reference []float32
	// Recon is the model's output mapped back to those units.
	Recon []float32
	// Window is the intensity window used: the model's, or the volume's
	// own min and max when it has none.
	Window [2]float64
	// Clipped counts the voxels of the input outside Window, which
	// Reference holds at its bounds.
	Clipped int64
}

// Reconstruct windows vol (shape D×H×W, C order) to [-1, 1] as training did,
// reconstructs it patch by patch with the model (sliding windows, blended as
// opt says; opt.Patch defaults to the model's; a volume smaller than the
// patch padded as training pads it, and cropped back), and maps the result
// back to the volume's intensity units. A zero window uses the volume's own range,
// like the loader.
func Reconstruct(ctx context.Context, m *Model, vol []float32, shape [3]int, w volumes.Window, opt sliding.Options) (*Reconstruction, error) {
	if opt.Patch == [3]int{} {
		opt.Patch = m.Patch()
	}
	lo, hi := w.Low, w.High
	if lo == 0 && hi == 0 {
		l, h, err := finiteRange(vol)
		if err != nil {
			return nil, &InputError{Err: err}
		}
		lo, hi = float32(l), float32(h)
	}
	norm := append([]float32(nil), vol...)
	volumes.Apply(volumes.Window{Low: lo, High: hi}, norm)
	patch := opt.Patch
	// An axis shorter than the patch is padded at its end with -1, the
	// window's low value, as the training loader pads such volumes; the
	// reconstruction is cropped back, so no metric sees the padding.
	padded, pshape := padTo(norm, shape, patch, -1)
	out, err := sliding.Infer(ctx, padded, pshape, opt, func(batch []float32, n int) ([]float32, error) {
		return m.Predict(batch, n, patch)
	})
	if err != nil {
		return nil, err
	}
	if pshape != shape {
		out = cropTo(out, pshape, shape)
	}
	ref := make([]float32, len(vol))
	half := (hi - lo) / 2
	var clipped int64
	for i, v := range vol {
		if v < lo || v > hi {
			clipped++
		}
		ref[i] = min(max(v, lo), hi)
		out[i] = lo + (out[i]+1)*half
	}
	return &Reconstruction{Reference: ref, Recon: out, Window: [2]float64{float64(lo), float64(hi)}, Clipped: clipped}, nil
}

// padTo extends the D×H×W volume v so that every axis is at least patch's,
// filling the new voxels (at each axis's end) with value; v itself when it
// is large enough.
func padTo(v []float32, shape, patch [3]int, value float32) ([]float32, [3]int) {
	ps := shape
	for i := range 3 {
		ps[i] = max(shape[i], patch[i])
	}
	if ps == shape {
		return v, shape
	}
	out := make([]float32, ps[0]*ps[1]*ps[2])
	for i := range out {
		out[i] = value
	}
	for z := range shape[0] {
		for y := range shape[1] {
			copy(out[(z*ps[1]+y)*ps[2]:], v[(z*shape[1]+y)*shape[2]:(z*shape[1]+y+1)*shape[2]])
		}
	}
	return out, ps
}

// cropTo keeps the first shape voxels of each axis of the ps-shaped v.
func cropTo(v []float32, ps, shape [3]int) []float32 {
	out := make([]float32, shape[0]*shape[1]*shape[2])
	for z := range shape[0] {
		for y := range shape[1] {
			copy(out[(z*shape[1]+y)*shape[2]:(z*shape[1]+y+1)*shape[2]], v[(z*ps[1]+y)*ps[2]:])
		}
	}
	return out
}
