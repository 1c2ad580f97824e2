package ort_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
)

// TestFindLibraryCUDACache: a run on a GPU takes the core scripts/setup
// --cuda puts in .cache/ort-cuda/<CUDAVersion>/ ahead of the CPU release; a
// CPU run keeps the CPU release where both are installed; a named library
// wins over both; a GPU run finding neither says to run setup --cuda.
func TestFindLibraryCUDACache(t *testing.T) {
	t.Setenv(ort.LibraryEnv, "")
	root := t.TempDir()
	place := func(dir ...string) string {
		d := filepath.Join(append([]string{root, ".cache"}, dir...)...)
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(d, "libonnxruntime.so.1")
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	find := func(s ort.LibrarySearch) string {
		t.Helper()
		s.Dirs = []string{root}
		p, err := ort.FindLibrary(s)
		if err != nil {
			t.Fatalf("%+v: %v", s, err)
		}
		return p
	}

	cpu := place("ort", ort.CPUVersion)
	if p := find(ort.LibrarySearch{CUDA: true}); p != cpu {
		t.Errorf("GPU run, only the CPU release installed: got %s, want %s", p, cpu)
	}
	cuda := place("ort-cuda", ort.CUDAVersion)
	if p := find(ort.LibrarySearch{CUDA: true}); p != cuda {
		t.Errorf("GPU run: got %s, want the CUDA build %s", p, cuda)
	}
	if p := find(ort.LibrarySearch{}); p != cpu {
		t.Errorf("CPU run: got %s, want the CPU release %s", p, cpu)
	}
	named := filepath.Join(root, "mine.so")
	if err := os.WriteFile(named, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if p := find(ort.LibrarySearch{Flag: named, CUDA: true}); p != named {
		t.Errorf("GPU run with --ort-lib: got %s, want %s", p, named)
	}
	t.Setenv(ort.LibraryEnv, named)
	if p := find(ort.LibrarySearch{CUDA: true}); p != named {
		t.Errorf("GPU run with $%s: got %s, want %s", ort.LibraryEnv, p, named)
	}

	// Neither installed: the error lists the CUDA cache first and says how
	// to fill it (unless this machine's loader finds a system library).
	t.Setenv(ort.LibraryEnv, "")
	empty := t.TempDir()
	p, err := ort.FindLibrary(ort.LibrarySearch{Dirs: []string{empty}, CUDA: true})
	if err == nil {
		if !strings.HasPrefix(p, "libonnxruntime.so") {
			t.Fatalf("found %s in an empty project directory", p)
		}
		return
	}
	var le *ort.LibraryError
	msg := err.Error()
	cudaAt := strings.Index(msg, filepath.Join(empty, ".cache", "ort-cuda", ort.CUDAVersion))
	cpuAt := strings.Index(msg, filepath.Join(empty, ".cache", "ort", ort.CPUVersion))
	if !errors.As(err, &le) || !le.BadInput() || cudaAt < 0 || cpuAt < cudaAt || !strings.Contains(msg, "scripts/setup --cuda") {
		t.Errorf("GPU run, nothing installed: %v\nwant a bad-input LibraryError listing .cache/ort-cuda before .cache/ort and naming scripts/setup --cuda", err)
	}
}
