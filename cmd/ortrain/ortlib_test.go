package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/telemetry"
)

func TestWantsCUDACore(t *testing.T) {
	gpus, err := telemetry.Devices()
	auto := err == nil && len(gpus) > 0
	for device, want := range map[string]bool{
		"": false, "cpu": false, "cuda": true, "gpu": true, "cuda:0": true, "cuda:3": true,
		"tpu": false, "cuda:-1": false, "auto": auto,
	} {
		if got := wantsCUDACore(device); got != want {
			t.Errorf("wantsCUDACore(%q) = %v, want %v", device, got, want)
		}
	}
}

// TestDoctorTakesCUDACore: with the CUDA build scripts/setup --cuda
// installs in the project's cache, doctor on a GPU device loads it with no
// flag, lists CUDAExecutionProvider, and either opens the GPU or says why
// not (here, without a GPU: the provider's CUDA libraries do not load),
// exiting 0; doctor on the CPU keeps the CPU release. Each runs in its own
// process: a process holds one ONNX Runtime.
func TestDoctorTakesCUDACore(t *testing.T) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	core := filepath.Join(root, ".cache", "ort-cuda", ort.CUDAVersion, "libonnxruntime.so.1")
	if _, err := os.Stat(core); err != nil {
		t.Skipf("no CUDA build of ONNX Runtime in the project cache (scripts/setup --cuda installs it): %v", err)
	}
	doctor := func(device string) string {
		t.Helper()
		cmd := exec.Command(os.Args[0], "doctor", "--device", device)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), asCLI+"=1", ort.LibraryEnv+"=")
		var out, errOut bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errOut
		if err := cmd.Run(); err != nil {
			t.Fatalf("doctor --device %s: %v\n%s%s", device, err, out.String(), errOut.String())
		}
		return out.String()
	}

	out := doctor("cuda:0")
	for _, want := range []string{"ONNX Runtime   " + ort.CUDAVersion, "library        " + core, "CUDAExecutionProvider", "cpu            ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("doctor --device cuda:0 output lacks %q:\n%s", want, out)
		}
	}
	usable := regexp.MustCompile(`(?m)^cuda:0 +(ok|not usable: .*)$`).FindStringSubmatch(out)
	switch {
	case usable == nil:
		t.Errorf("doctor --device cuda:0 says nothing of cuda:0:\n%s", out)
	case usable[1] != "ok" && !strings.Contains(usable[1], ort.CUDAProviderFile):
		t.Errorf("cuda:0 not usable, but the reason does not name the provider %s: %s", ort.CUDAProviderFile, usable[1])
	}

	out = doctor("cpu")
	if cpu := filepath.Join(root, ".cache", "ort", ort.CPUVersion, "libonnxruntime.so.1"); !strings.Contains(out, "library        "+cpu) {
		t.Errorf("doctor --device cpu does not load the CPU release %s:\n%s", cpu, out)
	}
}
