package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/data/synthetic"
)

// TestPlanEveryPreset: `ortrain plan --preset NAME` exits 0 on every
// embedded preset without data and without ONNX Runtime, prints the
// table, and --json gives the same plan as JSON.
func TestPlanEveryPreset(t *testing.T) {
	for _, name := range configs.Names() {
		t.Run(name, func(t *testing.T) {
			out := filepath.Join(t.TempDir(), "outputs")
			var stdout, stderr bytes.Buffer
			if code := run([]string{"ortrain", "plan", "--preset", name, "--set", `output_dir="` + out + `"`}, &stdout, &stderr); code != 0 {
				t.Fatalf("exit %d: %s", code, stderr.String())
			}
			wants := []string{"run ", "model ", "batch ", "schedule ", "loader "}
			if name == "vqgan3d-4gpu" {
				wants = append(wants, "ranks ", "NCCL on each rank's GPU")
			}
			for _, want := range wants {
				if !strings.Contains(stdout.String(), want) {
					t.Errorf("table lacks %q:\n%s", want, stdout.String())
				}
			}
			stdout.Reset()
			if code := run([]string{"ortrain", "plan", "--preset", name, "--json"}, &stdout, &stderr); code != 0 {
				t.Fatalf("--json exit %d: %s", code, stderr.String())
			}
			var p struct {
				Name  string                 `json:"name"`
				Model struct{ Params int64 } `json:"model"`
			}
			if err := json.Unmarshal(stdout.Bytes(), &p); err != nil || p.Model.Params == 0 {
				t.Errorf("--json: %v, %+v", err, p)
			}
		})
	}
}

// TestConfigChoice: --config and --preset are exclusive and one is needed
// (train and plan alike); an unknown preset lists the known ones; a bad
// --set names its key. All exit 2, and train leaves no run directory.
func TestConfigChoice(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		args []string
		say  string
	}{
		{"plan with both", []string{"plan", "--config", "x.toml", "--preset", "quickstart"}, "not both"},
		{"plan with neither", []string{"plan"}, "--preset NAME"},
		{"train with neither", []string{"train"}, "--preset NAME"},
		{"unknown preset", []string{"plan", "--preset", "nope"}, strings.Join(configs.Names(), ", ")},
		{"unknown preset for train", []string{"train", "--preset", "nope", "--set", `output_dir="` + dir + `"`}, "quickstart"},
		{"bad set", []string{"plan", "--preset", "quickstart", "--set", "trainer.max_steps=-1"}, "trainer.max_steps"},
		{"unknown key", []string{"plan", "--preset", "quickstart", "--set", "trainer.max_step=1"}, "trainer.max_step"},
		{"bad recipe params", []string{"plan", "--preset", "quickstart", "--set", "model.params.channels=-3"}, "model.params"},
		{"missing config file", []string{"plan", "--config", filepath.Join(dir, "none.toml")}, "none.toml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(append([]string{"ortrain"}, tc.args...), &stdout, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), tc.say) {
				t.Errorf("exit %d, stderr %q; want 2 saying %q", code, stderr.String(), tc.say)
			}
		})
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*")); len(m) != 0 {
		t.Errorf("train left %v behind", m)
	}
}

// TestExportCommand: export of a preset's recipe with a parameter changed
// writes the file and prints the artifacts build command; a second export
// to the same --out exits 2 and leaves the file; a --set outside
// model.params and a missing recipe choice exit 2.
func TestExportCommand(t *testing.T) {
	out := filepath.Join(t.TempDir(), "q.onnx")
	var stdout, stderr bytes.Buffer
	args := []string{"ortrain", "export", "--preset", "quickstart", "--set", "model.params.codebook_size=32", "--out", out}
	if code := run(args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "ortrain artifacts build --model "+out) {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, stdout.String(), stderr.String())
	}
	before, err := os.Stat(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		say  string
	}{
		{args, "not overwriting"},
		{[]string{"ortrain", "export", "--recipe", "resnet", "--set", "trainer.max_steps=1", "--out", out + "2"}, "model.params.* only"},
		{[]string{"ortrain", "export", "--out", out + "3"}, "--recipe NAME or --preset NAME"},
		{[]string{"ortrain", "export", "--recipe", "resnet", "--set", "model.params.depth=19", "--out", out + "4"}, "depth"},
	} {
		stderr.Reset()
		if code := run(tc.args, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), tc.say) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", tc.args[1:], code, stderr.String(), tc.say)
		}
	}
	if after, err := os.Stat(out); err != nil || !after.ModTime().Equal(before.ModTime()) || after.Size() != before.Size() {
		t.Errorf("%s changed", out)
	}
}

