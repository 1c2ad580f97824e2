package ort

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCUDAPluginRegistration: the plugin route reaches ONNX Runtime's
// RegisterExecutionProviderLibrary, and a provider library that does not
// load is an error naming it (what a machine without the CUDA runtime
// gets). The route's GPU half has not run on a GPU.
func TestCUDAPluginRegistration(t *testing.T) {
	lib := os.Getenv(LibraryEnv)
	if lib == "" {
		lib = filepath.Join("..", ".cache", "ort", "1.30.0", "libonnxruntime.so.1")
	}
	if err := Init(lib); err != nil {
		t.Skipf("ONNX Runtime not available: %v", err)
	}
	if p := CUDAPlugin(); p != "" {
		t.Skipf("a CUDA provider plugin is installed beside the library (%s); this test registers a bogus one", p)
	}
	bogus := filepath.Join(t.TempDir(), CUDAPluginFile)
	if err := os.WriteFile(bogus, []byte("not a shared library"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := registerCUDAPlugin(bogus)
	if err == nil || !strings.Contains(err.Error(), bogus) || !strings.Contains(err.Error(), "registering the CUDA provider plugin") {
		t.Errorf("registering %s: %v, want an error naming it", bogus, err)
	}
}
