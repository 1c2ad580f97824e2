//go:build unix

package safefile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOpenRefusesPipes: a named pipe, a link to one, a folder and a
// device are refused at once, named by absolute path; a regular file
// (through a link too) opens and reads whole.
func TestOpenRefusesPipes(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "in.jpg")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("no named pipes here:", err)
	}
	link := filepath.Join(dir, "link.nii")
	if err := os.Symlink(fifo, link); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ path, want string }{
		{fifo, "is a named pipe, not a file"},
		{link, "is a named pipe, not a file"},
		{dir, "is a folder, not a file"},
		{"/dev/null", "is a character device, not a file"},
	} {
		done := make(chan error, 2)
		go func() { _, err := Open(c.path); done <- err }()
		go func() { _, err := ReadFile(c.path); done <- err }()
		for range 2 {
			select {
			case err := <-done:
				var nf *NotFileError
				if !errors.As(err, &nf) || !nf.BadInput() || !strings.Contains(err.Error(), c.want) || !strings.HasPrefix(err.Error(), c.path) {
					t.Errorf("%s: %v, want a *NotFileError %q naming it", c.path, err, c.want)
				}
			case <-time.After(5 * time.Second):
				t.Fatalf("%s: opening blocked", c.path)
			}
		}
		if err := Check(c.path); err == nil {
			t.Errorf("Check(%s) passed", c.path)
		}
	}
	reg := filepath.Join(dir, "a.txt")
	if err := os.WriteFile(reg, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	rl := filepath.Join(dir, "a-link.txt")
	os.Symlink(reg, rl)
	for _, p := range []string{reg, rl} {
		b, err := ReadFile(p)
		if err != nil || string(b) != "hello" {
			t.Errorf("ReadFile(%s) = %q, %v", p, b, err)
		}
		if err := Check(p); err != nil {
			t.Error(err)
		}
	}
	if err := Check(filepath.Join(dir, "missing")); err != nil {
		t.Errorf("Check of a missing path: %v, want nil (the open reports it)", err)
	}
}