// TestPlanRefusesWhatTrainWould: a batch no machine holds, with
// data.memory_limit = 0 (the machine's memory), is planned, marked
// REFUSED and exits 2, where it used to report "no limit" and exit 0.
func TestPlanRefusesWhatTrainWould(t *testing.T) {
	var stdout, stderr bytes.Buffer
	code := run([]string{"ortrain", "plan", "--preset", "quickstart", "--set", "data.batch_size=1000000", "--set", "data.memory_limit=0"}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stdout.String(), "REFUSED") || !strings.Contains(stderr.String(), "machine's memory") {
		t.Errorf("exit %d, stdout %q, stderr %q; want 2 with the refusal", code, stdout.String(), stderr.String())
	}
}

// TestPlanMemory: plan --memory builds the quickstart's training graph in a
// temporary directory and replays a step: the activations at the peak
// grow with the batch, blocks recompute holds about what the default does
// and much less than keeping everything (the quickstart's peak, with its
// EMA codebook, lies outside the blocks: 0.4 % above the default), and
// nothing is left on disk.
func TestPlanMemory(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	measure := func(sets ...string) int64 {
		t.Helper()
		args := []string{"ortrain", "plan", "--preset", "quickstart", "--memory", "--json"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("plan --memory %v: exit %d: %s", sets, code, stderr.String())
		}
		var p struct {
			Activations *struct {
				PeakBytes  int64 `json:"peak_bytes"`
				StateBytes int64 `json:"state_bytes"`
			} `json:"activations"`
		}
		if err := json.Unmarshal(stdout.Bytes(), &p); err != nil || p.Activations == nil || p.Activations.StateBytes <= 0 {
			t.Fatalf("plan --memory --json: %v, %s", err, stdout.String())
		}
		return p.Activations.PeakBytes
	}
	two, four := measure("data.batch_size=2"), measure("data.batch_size=4")
	blocks := measure("data.batch_size=4", `model.recompute="blocks"`)
	none := measure("data.batch_size=4", `model.recompute="none"`)
	if !(two > 0 && four > two) || float64(blocks) > 1.01*float64(four) || 4*none < 5*four {
		t.Errorf("activations %d at batch 2, %d at 4, %d at 4 with blocks, %d keeping everything; want growing with the batch, blocks within 1%% of the default and keeping everything 25%% above", two, four, blocks, none)
	}
	if left, _ := os.ReadDir(tmp); len(left) > 0 {
		t.Errorf("plan left %d entries in the temporary directory", len(left))
	}
}

// TestPlanFitsBatch: plan --memory --gpu-memory finds the largest batch
// whose step memory stays within the size given: a plan at that batch
// fits and one at the next batch does not. Without --memory, or with a
// size that is not one, it exits 2.
func TestPlanFitsBatch(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	type act struct {
		TotalBytes int64 `json:"total_bytes"`
		Fit        *struct {
			Batch      int64 `json:"batch"`
			TotalBytes int64 `json:"total_bytes"`
		} `json:"fit"`
	}
	plan := func(extra ...string) act {
		t.Helper()
		args := append([]string{"ortrain", "plan", "--preset", "quickstart", "--memory", "--json"}, extra...)
		var stdout, stderr bytes.Buffer
		if code := run(args, &stdout, &stderr); code != 0 {
			t.Fatalf("%v: exit %d: %s", extra, code, stderr.String())
		}
		var p struct{ Activations act }
		if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
			t.Fatal(err)
		}
		return p.Activations
	}
	device := plan("--set", "data.batch_size=5").TotalBytes + 1000
	got := plan("--gpu-memory", strconv.FormatInt(device, 10))
	if got.Fit == nil || got.Fit.Batch < 5 || got.Fit.TotalBytes > device {
		t.Fatalf("fit in %d bytes: %+v, want a batch ≥ 5 within them", device, got.Fit)
	}
	at := plan("--set", fmt.Sprint("data.batch_size=", got.Fit.Batch)).TotalBytes
	next := plan("--set", fmt.Sprint("data.batch_size=", got.Fit.Batch+1)).TotalBytes
	if at != got.Fit.TotalBytes || next <= device {
		t.Errorf("fit batch %d: %d bytes there (plan says %d), %d at the next batch; device %d", got.Fit.Batch, at, got.Fit.TotalBytes, next, device)
	}
	for _, args := range [][]string{{"--gpu-memory", "23GiB"}, {"--memory", "--gpu-memory", "lots"}, {"--memory", "--probe", "-1"}} {
		var stdout, stderr bytes.Buffer
		if code := run(append([]string{"ortrain", "plan", "--preset", "quickstart"}, args...), &stdout, &stderr); code != 2 {
			t.Errorf("plan %v: exit %d, want 2 (%s)", args, code, stderr.String())
		}
	}
}

