package dtype_test

import (
	"os"
	"os/exec"
	"testing"
)

// TestPurePackagesBuildWithoutCgo: the packages that describe graphs,
// tensors, configurations and data build with CGO_ENABLED=0, without
// ONNX Runtime's headers (the house rule: only what runs ONNX Runtime
// needs cgo).
func TestPurePackagesBuildWithoutCgo(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("no go command")
	}
	pure := []string{
		"github.com/ortrain/ortrain/dtype",
		"github.com/ortrain/ortrain/ort/ortopt",
		"github.com/ortrain/ortrain/training/graph",
		"github.com/ortrain/ortrain/training/autodiff",
		"github.com/ortrain/ortrain/training/safetensors",
		"github.com/ortrain/ortrain/training/config",
		"github.com/ortrain/ortrain/training/schedule",
		"github.com/ortrain/ortrain/training/loss",
		"github.com/ortrain/ortrain/training/optim",
		"github.com/ortrain/ortrain/training/memplan",
		"github.com/ortrain/ortrain/training/checkpoint",
		"github.com/ortrain/ortrain/training/data/volumes",
		"github.com/ortrain/ortrain/training/data/tokens",
		"github.com/ortrain/ortrain/models",
		"github.com/ortrain/ortrain/metrics",
		"github.com/ortrain/ortrain/configs",
	}
	cmd := exec.Command("go", append([]string{"build"}, pure...)...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("CGO_ENABLED=0 go build: %v\n%s", err, out)
	}
}
