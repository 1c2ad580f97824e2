package main

import (
	"bytes"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
)

// TestExitCodes checks the contract scripts rely on: 0 done, 1 failed, 2 bad
// usage or bad input.
func TestExitCodes(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "libonnxruntime.so.1")
	cases := []struct {
		name string
		args []string
		code int
		say  string // on stderr
	}{
		{"library missing", []string{"--ort-lib", missing, "doctor"}, 2, "ONNX Runtime library not found"},
		{"unknown flag", []string{"--no-such-flag"}, 2, "no-such-flag"},
		{"unknown command", []string{"bogus"}, 2, "bogus"},
		{"unknown help topic", []string{"help", "bogus"}, 2, "bogus"},
		{"unknown subcommand", []string{"artifacts", "bogus"}, 2, "bogus"},
		{"bad device", []string{"doctor", "--device", "tpu"}, 2, "bad value tpu for device"},
		{"export without --out", []string{"export", "--recipe", "resnet"}, 2, "out"},
		{"doctor", []string{"doctor", "--device", "cuda:0"}, 0, ""},
		{"import of a folder without artifacts", []string{"artifacts", "import", "--ort", filepath.Dir(missing), "--out", filepath.Join(filepath.Dir(missing), "out")}, 2, "not generate_artifacts output"},
		{"a --set holding commas is one value", []string{"plan", "--preset", "quickstart", "--set", "optimizer.betas=[0.9,0.95]", "--set", "trainer.max_stpes=1"}, 2, "trainer.max_stpes"},
		{"an unknown auto-augment policy", []string{"plan", "--preset", "resnet50-a10g-balanced", "--set", "data.train=/x", "--set", "data.images.auto_augment=autoaugment"}, 2, "data.images.auto_augment"},
		{"a RandAugment magnitude above 30", []string{"plan", "--preset", "resnet50-a10g-balanced", "--set", "data.train=/x", "--set", "data.images.auto_augment=randaugment", "--set", "data.images.randaugment_m=31"}, 2, "data.images.randaugment_m"},
		{"auto-augmenting volumes", []string{"plan", "--preset", "quickstart", "--set", "data.images.auto_augment=trivialaugment"}, 2, "data.images.auto_augment"},
		{"a RandAugment magnitude for volumes", []string{"plan", "--preset", "quickstart", "--set", "data.images.randaugment_m=3"}, 2, "data.images.randaugment_m"},
		{"a required flag missing", []string{"artifacts", "build", "--out", filepath.Dir(missing)}, 2, `Required flag "model"`},
		{"eval without inputs", []string{"eval"}, 2, "needs --checkpoint, or --input and --reference"},
		{"bench of an unknown case", []string{"bench", "--case", "mlp"}, 2, `unknown case "mlp"`},
		{"memory at batch 0", []string{"artifacts", "inspect", "--memory", "--batch", "0", filepath.Dir(missing)}, 2, "--batch must be >= 1"},
		{"eval of a missing volume", []string{"eval", "--input", missing, "--reference", missing}, 2, missing},
	}
	// An unknown flag is bad usage on every command and subcommand.
	var walk func(prefix []string, cmds []*cli.Command)
	walk = func(prefix []string, cmds []*cli.Command) {
		for _, c := range cmds {
			args := append(slices.Clone(prefix), c.Name)
			cases = append(cases, struct {
				name string
				args []string
				code int
				say  string
			}{"unknown flag of " + strings.Join(args, " "), append(args, "--no-such-flag"), 2, "no-such-flag"})
			walk(args, c.Subcommands)
		}
	}
	walk(nil, commands())
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			code := run(append([]string{"ortrain"}, c.args...), &out, &errOut)
			if code != c.code || !strings.Contains(errOut.String(), c.say) {
				t.Errorf("ortrain %v: exit %d, stderr %q; want exit %d saying %q", c.args, code, errOut.String(), c.code, c.say)
			}
		})
	}
}

func TestDoctorReportsCPU(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "doctor"}, &out, &errOut); code != 0 {
		t.Fatalf("doctor exit %d: %s", code, errOut.String())
	}
	for _, want := range []string{"ONNX Runtime   " + ort.Version(), "CPUExecutionProvider", "cpu            ok"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("doctor output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestFlagsAfterArguments: flags may follow a command's positional
// arguments, as the usage lines show them (`report RUN --out F`); flag
// values and "--" are kept in place.
func TestFlagsAfterArguments(t *testing.T) {
	app := newApp(io.Discard, io.Discard)
	for _, tc := range []struct{ in, want []string }{
		{[]string{"ortrain", "report", "RUN", "--out", "F", "--overwrite"}, []string{"ortrain", "report", "--out", "F", "--overwrite", "RUN"}},
		{[]string{"ortrain", "report", "--out", "F", "RUN"}, []string{"ortrain", "report", "--out", "F", "RUN"}},
		{[]string{"ortrain", "artifacts", "inspect", "DIR", "--memory", "--batch", "4"}, []string{"ortrain", "artifacts", "inspect", "--memory", "--batch", "4", "DIR"}},
		{[]string{"ortrain", "--ort-lib", "L", "report", "RUN", "--out=F"}, []string{"ortrain", "--ort-lib", "L", "report", "--out=F", "RUN"}},
		{[]string{"ortrain", "report", "RUN", "--", "--odd-name"}, []string{"ortrain", "report", "RUN", "--", "--odd-name"}},
	} {
		if got := flagsFirst(app, tc.in); !slices.Equal(got, tc.want) {
			t.Errorf("flagsFirst(%v) = %v, want %v", tc.in, got, tc.want)
		}
	}
}

// TestPanicExitsAsBug: a panic in a command (a bug) exits 3 with "bug" and
// the stack, never 2, which scripts read as bad input.
func TestPanicExitsAsBug(t *testing.T) {
	testCommands = []*cli.Command{{Name: "crash", Action: func(*cli.Context) error {
		var m map[string]int
		m["x"]++ // a nil-map write: a runtime panic, as a bug would be
		return nil
	}}}
	defer func() { testCommands = nil }()
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "crash"}, &out, &errOut); code != exitBug || code == 2 || !strings.Contains(errOut.String(), "bug") ||
		!strings.Contains(errOut.String(), "goroutine") {
		t.Errorf("a panicking command: exit %d, %q; want %d, saying bug, with the stack", code, errOut.String(), exitBug)
	}
}
