//go:build unix

// Package fifotest checks, in other packages' tests, that a reader given a
// named pipe refuses it at once instead of blocking for a writer.
package fifotest

import (
	"errors"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/training/safefile"
)

// Make creates a named pipe called name in dir and returns its path; the
// test is skipped where pipes cannot be made.
func Make(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Skip("no named pipes here:", err)
	}
	return p
}

// Refused fails the test unless read returns within five seconds an
// error that is a *safefile.NotFileError (or says what one says) and
// names path. A read that blocks is reported and left behind: nothing
// will ever write to the pipe.
func Refused(t testing.TB, path string, read func() error) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- read() }()
	select {
	case err := <-done:
		var nf *safefile.NotFileError
		if err == nil || !strings.Contains(err.Error(), path) || !(errors.As(err, &nf) || strings.Contains(err.Error(), "is a named pipe, not a file")) {
			t.Errorf("reading the named pipe %s: %v, want it refused as a named pipe, named", path, err)
		}
		var bad interface{ BadInput() bool }
		if err != nil && (!errors.As(err, &bad) || !bad.BadInput()) {
			t.Errorf("reading the named pipe %s: %v (%T) is not marked bad input (exit 2)", path, err, err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("reading the named pipe %s blocked", path)
	}
}
