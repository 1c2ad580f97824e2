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

// CUDAVersion is the ONNX Runtime release scripts/setup --cuda fetches into
// the project's cache (.cache/ort-cuda/<version>/): a core built with the
// CUDA provider and the provider libraries of the same release beside it.
// 1.29, not CPUVersion, because the CUDA 13 provider on npm is 1.29's.
const CUDAVersion = "1.29.0"

// CUDAProviderFile is the CUDA provider library that a core built with CUDA
// loads from its own directory when a session appends the CUDA provider.
const CUDAProviderFile = "libonnxruntime_providers_cuda.so"

// LibraryEnv names the environment variable that points at the library.
const LibraryEnv = "ORTRAIN_ORT_LIB"

// LibraryError says why ONNX Runtime could not be found or loaded.
type LibraryError struct {
	Path   string   // the library that failed to load, if one was found
	Looked []string // where the search looked, in order
	Err    error
	CUDA   bool // the search was for a run on a GPU
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
	if e.CUDA {
		b.WriteString("\nfix: run ./scripts/setup --cuda (fetches ONNX Runtime " + CUDAVersion +
			" built with CUDA into .cache/ort-cuda), or pass --ort-lib PATH, or set " + LibraryEnv + "=PATH")
	} else {
		b.WriteString("\nfix: run ./scripts/setup (fetches ONNX Runtime " + CPUVersion +
			" into .cache/ort), or pass --ort-lib PATH, or set " + LibraryEnv + "=PATH")
	}
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
	// CUDA asks for the core scripts/setup --cuda installs
	// (.cache/ort-cuda/CUDAVersion/) ahead of the CPU one in the project
	// cache: the run is to go on a GPU.
	CUDA bool
}

// FindLibrary returns the ONNX Runtime library to load, looking in this order:
// the --ort-lib flag, $ORTRAIN_ORT_LIB, the run config, the project cache
// (in each of s.Dirs, which default to the working directory and the
// directory above the executable's: .cache/ort-cuda/<CUDAVersion>/ when
// s.CUDA, then .cache/ort/<CPUVersion>/), and finally the system library
// path, which the dynamic loader searches itself. A CPU run keeps the CPU
// release even where the CUDA one is installed: it is the newer one. A place the
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
			return "", &LibraryError{Looked: append(looked, fmt.Sprintf("%s = %s: %v", n.what, n.path, err)), CUDA: s.CUDA}
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
	caches := []string{filepath.Join("ort", CPUVersion)}
	if s.CUDA {
		caches = append([]string{filepath.Join("ort-cuda", CUDAVersion)}, caches...)
	}
	for _, c := range caches {
		for _, d := range dirs {
			p := filepath.Join(d, ".cache", c, "libonnxruntime.so.1")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
			looked = append(looked, "project cache "+p)
		}
	}
	for _, name := range []string{"libonnxruntime.so.1", "libonnxruntime.so"} {
		if systemLibraryLoads(name) {
			return name, nil
		}
		looked = append(looked, "system library path ("+name+")")
	}
	return "", &LibraryError{Looked: looked, CUDA: s.CUDA}
}

// CUDAProviderBeside returns the CUDA provider library in the loaded
// core's directory, "" when there is none. A core that lists
// CUDAExecutionProvider loads it from there; beside a core that does not
// (a CPU-only build), it could only be registered as a plugin, which
// ortrain does not do: that route crashed in training graphs on a GPU.
func CUDAProviderBeside() string {
	lib := LibraryPath()
	if !strings.ContainsRune(lib, '/') {
		return "" // found by the loader on the system path: no directory known
	}
	path := filepath.Join(filepath.Dir(lib), CUDAProviderFile)
	if _, err := os.Stat(path); err != nil {
		return ""
	}
	return path
}