// TestPlanAndTrainDiffusionLM: plan passes a diffusion-LM config with its
// data (the shard pattern matching), and both refuse a data block length
// other than the model's.
func TestPlanAndTrainDiffusionLM(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	if err := synthetic.WriteGSM8K(filepath.Join(root, "train-00000-of-00002.jsonl"), 8, 1); err != nil {
		t.Fatal(err)
	}
	if err := synthetic.WriteGSM8K(filepath.Join(root, "train-00001-of-00002.jsonl"), 8, 2); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "lm.toml")
	os.WriteFile(cfg, []byte(`name = "lm"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
recipe = "bd3lm"
loss = "loss"
[model.params]
seq_len = 64
block_size = 16
hidden = 32
layers = 1
heads = 2
[data]
kind = "tokens"
train = "`+filepath.Join(root, "train-*.jsonl")+`"
batch_size = 4
[data.tokens]
seq_len = 64
block_size = 16
[trainer]
device = "cpu"
max_steps = 1
`), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "plan", "--config", cfg}, &out, &errOut); code != 0 || !strings.Contains(out.String(), "16 train") {
		t.Errorf("plan: exit %d, %q, %q; want 0 with the 16 examples of both shards", code, out.String(), errOut.String())
	}
	for _, cmd := range []string{"plan", "train"} {
		errOut.Reset()
		if code := run([]string{"ortrain", cmd, "--config", cfg, "--set", "data.tokens.block_size=8"}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), "data.tokens.block_size: 8 must equal model.params.block_size = 16") {
			t.Errorf("%s with another block length: exit %d, %q; want 2", cmd, code, errOut.String())
		}
	}
	if _, err := os.Stat(filepath.Join(root, "outputs")); !os.IsNotExist(err) {
		t.Errorf("a refused train left %s: %v", filepath.Join(root, "outputs"), err)
	}
}

