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
	"maps"
	"os"
	"path/filepath"
	"slices"
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
	// Recovered says what Recover did on opening ("" for nothing): an
	// interrupted overwrite's previous run put back.
	Recovered string
	lock      *os.File
	// created: made by New or At (Discard removes it); replaced: where
	// At moved an overwritten directory's contents (see Commit).
	created  bool
	replaced string
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
		return nil, createError(parent, err, "set output_dir to a folder you can write")
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
			return nil, createError(p, err, "set output_dir to a folder you can write")
		}
		d, err := open(p, next, false)
		if err != nil {
			return nil, err
		}
		d.created = true
		return d, nil
	}
}

// At creates the run directory path itself (a --run-dir the user named).
// An existing directory that holds anything is refused unless overwrite is
// true. Overwriting is refused too for a directory that does not hold an
// ortrain run (config.toml, metrics.csv or checkpoints/), and for one
// inside which an input of the run lies (inputs maps a configuration key
// or flag to a path the run reads: data.train, data.val, --config ...).
// An overwritten directory's contents are not deleted yet: they are moved
// aside into a hidden folder inside it, so the new run is set up in an
// empty directory; Commit deletes them once the run's setup succeeded,
// Discard puts them back when it failed.
func At(path string, overwrite bool, inputs map[string]string) (*Dir, error) {
	recovered, err := Recover(path)
	if err != nil {
		return nil, err
	}
	des, err := readDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
		if err := os.MkdirAll(path, 0o755); err != nil {
			return nil, createError(path, err, "give a --run-dir you can write")
		}
		d, err := open(path, versionNumber(path), false)
		if err != nil {
			os.Remove(path)
			return nil, err
		}
		d.created = true
		return d, nil
	case errors.Is(err, syscall.ENOTDIR):
		if st, serr := os.Stat(path); serr == nil && !st.IsDir() {
			return nil, &Error{Path: path, Msg: "is a file, not a directory; name a directory for the run"}
		}
		return nil, createError(path, err, "give a --run-dir you can write")
	case err != nil:
		return nil, err
	case len(des) > 0 && !overwrite:
		return nil, &Error{Path: path, Msg: "exists and is not empty; resume it (--resume " + path + "), choose another, or replace it with --overwrite"}
	case len(des) > 0:
		if err := checkOverwrite(path, des, inputs); err != nil {
			return nil, err
		}
	}
	d, err := open(path, versionNumber(path), false)
	if err != nil {
		return nil, err
	}
	if des, err = readDir(path); err != nil { // again, under the lock
		d.Close()
		return nil, err
	}
	if len(des) > 0 {
		if err := d.moveAside(des); err != nil {
			d.Close()
			return nil, err
		}
	}
	d.Recovered = recovered
	return d, nil
}

// replacedPrefix names the hidden folder inside an overwritten run
// directory that holds its previous contents until the new run's setup
// succeeded (a process killed meanwhile leaves them there).
const replacedPrefix = ".ortrain-replaced-"

// readDir lists a directory without its lock file, which a run that never
// got past its lock leaves behind.
func readDir(path string) ([]os.DirEntry, error) {
	des, err := os.ReadDir(path)
	return slices.DeleteFunc(des, func(de os.DirEntry) bool { return de.Name() == lockFile }), err
}

// checkOverwrite refuses to overwrite a directory that is not an ortrain
// run, or that holds an input of the run.
func checkOverwrite(path string, des []os.DirEntry, inputs map[string]string) error {
	if !slices.ContainsFunc(des, func(de os.DirEntry) bool {
		n := de.Name()
		return n == ConfigFile || n == MetricsFile || n == CheckpointsDir || strings.HasPrefix(n, replacedPrefix)
	}) {
		names := make([]string, 0, 3)
		for _, de := range des[:min(3, len(des))] {
			names = append(names, de.Name())
		}
		more := ""
		if len(des) > 3 {
			more = fmt.Sprintf(", ... %d more", len(des)-3)
		}
		return &Error{Path: path, Msg: fmt.Sprintf("holds %s%s but no ortrain run (no %s, %s or %s/): --overwrite replaces runs only; choose an empty or new directory",
			strings.Join(names, ", "), more, ConfigFile, MetricsFile, CheckpointsDir)}
	}
	keys := slices.Sorted(maps.Keys(inputs))
	for _, k := range keys {
		if in := inputs[k]; in != "" && within(in, path) {
			return &Error{Path: path, Msg: fmt.Sprintf("holds %s (%s), which --overwrite would delete; move it out, or choose another run directory", k, in)}
		}
	}
	return nil
}

// within reports whether path is dir or lies inside it, links resolved.
func within(path, dir string) bool {
	resolve := func(p string) string {
		if r, err := filepath.EvalSymlinks(p); err == nil {
			p = r
		}
		if a, err := filepath.Abs(p); err == nil {
			p = a
		}
		return p
	}
	rel, err := filepath.Rel(resolve(dir), resolve(path))
	return err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator))
}

// moveAside moves des, the directory's contents, into a new hidden folder
// inside it; on an error what moved is moved back.
func (d *Dir) moveAside(des []os.DirEntry) error {
	aside := filepath.Join(d.Path, replacedPrefix+strconv.Itoa(os.Getpid()))
	for k := 2; ; k++ {
		err := os.Mkdir(aside, 0o755)
		if err == nil {
			break
		}
		if !errors.Is(err, os.ErrExist) {
			return err
		}
		aside = filepath.Join(d.Path, fmt.Sprintf("%s%d-%d", replacedPrefix, os.Getpid(), k))
	}
	d.replaced = aside
	for _, de := range des {
		if err := os.Rename(filepath.Join(d.Path, de.Name()), filepath.Join(aside, de.Name())); err != nil {
			if rerr := d.putBack(); rerr != nil {
				return fmt.Errorf("%w; %w", err, rerr)
			}
			return err
		}
	}
	return syncDir(d.Path)
}

