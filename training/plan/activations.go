package plan

import (
	"os"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/setup"
)

// Activations is a training step's device memory at the per-device batch,
// replayed at graph level in ONNX Runtime's execution order (memplan):
// what a step holds beside the training state. Kernel workspaces and the
// allocator's overhead come on top (`ortrain bench` measures them).
type Activations struct {
	Batch     int64  `json:"batch"`
	Recompute string `json:"recompute"`
	// PeakBytes is the intermediate values live at the step's peak;
	// PerSample is PeakBytes / Batch.
	PeakBytes int64 `json:"peak_bytes"`
	PerSample int64 `json:"per_sample_bytes"`
	// InputBytes is the batch; StateBytes the training state as the engine
	// allocates it (parameters, accumulators, optimizer states, buffers).
	InputBytes int64 `json:"input_bytes"`
	StateBytes int64 `json:"state_bytes"`
	// TotalBytes adds them up.
	TotalBytes int64 `json:"total_bytes"`
	// Emulated says the mixed-precision products were emulated where the
	// plan was made (no low-precision kernels on the CPU): the replay then
	// holds them in float32 with rounding copies, more than a GPU with
	// bfloat16/float16 kernels holds; a float32 plan is the closer figure.
	Emulated bool `json:"emulated,omitempty"`
}

// MeasureActivations builds c's artifacts in a temporary directory, which
// it removes, and replays a training step at the per-device batch size.
// session is where precision kernels are probed (the CPU: plan needs no
// GPU; a bfloat16 product is then emulated, which holds the same values).
func (p *Plan) MeasureActivations(c *config.Config, session ort.Options) error {
	tmp, err := os.MkdirTemp("", "ortrain-plan-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(tmp)
	dir, m, err := setup.Artifacts(c, tmp, session)
	if err != nil {
		return err
	}
	batch := int64(c.Data.BatchSize)
	r, err := artifacts.Memory(dir, batch)
	if err != nil {
		return err
	}
	a := &Activations{Batch: batch, Recompute: c.Model.Recompute, PeakBytes: r.Peak, PerSample: r.Peak / max(batch, 1),
		InputBytes: r.Inputs, StateBytes: r.State, Emulated: m.Precision.EmulatedNodes > 0}
	if a.Recompute == "" {
		a.Recompute = "cheap"
	}
	a.TotalBytes = a.PeakBytes + a.InputBytes + a.StateBytes
	p.Activations = a
	return nil
}
