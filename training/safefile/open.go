package safefile

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
)

// NotFileError is a path given where ortrain reads a file that is not a
// regular file once links are followed: a named pipe, a device, a socket
// or a folder. Reading a pipe or a terminal would block until something
// writes to it, possibly forever, so such paths are refused before any
// read.
type NotFileError struct {
	// Path is the path as given, made absolute.
	Path string
	// Mode is the file's type bits.
	Mode fs.FileMode
}

func (e *NotFileError) Error() string { return e.Path + " " + e.What() }

// What is the error without the path, for callers that name it already.
func (e *NotFileError) What() string {
	return "is " + kind(e.Mode) + ", not a file; give the path of a regular file"
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *NotFileError) BadInput() bool { return true }

// kind names a file type in words.
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m.IsDir():
		return "a folder"
	case m&fs.ModeIrregular != 0:
		return "an irregular file"
	}
	return "not a regular file"
}

// Open opens path for reading if it is a regular file (links followed)
// and refuses anything else with a *NotFileError naming it. The file is
// opened without blocking (O_NONBLOCK where the system has it) and then
// checked, so a path swapped for a pipe between a check and the open
// cannot hang the caller either; on a regular file the flag changes
// nothing.
func Open(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|nonblock, 0)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, &NotFileError{Path: abs(path), Mode: st.Mode()}
	}
	return f, nil
}

// Check refuses path, as Open does, when it exists and is not a regular
// file; a missing path is left for the caller's open to report.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil || st.Mode().IsRegular() {
		return nil
	}
	return &NotFileError{Path: abs(path), Mode: st.Mode()}
}

// ReadFile is os.ReadFile through Open: the whole of a regular file.
func ReadFile(path string) ([]byte, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	b := make([]byte, 0, st.Size()+1)
	for {
		n, err := f.Read(b[len(b):cap(b)])
		b = b[:len(b)+n]
		if err == io.EOF {
			return b, nil
		}
		if err != nil {
			return b, err
		}
		if len(b) == cap(b) {
			b = append(b, 0)[:len(b)]
		}
	}
}

func abs(path string) string {
	if a, err := filepath.Abs(path); err == nil {
		return a
	}
	return path
}
