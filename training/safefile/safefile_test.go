package safefile

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
)

// TestWrite: a new file appears whole; an existing one is kept without
// overwrite and replaced with it; a failing writer leaves nothing behind,
// neither the file nor a temporary.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.txt")
	if err := WriteBytes(p, false, []byte("one")); err != nil {
		t.Fatal(err)
	}
	var ex *ExistsError
	if err := WriteBytes(p, false, []byte("two")); !errors.As(err, &ex) {
		t.Errorf("second write without overwrite: %v", err)
	}
	if b, _ := os.ReadFile(p); string(b) != "one" {
		t.Errorf("content %q after a refused write", b)
	}
	if err := WriteBytes(p, true, []byte("three")); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(p); string(b) != "three" {
		t.Errorf("content %q after overwrite", b)
	}
	boom := errors.New("disk full")
	q := filepath.Join(dir, "half.txt")
	if err := Write(q, false, func(w io.Writer) error { w.Write([]byte("ha")); return boom }); !errors.Is(err, boom) {
		t.Errorf("failing writer: %v", err)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("left behind: %v", ents)
	}
}
