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
}

// Reconstruct windows vol (shape D×H×W, C order) to [-1, 1] as training did,
// reconstructs it patch by patch with the model (sliding windows, blended as
// opt says; opt.Patch defaults to the model's), and maps the result back to
// the volume's intensity units. A zero window uses the volume's own range,
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
	out, err := sliding.Infer(ctx, norm, shape, opt, func(batch []float32, n int) ([]float32, error) {
		return m.Predict(batch, n, patch)
	})
	if err != nil {
		return nil, err
	}
	ref := make([]float32, len(vol))
	half := (hi - lo) / 2
	for i, v := range vol {
		ref[i] = min(max(v, lo), hi)
		out[i] = lo + (out[i]+1)*half
	}
	return &Reconstruction{Reference: ref, Recon: out}, nil
}
