package plan

import (
	"os"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/setup"
)

// PredictStep predicts c's training step on gpu at the per-device batch:
// prebuilt artifacts (model.artifacts) as they are, else artifacts built
// in a temporary directory, which it removes, as a CUDA run builds them
// (convolution gradients in CUDA's form, autodiff.ConvFormFor; low-precision
// kernels probed through the loaded ONNX Runtime, emulated where it has no
// CUDA).
func PredictStep(c *config.Config, gpu GPU) (*StepTime, error) {
	tmp, err := os.MkdirTemp("", "ortrain-plan-step-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	dir, _, err := setup.Artifacts(c, tmp, ort.Options{Device: ort.CUDADevice(0)})
	if err != nil {
		return nil, err
	}
	return PredictArtifacts(dir, int64(c.Data.BatchSize), gpu, StepOptions{TF32: c.Runtime.UseTF32})
}
