package ort

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// CPUVersion is the ONNX Runtime release scripts/setup fetches into the
// project's cache.
const CPUVersion = "1.30.0"

// LibraryEnv names the environment variable that points at the library.
const LibraryEnv = "ORTRAIN_ORT_LIB"

// LibraryError says why ONNX Runtime could not be found or loaded.
type LibraryError struct {
	Path   string   // the library that failed to load, if one was found
	Looked []string // where the search looked, in order
	Err    error
}

func (e *LibraryError) Error() string {
	var b strings.Builder
	if e.Path != "" {
		fmt.Fprintf(&b, "cannot load ONNX Runtime from %s: %v", e.Path, e.Err)
	} else {
		b.WriteString("ONNX Runtime library not found; looked in:")
		for _, l := range e.Looked {
			b.WriteString("\n  - " + l)
		}
	}
	b.WriteString("\nfix: run ./scripts/setup (fetches ONNX Runtime " + CPUVersion +
		" into .cache/ort), or pass --ort-lib PATH, or set " + LibraryEnv + "=PATH")
	return b.String()
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *LibraryError) BadInput() bool { return true }

// LibrarySearch holds the places a caller knows of; FindLibrary adds the
// environment, the project cache and the system path.
type LibrarySearch struct {
	Flag   string // --ort-lib
	Config string // the run config's ort_lib
	Dirs   []string
}

// FindLibrary returns the ONNX Runtime library to load, looking in this order:
// the --ort-lib flag, $ORTRAIN_ORT_LIB, the run config, the project cache
// (.cache/ort/<version>/ in each of s.Dirs, which default to the working
// directory and the directory above the executable's), and finally the
// system library path, which the dynamic loader searches itself. A place the
// user named that holds no file is an error straight away: silently taking
// another library would hide their mistake.
func FindLibrary(s LibrarySearch) (string, error) {
	named := []struct{ what, path string }{
		{"--ort-lib", s.Flag},
		{"$" + LibraryEnv, os.Getenv(LibraryEnv)},
		{"the run config's ort_lib", s.Config},
	}
	var looked []string
	for _, n := range named {
		if n.path == "" {
			looked = append(looked, n.what+" (not set)")
			continue
		}
		if _, err := os.Stat(n.path); err != nil {
			return "", &LibraryError{Looked: append(looked, fmt.Sprintf("%s = %s: %v", n.what, n.path, err))}
		}
		return n.path, nil
	}
	dirs := s.Dirs
	if dirs == nil {
		if wd, err := os.Getwd(); err == nil {
			dirs = append(dirs, wd)
		}
		if exe, err := os.Executable(); err == nil {
			dirs = append(dirs, filepath.Dir(filepath.Dir(exe)))
		}
	}
	for _, d := range dirs {
		p := filepath.Join(d, ".cache", "ort", CPUVersion, "libonnxruntime.so.1")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
		looked = append(looked, "project cache "+p)
	}
	for _, name := range []string{"libonnxruntime.so.1", "libonnxruntime.so"} {
		if systemLibraryLoads(name) {
			return name, nil
		}
		looked = append(looked, "system library path ("+name+")")
	}
	return "", &LibraryError{Looked: looked}
}
