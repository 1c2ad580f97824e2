//go:build unix

package images

import (
	"testing"

	"github.com/ortrain/ortrain/training/safefile/fifotest"
)

// TestNamedPipeRefused: an image in a training folder that is a named
// pipe is refused when it is loaded, with either decoder, instead of
// blocking the training step that needs it.
func TestNamedPipeRefused(t *testing.T) {
	p := fifotest.Make(t, t.TempDir(), "cat.jpg")
	for _, dec := range []Decoder{LibJPEGTurbo, GoJPEG} {
		ds, err := New([]Item{{p, 0}}, Config{Train: true, Decoder: dec})
		if err != nil {
			t.Fatal(err)
		}
		fifotest.Refused(t, p, func() error { _, _, err := load(t, ds, 0, 1); return err })
	}
}
