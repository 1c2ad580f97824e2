//go:build unix

package safetensors

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: weights (model.init_weights, a checkpoint) that
// are a named pipe are refused at once.
func TestNamedPipeRefused(t *testing.T) {
	p := fifotest.Make(t, t.TempDir(), "init.safetensors")
	fifotest.Refused(t, p, func() error { _, err := Open(p); return err })
}
