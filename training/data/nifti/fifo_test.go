//go:build unix

package nifti

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: a .nii.gz that is a named pipe (a volume in a
// training folder, an eval --input) is refused at once, not waited on.
func TestNamedPipeRefused(t *testing.T) {
	p := fifotest.Make(t, t.TempDir(), "ct.nii.gz")
	fifotest.Refused(t, p, func() error { _, err := Read(p); return err })
	fifotest.Refused(t, p, func() error { _, err := ReadHeader(p); return err })
}
