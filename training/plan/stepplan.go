package plan

import (
	"fmt"
	"os"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/setup"
)

// PredictStep predicts c's training step on gpu at the per-device batch:
// prebuilt artifacts (model.artifacts) as they are, else artifacts built
// in a temporary directory, which it removes, as a CUDA run builds them
// (convolution gradients in CUDA's form, autodiff.ConvFormFor; low-precision
// kernels probed through the loaded ONNX Runtime, emulated where it has no
// CUDA).
//
// A bf16-mixed step with convolutions comes with the same step in 16-mixed
// (StepTime.Float16): ONNX Runtime's CUDA provider has no bfloat16 Conv or
// ConvTranspose, so bf16-mixed runs them in float32 (TF32), and that is
// the choice a user of a convolutional model makes before renting a GPU.
func PredictStep(c *config.Config, gpu GPU) (*StepTime, error) {
	st, err := predictStep(c, gpu, true)
	if err != nil || c.Trainer.Precision != config.BF16Mixed || st.convs().calls == 0 {
		return st, err
	}
	c16 := *c
	c16.Trainer.Precision = config.FP16Mixed
	if st.Float16, err = predictStep(&c16, gpu, false); err != nil {
		return nil, fmt.Errorf("the step in 16-mixed: %w", err)
	}
	return st, nil
}

// predictStep predicts c's step; with larger, a launch-bound one's also
// at a larger batch (StepTime.Larger).
func predictStep(c *config.Config, gpu GPU, larger bool) (*StepTime, error) {
	tmp, err := os.MkdirTemp("", "ortrain-plan-step-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir, _, err := setup.Artifacts(c, tmp, ort.Options{Device: ort.CUDADevice(0)})
	if err != nil {
		return nil, err
	}
	batch := int64(c.Data.BatchSize)
	st, err := PredictArtifacts(dir, batch, gpu, StepOptions{TF32: c.Runtime.UseTF32})
	if err != nil || !larger || !st.launchBound(0.5) || !batchFree(dir) {
		return st, err
	}
	// Launches cost the same at any batch: the smallest of 2, 4, 8 and 16
	// times the batch at which they are under a quarter of the step.
	for k := int64(2); k <= 16; k *= 2 {
		if st.Larger, err = PredictArtifacts(dir, k*batch, gpu, StepOptions{TF32: c.Runtime.UseTF32}); err != nil {
			return nil, err
		}
		if !st.Larger.launchBound(0.25) {
			break
		}
	}
	return st, nil
}

// batchFree reports whether the artifacts in dir take any batch size: a
// data input whose first dimension is symbolic.
func batchFree(dir string) bool {
	m, err := artifacts.Load(dir)
	if err != nil {
		return false
	}
	for _, d := range m.Data {
		if len(d.Symbolic) > 0 && d.Symbolic[0] != "" {
			return true
		}
	}
	return false
}