// discardedPrefix names the hidden folder Commit renames the replaced
// contents to before deleting them: a process killed while deleting leaves
// a folder Recover removes, never one it would put back over the new run.
const discardedPrefix = ".ortrain-discarded-"

// Commit deletes what an overwritten directory held before (see At): the
// new run is under way. The old contents are first renamed (one atomic
// step that decides the overwrite), then deleted.
func (d *Dir) Commit() error {
	if d.replaced == "" {
		return nil
	}
	gone := filepath.Join(d.Path, discardedPrefix+strings.TrimPrefix(filepath.Base(d.replaced), replacedPrefix))
	if err := os.Rename(d.replaced, gone); err != nil {
		return err
	}
	d.replaced = ""
	if err := syncDir(d.Path); err != nil {
		return err
	}
	return os.RemoveAll(gone)
}

// Overwriting reports whether the directory's previous run is still kept
// aside: an overwrite neither committed nor discarded yet.
func (d *Dir) Overwriting() bool { return d.replaced != "" }

// Recover finishes an overwrite of the run directory path that a process
// killed before it committed or discarded it left behind (SIGKILL, a
// crash, a panic outside the main goroutine): the new run's partial
// contents are deleted and the previous run, kept in a hidden folder
// inside path, is put back; a commit's leftover is deleted. It says what
// it did ("" for nothing to do, or when another process holds the
// directory: its own overwrite is under way). Resume and At call it.
func Recover(path string) (string, error) {
	des, err := os.ReadDir(path)
	if err != nil || !slices.ContainsFunc(des, isLeftover) {
		return "", nil // nothing of an overwrite here (or no directory: the caller says)
	}
	d, err := open(path, versionNumber(path), false)
	if err != nil {
		var re *Error
		if errors.As(err, &re) && strings.HasPrefix(re.Msg, "in use") {
			return "", nil
		}
		return "", err
	}
	defer d.Close()
	if des, err = readDir(path); err != nil { // again, under the lock
		return "", err
	}
	var aside []string
	for _, de := range des {
		switch n := de.Name(); {
		case strings.HasPrefix(n, discardedPrefix):
			if err := os.RemoveAll(filepath.Join(path, n)); err != nil {
				return "", err
			}
		case strings.HasPrefix(n, replacedPrefix):
			aside = append(aside, n)
		}
	}
	switch len(aside) {
	case 0:
		return "", nil
	case 1:
	default:
		return "", &Error{Path: path, Msg: fmt.Sprintf("holds %d runs kept aside by interrupted overwrites (%s): move the one to keep back into %s by hand", len(aside), strings.Join(aside, ", "), path)}
	}
	d.replaced = filepath.Join(path, aside[0])
	if _, err := d.Discard(); err != nil {
		return "", err
	}
	return "an earlier --overwrite of " + path + " was cut off before its new run took a step: its previous run is put back", nil
}

// isLeftover reports whether de is a folder an unfinished overwrite left.
func isLeftover(de os.DirEntry) bool {
	return strings.HasPrefix(de.Name(), replacedPrefix) || strings.HasPrefix(de.Name(), discardedPrefix)
}

// Discard undoes a run's setup that failed: a directory that At or New
// created is removed; an existing one At opened is emptied of what this
// run wrote into it, and what an overwrite moved aside is put back. A
// resumed run's directory is left alone. It says what it did ("" for
// nothing).
func (d *Dir) Discard() (string, error) {
	switch {
	case d.Resumed:
		return "", nil
	case d.created:
		return "removed " + d.Path, os.RemoveAll(d.Path)
	}
	des, err := os.ReadDir(d.Path)
	if err != nil {
		return "", err
	}
	var errs []error
	for _, de := range des {
		if p := filepath.Join(d.Path, de.Name()); p != d.replaced && de.Name() != lockFile {
			errs = append(errs, os.RemoveAll(p))
		}
	}
	if d.replaced == "" {
		return "emptied " + d.Path + " again", errors.Join(errs...)
	}
	if err := errors.Join(errs...); err != nil {
		return "", fmt.Errorf("%w; the previous contents of %s are kept in %s", err, d.Path, d.replaced)
	}
	if err := d.putBack(); err != nil {
		return "", err
	}
	return "kept " + d.Path + " as it was", nil
}

// putBack moves what moveAside set aside back into the directory.
func (d *Dir) putBack() error {
	old, err := os.ReadDir(d.replaced)
	if err != nil {
		return err
	}
	var errs []error
	for _, de := range old {
		if err := os.Rename(filepath.Join(d.replaced, de.Name()), filepath.Join(d.Path, de.Name())); err != nil {
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w; the previous contents of %s are kept in %s", err, d.Path, d.replaced)
	}
	if err := os.Remove(d.replaced); err != nil {
		return err
	}
	d.replaced = ""
	return syncDir(d.Path)
}

// createError is an output directory that cannot be made where the user
// pointed it (a read-only mount, no permission): theirs to fix.
func createError(path string, err error, hint string) error {
	if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) || errors.Is(err, syscall.ENOTDIR) {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return &Error{Path: path, Msg: "cannot be created: " + err.Error() + "; " + hint}
	}
	return err
}

func syncDir(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return f.Sync()
}

func versionNumber(path string) int {
	v, ok := versionOf(filepath.Base(path))
	if !ok {
		return -1
	}
	return v
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
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EROFS) {
			msg := "cannot be written: " + errors.Unwrap(err).Error()
			if resumed {
				msg += "; to continue a run stored read-only, copy it to a folder you can write and resume the copy"
			}
			return nil, &Error{Path: path, Msg: msg}
		}
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
