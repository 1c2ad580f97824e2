package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
)

// doctor --device cpu trains the check's model on the CPU against plain
// host runs and says so in one line; the CUDA lines stay out.
func TestDoctorTrainingCheckOnCPU(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "doctor", "--device", "cpu"}, &out, &errOut); code != 0 {
		t.Fatalf("doctor --device cpu: exit %d: %s\n%s", code, errOut.String(), out.String())
	}
	var line string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "cpu training") {
			line = l
		}
	}
	for _, want := range []string{"cpu training   ok (3 steps", "Conv", "Slice", "ScatterElements", "ReduceMean", "SGD", "tolerance 1e-05"} {
		if !strings.Contains(line, want) {
			t.Errorf("training line %q lacks %q; output:\n%s", line, want, out.String())
		}
	}
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "cpu ") && strings.Contains(l, "not ") {
			t.Errorf("doctor --device cpu reports the CPU as a missing CUDA device: %q", l)
		}
	}
}

// A failed training check is doctor's exit 1, not a refusal of the input.
func TestTrainingCheckFailedIsExit1(t *testing.T) {
	if code := exitCode(trainingCheckFailed{ort.CUDADevice(0)}); code != 1 {
		t.Errorf("exit %d, want 1", code)
	}
}