// TestCUDAWithoutCUDA: trainer.device = "cuda" where this ONNX Runtime
// cannot open a GPU is refused before anything is built (exit 2, naming
// the key), "auto" trains on the CPU; skipped where CUDA works.
func TestCUDAWithoutCUDA(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	if ort.CheckDevice(ort.CUDADevice(0), ort.Options{}) == nil {
		t.Skip("CUDA works here")
	}
	root := t.TempDir()
	out := filepath.Join(root, "outputs")
	var stdout, stderr bytes.Buffer
	args := []string{"ortrain", "train", "--config", ddpConfig(t, root), "--set", "trainer.max_steps=2", "--set", "trainer.val_check_interval=2"}
	if code := run(append(args, "--set", `trainer.device="cuda"`), &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "trainer.device: cuda:0") {
		t.Errorf("cuda without CUDA: exit %d, %q; want 2 naming trainer.device", code, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("the refused run left %s", out)
	}
	stderr.Reset()
	if code := run(append(args, "--set", `trainer.device="auto"`), &stdout, &stderr); code != 0 || !strings.Contains(stderr.String(), "training on the CPU") {
		t.Errorf("auto without CUDA: exit %d, %q; want 0 on the CPU", code, stderr.String())
	}
}

// TestPlanTensorSizes: plan --memory looks for tensors of the training
// graph over 2^31 − 1 elements, which a CUDA device's kernels cannot take
// (shapes only: nothing of that size is allocated). The diffusion-LM
// preset at its batch of 64 has none. A narrow LM (width 16, one layer)
// at batch 128 with its loss in one piece has [65536, 50258] logits:
// plan names them and exits 2, since train would refuse them on the
// preset's cuda device; on the CPU it notes them and exits 0. The VQ-GAN
// preset at the seeds' batch of 4 in one step is refused too, and told
// the batch that fits.
func TestPlanTensorSizes(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	plan := func(preset string, sets ...string) (int, string, string) {
		t.Helper()
		args := []string{"ortrain", "plan", "--preset", preset, "--memory"}
		for _, s := range sets {
			args = append(args, "--set", s)
		}
		var stdout, stderr bytes.Buffer
		code := run(args, &stdout, &stderr)
		return code, stdout.String(), stderr.String()
	}
	if code, out, errs := plan("bd3lm-gsm8k-h200"); code != 0 || !strings.Contains(out, "every tensor of the training graph at batch 64 within 2^31 − 1 elements") {
		t.Errorf("bd3lm-gsm8k-h200: exit %d, want 0 and no tensor over the limit:\n%s%s", code, out, errs)
	}
	narrow := []string{"model.params.hidden=16", "model.params.layers=1", "model.params.heads=2", "model.params.loss_pieces=1",
		"data.batch_size=128", "trainer.accumulate_grad_batches=4"}
	code, out, errs := plan("bd3lm-gsm8k-h200", narrow...)
	for _, want := range []string{"LogSoftmax_out [65536 50258] = 3293708288 elements from node LogSoftmax (LogSoftmax)", "data.batch_size = 64 with trainer.accumulate_grad_batches = 8", "model.params.loss_pieces (now 1 piece)"} {
		if code != 2 || !strings.Contains(out, want) || !strings.Contains(errs, "train would refuse") {
			t.Errorf("narrow LM in one loss piece: exit %d, want 2 and a refusal saying %q:\n%s%s", code, want, out, errs)
		}
	}
	if code, out, errs := plan("bd3lm-gsm8k-h200", append(narrow, `trainer.device="cpu"`)...); code != 0 || !strings.Contains(out, "on the CPU, which takes them") {
		t.Errorf("on the CPU: exit %d, want 0 and a note:\n%s%s", code, out, errs)
	}
	code, out, errs = plan("vqgan3d-h200", "data.batch_size=4", "trainer.accumulate_grad_batches=1")
	if want := "data.batch_size = 2 with trainer.accumulate_grad_batches = 2 keeps the effective batch of 4"; code != 2 || !strings.Contains(out, want) {
		t.Errorf("vqgan3d-h200 at batch 4: exit %d, want 2 and %q:\n%s%s", code, want, out, errs)
	}
}

// TestPlanMemoryOnTheGPU: for a mixed-precision run on a GPU, planned on
// the CPU (where the low-precision products are emulated with float32
// copies), plan --memory also replays the graph as the GPU's kernels type
// it: a smaller figure than the emulated bound, printed on its own line.
func TestPlanMemoryOnTheGPU(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	args := []string{"ortrain", "plan", "--preset", "quickstart", "--memory", "--set", "trainer.device=cuda:0", "--set", "trainer.precision=16-mixed"}
	var stdout, stderr bytes.Buffer
	if code := run(append(args, "--json"), &stdout, &stderr); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr.String())
	}
	var p struct {
		Activations struct {
			PeakBytes        int64 `json:"peak_bytes"`
			Emulated         bool  `json:"emulated"`
			DeviceTypedBytes int64 `json:"device_typed_peak_bytes"`
		} `json:"activations"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	if a := p.Activations; !a.Emulated || a.DeviceTypedBytes <= 0 || a.DeviceTypedBytes >= a.PeakBytes {
		t.Errorf("emulated %v, peak %d, as the GPU types it %d; want an emulated plan and a smaller positive GPU figure", a.Emulated, a.PeakBytes, a.DeviceTypedBytes)
	}
	stdout.Reset()
	if code := run(args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "on the GPU") {
		t.Errorf("plan: exit %d; want an \"on the GPU\" line: %s", code, stdout.String())
	}
}
