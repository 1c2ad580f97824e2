//go:build unix

package npy

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: a .npy that is a named pipe is refused at once.
func TestNamedPipeRefused(t *testing.T) {
	p := fifotest.Make(t, t.TempDir(), "ct.npy")
	fifotest.Refused(t, p, func() error { _, _, err := Read(p); return err })
	fifotest.Refused(t, p, func() error { _, err := ReadHeader(p); return err })
}
