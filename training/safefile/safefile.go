// Package safefile writes files so that a reader (or a re-run after a kill
// or a full disk) sees either the old file, no file, or the whole new one:
// the content goes to a temporary file in the same directory, is synced,
// and is then renamed, or linked when an existing file must not be
// replaced, into place.
package safefile

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ExistsError is a write refused because the file is there already.
type ExistsError struct{ Path string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("%s exists; choose another path or allow overwriting (--overwrite)", e.Path)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *ExistsError) BadInput() bool { return true }

// Write creates path with what write produces. With overwrite false an
// existing path is left alone and an *ExistsError returned, checked both
// before writing and, atomically, when the file is put in place.
func Write(path string, overwrite bool, write func(io.Writer) error) (err error) {
	if !overwrite {
		if _, err := os.Lstat(path); err == nil {
			return &ExistsError{path}
		}
	}
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err = write(f); err != nil {
		return err
	}
	if err = f.Chmod(0o644); err != nil {
		return err
	}
	if err = f.Sync(); err != nil {
		return err
	}
	if err = f.Close(); err != nil {
		return err
	}
	if overwrite {
		err = os.Rename(tmp, path)
	} else if err = os.Link(tmp, path); err == nil {
		os.Remove(tmp)
	} else if errors.Is(err, os.ErrExist) {
		err = &ExistsError{path}
	}
	if err != nil {
		return err
	}
	if d, err := os.Open(filepath.Dir(path)); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// WriteBytes is Write with a byte slice.
func WriteBytes(path string, overwrite bool, b []byte) error {
	return Write(path, overwrite, func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	})
}
