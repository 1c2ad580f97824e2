//go:build unix

package images

import (
	"os"
	"path/filepath"
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

// TestNamedPipeInAFolderRefused: a class folder holding a named pipe
// called .jpg, or a link to one, is refused when the folders are listed,
// before any run starts.
func TestNamedPipeInAFolderRefused(t *testing.T) {
	for _, viaLink := range []bool{false, true} {
		root := t.TempDir()
		tree(t, root, "cat/a.jpg", "dog/b.jpg")
		p := fifotest.Make(t, root, "dog/c.jpg")
		if viaLink { // hidden, so listed only through the link
			os.Rename(p, filepath.Join(root, "dog/.c.jpg"))
			tree(t, root, "dog/c.jpg -> .c.jpg")
		}
		fifotest.Refused(t, p, func() error { _, _, err := Folders(root); return err })
	}
}
