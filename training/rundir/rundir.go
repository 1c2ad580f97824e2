// Package rundir creates and reopens run directories laid out as
// Lightning's: <output_dir>/<name>/version_N/ holding config.toml,
// metrics.csv, TensorBoard event files and checkpoints/. A new run takes
// the next free version; a resumed run appends to its own. Nothing already
// in a run directory is overwritten, and a lock keeps two trainers out of
// the same directory.
package rundir

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Names inside a run directory.
const (
	ConfigFile     = "config.toml"
	MetricsFile    = "metrics.csv"
	CheckpointsDir = "checkpoints"
	lockFile       = ".lock"
)

// Dir is an open run directory; Close releases its lock.
type Dir struct {
	Path    string
	Version int  // N of version_N, -1 when the directory is not named so
	Resumed bool // opened by Resume
	lock    *os.File
}

// Error is a run-directory problem the user has to fix.
type Error struct{ Path, Msg string }

// Error names the directory and the problem.
func (e *Error) Error() string { return "run directory " + e.Path + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *Error) BadInput() bool { return true }

// FlagError is a checkpoint flag that cannot be resolved as given.
type FlagError struct{ Flag, Msg string }

func (e *FlagError) Error() string { return e.Flag + ": " + e.Msg }

// BadInput marks the error as the user's to fix (exit code 2).
func (e *FlagError) BadInput() bool { return true }

// New creates <outputDir>/<name>/version_N with the lowest N above every
// existing version. os.Mkdir fails on an existing name, so two runs
// started at once never share a version.
func New(outputDir, name string) (*Dir, error) {
	if name == "" || strings.ContainsAny(name, `/\`) || name == "." || name == ".." {
		return nil, &Error{Path: filepath.Join(outputDir, name), Msg: fmt.Sprintf("run name %q must be a non-empty name without slashes", name)}
	}
	parent := filepath.Join(outputDir, name)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return nil, err
	}
	des, err := os.ReadDir(parent)
	if err != nil {
		return nil, err
	}
	next := 0
	for _, de := range des {
		if v, ok := versionOf(de.Name()); ok && v >= next {
			next = v + 1
		}
	}
	for ; ; next++ {
		p := filepath.Join(parent, "version_"+strconv.Itoa(next))
		err := os.Mkdir(p, 0o755)
		if errors.Is(err, os.ErrExist) {
			continue // another run took it meanwhile
		}
		if err != nil {
			return nil, err
		}
		return open(p, next, false)
	}
}

// At creates the run directory path itself (a --run-dir the user named).
// An existing non-empty directory is refused unless overwrite is true, in
// which case its contents are removed first.
func At(path string, overwrite bool) (*Dir, error) {
	des, err := os.ReadDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, err
		}
	case err != nil:
		return nil, err
	case len(des) > 0 && !overwrite:
		return nil, &Error{Path: path, Msg: "exists and is not empty; resume it, choose another, or overwrite it explicitly"}
	case len(des) > 0:
		d, err := open(path, -1, false)
		if err != nil {
			return nil, err
		}
		for _, de := range des {
			if de.Name() == lockFile {
				continue
			}
			if err := os.RemoveAll(filepath.Join(path, de.Name())); err != nil {
				d.Close()
				return nil, err
			}
		}
		return d, nil
	}
	v, ok := versionOf(filepath.Base(path))
	if !ok {
		v = -1
	}
	return open(path, v, false)
}

// Resume reopens an existing run directory to append to it.
func Resume(path string) (*Dir, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, &Error{Path: path, Msg: "cannot resume: " + err.Error()}
	}
	if !st.IsDir() {
		return nil, &Error{Path: path, Msg: "cannot resume: not a directory"}
	}
	v, ok := versionOf(filepath.Base(path))
	if !ok {
		v = -1
	}
	return open(path, v, true)
}

func versionOf(name string) (int, bool) {
	s, ok := strings.CutPrefix(name, "version_")
	if !ok {
		return 0, false
	}
	v, err := strconv.Atoi(s)
	return v, err == nil && v >= 0
}

// open takes the directory's lock, so a second trainer on the same run
// fails at once instead of interleaving checkpoints.
func open(path string, version int, resumed bool) (*Dir, error) {
	f, err := os.OpenFile(filepath.Join(path, lockFile), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		return nil, &Error{Path: path, Msg: "in use by another ortrain process"}
	}
	f.Truncate(0)
	fmt.Fprintf(f, "%d\n", os.Getpid())
	return &Dir{Path: path, Version: version, Resumed: resumed, lock: f}, nil
}

// Checkpoints is the directory for checkpoint.Manager.
func (d *Dir) Checkpoints() string { return filepath.Join(d.Path, CheckpointsDir) }

// File returns the path of name inside the run directory.
func (d *Dir) File(name string) string { return filepath.Join(d.Path, name) }

// WriteConfig saves the resolved configuration as config.toml. When the
// file exists (a resumed run) and differs, the original is kept and the new
// one is written as config.resume-K.toml; the returned path says where it
// went ("" when the existing file is identical).
func (d *Dir) WriteConfig(data []byte) (string, error) {
	p := d.File(ConfigFile)
	old, err := os.ReadFile(p)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return p, writeNew(p, data)
	case err != nil:
		return "", err
	case bytes.Equal(old, data):
		return "", nil
	}
	for k := 1; ; k++ {
		p = d.File(fmt.Sprintf("config.resume-%d.toml", k))
		err := writeNew(p, data)
		if errors.Is(err, os.ErrExist) {
			continue
		}
		return p, err
	}
}

// writeNew writes a file that must not exist yet, through a temporary name
// and a link, so a reader never sees it half written.
func writeNew(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	f, err := os.Open(tmp)
	if err == nil {
		err = f.Sync()
		f.Close()
	}
	if err == nil {
		err = os.Link(tmp, path) // fails with ErrExist rather than replacing
	}
	os.Remove(tmp)
	return err
}

// Close releases the lock.
func (d *Dir) Close() error {
	if d.lock == nil {
		return nil
	}
	err := d.lock.Close()
	d.lock = nil
	return err
}
