// Package orttest loads ONNX Runtime for tests: the library scripts/setup put
// in the project's cache (with $ORTRAIN_TEST_DEVICE a GPU, the CUDA build of
// scripts/setup --cuda), or the one $ORTRAIN_ORT_LIB names.
package orttest

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
)

// Init loads ONNX Runtime once per test binary, failing the test with the
// library search's own explanation when it is missing.
func Init(tb testing.TB) {
	tb.Helper()
	if ort.Initialised() {
		return
	}
	// Tests on a GPU take the CUDA build scripts/setup --cuda installs, as
	// a run on a GPU does, when $ORTRAIN_ORT_LIB names none.
	path, err := ort.FindLibrary(ort.LibrarySearch{Dirs: []string{moduleRoot()}, CUDA: Device(tb).CUDA})
	if err == nil {
		err = ort.Init(path)
	}
	if err != nil {
		tb.Fatal(err)
	}
}

// Device returns the device tests run on: $ORTRAIN_TEST_DEVICE ("cuda:0" on
// a GPU machine), the CPU otherwise.
func Device(tb testing.TB) ort.Device {
	s := os.Getenv("ORTRAIN_TEST_DEVICE")
	if s == "" {
		return ort.CPU
	}
	d, err := ort.ParseDevice(s)
	if err != nil {
		tb.Fatal(err)
	}
	return d
}

// Model is a graph RunFloat32 can run: what marshals to an ONNX model.
type Model interface {
	Marshal() ([]byte, error)
}

// RunFloat32 runs m once on ONNX Runtime's CPU provider and returns the
// named float32 outputs as Go slices, failing the test on any error.
func RunFloat32(tb testing.TB, m Model, feed map[string]*ort.Value, outputs ...string) [][]float32 {
	tb.Helper()
	model, err := m.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ort.NewSessionFromBytes(model, ort.Options{})
	if err != nil {
		tb.Fatal(err)
	}
	defer s.Close()
	outs, err := s.Run(feed, outputs...)
	if err != nil {
		tb.Fatal(err)
	}
	vals := make([][]float32, len(outs))
	for i, o := range outs {
		vals[i] = slices.Clone(ort.Data[float32](o))
		o.Close()
	}
	return vals
}

func moduleRoot() string {
	dir, err := os.Getwd()
	if err != nil {
		return "."
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d
		}
		if filepath.Dir(d) == d {
			return dir
		}
	}
}
