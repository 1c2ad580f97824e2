package plan

import (
	"fmt"
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
//
// A bf16-mixed step with convolutions comes with the same step in 16-mixed
// (StepTime.Float16): ONNX Runtime's CUDA provider has no bfloat16 Conv or
// ConvTranspose, so bf16-mixed runs them in float32 (TF32), and that is
// the choice a user of a convolutional model makes before renting a GPU.
func PredictStep(c *config.Config, gpu GPU) (*StepTime, error) {
	st, err := predictStep(c, gpu)
	if err != nil || c.Trainer.Precision != config.BF16Mixed || st.convs().calls == 0 {
		return st, err
	}
	c16 := *c
	c16.Trainer.Precision = config.FP16Mixed
	if st.Float16, err = predictStep(&c16, gpu); err != nil {
		return nil, fmt.Errorf("the step in 16-mixed: %w", err)
	}
	return st, nil
}

func predictStep(c *config.Config, gpu GPU) (*StepTime, error) {
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
