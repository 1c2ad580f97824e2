package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
)

// asCLI makes the test binary run as the ortrain command: `ortrain bench`
// starts `ortrain train` as its own executable, which in a test is this
// binary.
const asCLI = "ORTRAIN_TEST_AS_CLI"

func TestMain(m *testing.M) {
	if os.Getenv(asCLI) == "1" {
		os.Exit(run(os.Args, os.Stdout, os.Stderr))
	}
	// Every test, and every ortrain it starts, binds inputs as the CUDA
	// provider does (ort.SetBindTimeCopy): what only a GPU would show
	// fails here too.
	os.Setenv("ORTRAIN_BIND_TIME_COPY", "1")
	ort.SetBindTimeCopy(true)
	os.Exit(m.Run())
}

// TestBenchSpeed runs the speed benchmark at its small size as CI can
// afford (the VQ-GAN case at batch 1, one warm-up and two measured steps)
// and, where Debian's PyTorch is installed, its twins (eager, autocast —
// which PyTorch 1.13 cannot run for this model on the CPU — and
// torch.compile, which it lacks; those rows say so). It checks the
// table's figures are measured, not their values: a benchmark, not a
// timed assertion. With --profile it also prints where the steps go.
func TestBenchSpeed(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	t.Setenv(asCLI, "1")
	const python = "/usr/bin/python3"
	torch := exec.Command(python, "-c", "import torch, torchvision").Run() == nil
	args := []string{"ortrain", "bench", "--case", "vqgan3d", "--batch", "1", "--warmup", "1", "--steps", "2", "--profile"}
	if torch {
		args = append(args, "--torch", "--python", python, "--twins", filepath.Join("..", "..", "models", "pytorch"), "--mode", "eager", "--mode", "amp", "--mode", "compile")
	}
	var out, errOut bytes.Buffer
	if code := run(args, &out, &errOut); code != 0 {
		t.Fatalf("bench: exit %d\n%s", code, errOut.String())
	}
	rows := map[string][]string{}
	for _, line := range strings.Split(out.String(), "\n") {
		f := strings.Fields(line)
		if len(f) > 3 && f[0] == "vqgan3d" {
			rows[f[1]+" "+f[2]] = f[3:]
		}
	}
	number := func(row []string, i int) float64 {
		t.Helper()
		v, err := strconv.ParseFloat(row[i], 64)
		if err != nil {
			t.Fatalf("column %d of %v: %v\n%s", i, row, err, out.String())
		}
		return v
	}
	o, ok := rows["ortrain cpu"]
	if !ok || len(o) != 9 {
		t.Fatalf("no ortrain row of 9 figures:\n%s", out.String())
	}
	// precision batch samples/s tokens/s step-ms host-ms wait% peak-MB RSS-MB
	sps, step, host, peak := number(o, 2), number(o, 4), number(o, 5), number(o, 7)
	if o[1] != "1" || sps <= 0 || step <= 0 || host < 0 || host >= step || peak <= 0 {
		t.Errorf("ortrain row %v: want batch 1, positive throughput, step time and peak, host time within the step\n%s", o, out.String())
	}
	if d := sps*step/1e3 - 1; d > 0.02 || d < -0.02 { // samples/s is printed to 2 decimals
		t.Errorf("samples/s %v and step %v ms disagree for batch 1", sps, step)
	}
	// --profile: where the measured steps go, by op, from a second run.
	head := regexp.MustCompile(`where a vqgan3d step goes \(ortrain on cpu, 32; .*\): ([0-9.]+) ms of kernel time in ([0-9]+) nodes`).FindStringSubmatch(out.String())
	if head == nil || number(head, 1) <= 0 || number(head, 2) <= 0 || !regexp.MustCompile(`(?m)^Conv +CPU +[0-9.]+ +[0-9.]+ +[0-9.]+%$`).MatchString(out.String()) {
		t.Errorf("--profile: want a table of the step's kernel time by op, Conv among them:\n%s", out.String())
	}
	if !torch {
		t.Log("PyTorch not installed: twins not run")
		return
	}
	e, ok := rows["torch eager"]
	if !ok || len(e) != 10 || number(e, 2) <= 0 || number(e, 9) <= 0 {
		t.Errorf("eager twin row %v: want throughput and a ratio\n%s", e, out.String())
	}
	// Debian's PyTorch 1.13 has no torch.compile, and no bfloat16
	// GroupNorm on the CPU: those rows say why instead of ending the bench.
	for _, mode := range []string{"amp", "compile"} {
		if c, ok := rows["torch "+mode]; !ok || (c[0] != "not" && len(c) != 10) {
			t.Errorf("%s twin row %v: want a measurement or why not\n%s", mode, c, out.String())
		}
	}
}

// TestBenchSets: bench --set overrides the configuration of ortrain's
// runs, as train's --set does; a value the run refuses is bad input
// (exit 2), as is --set with --memory.
func TestBenchSets(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	t.Setenv(asCLI, "1")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--set", "model.conv_grad=im2col"}, `"im2col" is not one of`},
		{[]string{"--set", "model.no_such_key=1"}, "unknown key"},
		{[]string{"--set", "model.conv_grad=ops", "--memory"}, "--set is for speed runs"},
	} {
		var out, errOut bytes.Buffer
		args := append([]string{"ortrain", "bench", "--case", "resnet50", "--warmup", "0", "--steps", "1"}, c.args...)
		if code := run(args, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), c.want) {
			t.Errorf("%v: exit %d, want 2 saying %q:\n%s", c.args, code, c.want, errOut.String())
		}
	}
}
