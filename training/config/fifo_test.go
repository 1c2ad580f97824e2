//go:build unix

package config

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: a --config that is a named pipe is refused at
// once.
func TestNamedPipeRefused(t *testing.T) {
	p := fifotest.Make(t, t.TempDir(), "run.toml")
	fifotest.Refused(t, p, func() error { _, err := Load(p); return err })
}
