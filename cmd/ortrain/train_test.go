package main

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/data/nifti"
	"github.com/ortrain/ortrain/training/data/volumes"
	"github.com/ortrain/ortrain/training/graph"
)

// linearArtifacts builds logits = x·W + b (x [batch, 4], 3 classes) with
// cross-entropy into dir.
func linearArtifacts(t *testing.T, dir string) {
	g := graph.New("linear", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("w", []int64{4, 3}, []float32{0.1, -0.2, 0.3, 0.0, 0.2, -0.1, -0.3, 0.1, 0.2, 0.1, 0.0, -0.2}))
	g.AddInitializer(graph.Float32s("b", []int64{3}, make([]float32, 3)))
	b := graph.NewBuilder(g, "")
	b.OpInto("logits", "Add", []string{b.MatMul("x", "w"), "b"})
	g.Outputs = []string{"logits"}
	if _, err := artifacts.Build(artifacts.Options{Graph: g, Out: dir, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
}

// TestTrainCommand runs `ortrain train` the way a user does and checks
// the exit codes and the run directories it leaves: a bad key or missing
// artifacts exit 2 naming them; a run writes version_0 with its config,
// metrics, TensorBoard events and checkpoints; a second run takes
// version_1; --resume last continues version_1 to the new max_steps; an
// existing --run-dir is kept, and --overwrite replaces only runs.
func TestTrainCommand(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	art := filepath.Join(root, "art")
	linearArtifacts(t, art)
	cfg := filepath.Join(root, "run.toml")
	os.WriteFile(cfg, []byte(`name = "lin"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
artifacts = "`+art+`"
[data]
kind = "synthetic"
batch_size = 16
num_workers = 1
[trainer]
device = "cpu"
max_steps = 6
val_check_interval = 3
limit_val_batches = 2
log_every_n_steps = 2
checkpoint_every_n_steps = 2
[optimizer]
lr = 0.05
`), 0o644)
	kept := filepath.Join(root, "kept")
	os.MkdirAll(kept, 0o755)
	os.WriteFile(filepath.Join(kept, "notes.txt"), []byte("mine"), 0o644)
	version := func(n string) string { return filepath.Join(root, "outputs", "lin", n) }
	cases := []struct {
		name  string
		args  []string
		code  int
		say   string // on stderr
		check func(t *testing.T)
	}{
		{"unknown key", []string{"--set", "trainer.max_stpes=3"}, 2, "trainer.max_stpes", nil},
		{"missing artifacts", []string{"--set", `model.artifacts="` + filepath.Join(root, "nope") + `"`}, 2, filepath.Join(root, "nope"), nil},
		{"new run", nil, 0, "", func(t *testing.T) {
			for _, f := range []string{"config.toml", "metrics.csv", "checkpoints/last/state.json"} {
				if _, err := os.Stat(filepath.Join(version("version_0"), f)); err != nil {
					t.Error(err)
				}
			}
			if ev, _ := filepath.Glob(filepath.Join(version("version_0"), "events.out.tfevents.*")); len(ev) != 1 {
				t.Errorf("TensorBoard event files: %v, want one", ev)
			}
			csv, _ := os.ReadFile(filepath.Join(version("version_0"), "metrics.csv"))
			for _, k := range []string{"train/loss", "lr", "grad_norm", "val/loss"} {
				if !strings.Contains(string(csv), ","+k+",") {
					t.Errorf("metrics.csv lacks %s", k)
				}
			}
		}},
		{"second run", nil, 0, "", func(t *testing.T) {
			if _, err := os.Stat(version("version_1")); err != nil {
				t.Error("a second run did not take version_1:", err)
			}
		}},
		{"resume last", []string{"--resume", "last", "--set", "trainer.max_steps=10"}, 0, "", func(t *testing.T) {
			ck, err := checkpoint.Load(filepath.Join(version("version_1"), "checkpoints", "last"))
			if err != nil {
				t.Fatal(err)
			}
			defer ck.Close()
			if ck.State.Step != 10 {
				t.Errorf("resumed run ended at step %d, want 10", ck.State.Step)
			}
			if _, err := os.Stat(version("version_2")); err == nil {
				t.Error("--resume last started a new version")
			}
		}},
		{"refused resume changes nothing", []string{"--resume", "last", "--set", "optimizer.lr=0.5", "--set", "trainer.save_top_k=0",
			"--set", "trainer.max_steps=12"}, 2, "optimizer.lr", nil},
		{"resume from an older checkpoint", []string{"--resume", filepath.Join(root, "outputs", "lin", "version_3", "checkpoints", "step-000000002"),
			"--set", "trainer.save_top_k=2", "--set", "trainer.max_steps=4", "--set", "trainer.checkpoint_every_n_steps=1"}, 0, "", func(t *testing.T) {
			// The abandoned branch (steps 3 to 6) stays on disk, even under
			// a smaller save_top_k; "last", and so --resume last and eval,
			// follow the resumed branch.
			dir := filepath.Join(version("version_3"), "checkpoints")
			if last, _ := os.Readlink(filepath.Join(dir, "last")); last != "step-000000004-2" {
				t.Errorf("last -> %q, want step-000000004-2", last)
			}
			got, err := checkpoint.Latest(dir)
			if err != nil || filepath.Base(got) != "step-000000004-2" {
				t.Errorf("Latest = %s, %v; want step-000000004-2", got, err)
			}
			if _, err := os.Stat(filepath.Join(dir, "step-000000006")); err != nil {
				t.Errorf("the abandoned branch's checkpoint is gone: %v", err)
			}
		}},
		{"run dir kept", []string{"--run-dir", kept}, 2, kept, func(t *testing.T) {
			if b, _ := os.ReadFile(filepath.Join(kept, "notes.txt")); string(b) != "mine" {
				t.Error("existing run directory changed")
			}
		}},
		{"a folder that is no run is not overwritten", []string{"--run-dir", kept, "--overwrite"}, 2, "no ortrain run", func(t *testing.T) {
			if b, _ := os.ReadFile(filepath.Join(kept, "notes.txt")); string(b) != "mine" {
				t.Error("--overwrite changed a folder that holds no run")
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var before map[string]string
			switch c.name {
			case "refused resume changes nothing":
				before = snapshot(t, version("version_1"))
				defer func() {
					if after := snapshot(t, version("version_1")); !maps.Equal(before, after) {
						t.Errorf("the refused resume changed the run:\nbefore %v\nafter  %v", before, after)
					}
				}()
			case "resume from an older checkpoint":
				// A run keeping every checkpoint, steps 1..6.
				var out, errOut bytes.Buffer
				if code := run([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.save_top_k=-1", "--set", "trainer.checkpoint_every_n_steps=1",
					"--run-dir", version("version_3")}, &out, &errOut); code != 0 {
					t.Fatalf("setup run: exit %d: %s", code, errOut.String())
				}
			}
			var out, errOut bytes.Buffer
			args := append([]string{"ortrain", "train", "--config", cfg}, c.args...)
			code := run(args, &out, &errOut)
			if code != c.code || !strings.Contains(errOut.String(), c.say) {
				t.Fatalf("ortrain %v: exit %d, stderr %q; want exit %d saying %q", c.args, code, errOut.String(), c.code, c.say)
			}
			if c.check != nil {
				c.check(t)
			}
		})
	}
}

// snapshot maps every file and link under dir to its content or target.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			out[p] = "-> " + target
			return err
		case d.Type().IsRegular():
			b, err := os.ReadFile(p)
			out[p] = fmt.Sprintf("%x", sha256.Sum256(b))
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestFirstSignalCancels: SIGINT cancels the loop's context (the loop then
// finishes its step and checkpoints, see trainer.TestResumeIsBitExact)
// instead of killing the process.
func TestFirstSignalCancels(t *testing.T) {
	ctx, stop := interruptible(io.Discard)
	defer stop()
	syscall.Kill(os.Getpid(), syscall.SIGINT)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGINT did not cancel the context")
	}
}

// TestFailedSetupLeavesNoRun: a new run whose model cannot be built (a
// ResNet of depth 7), or whose initial weights are refused, fails with exit
// 2 and leaves nothing: no version directory, no output directory it made,
// no --run-dir it made.
func TestFailedSetupLeavesNoRun(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := filepath.Join(root, "run.toml")
	os.WriteFile(cfg, []byte(`name = "bad"
output_dir = "`+filepath.Join(root, "outputs")+`"
[model]
recipe = "resnet"
[model.params]
depth = 7
[data]
kind = "synthetic"
[trainer]
device = "cpu"
max_steps = 1
`), 0o644)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 2 {
		t.Fatalf("exit %d: %s; want 2", code, errOut.String())
	}
	if _, err := os.Stat(filepath.Join(root, "outputs")); !os.IsNotExist(err) {
		t.Errorf("a failed setup left %s (%v)", filepath.Join(root, "outputs"), err)
	}
	absent := filepath.Join(root, "absent.safetensors")
	runDir := filepath.Join(root, "new-run")
	if code := run([]string{"ortrain", "train", "--config", cfg, "--set", "model.params.depth=18", "--set", `model.init_weights="` + absent + `"`,
		"--run-dir", runDir}, &out, &errOut); code != 2 || !strings.Contains(errOut.String(), absent) {
		t.Fatalf("exit %d: %s; want 2 naming %s", code, errOut.String(), absent)
	}
	if _, err := os.Stat(runDir); !os.IsNotExist(err) {
		t.Errorf("a refused run left its --run-dir %s (%v)", runDir, err)
	}
}

// TestWarnDataListsSkippedVolumes: the volume files data.skip_bad_files
// drops when the set opens are printed, each with why, and counted.
func TestWarnDataListsSkippedVolumes(t *testing.T) {
	dir := t.TempDir()
	var h nifti.Header
	h.Dim = [8]int64{3, 8, 8, 8, 1, 1, 1, 1}
	h.PixDim = [8]float64{1, 1, 1, 1, 1, 1, 1, 1}
	good := filepath.Join(dir, "a.nii.gz")
	if err := nifti.Write(good, h, make([]float32, 512)); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "b.nii")
	if err := os.WriteFile(bad, make([]byte, 400), 0o644); err != nil {
		t.Fatal(err)
	}
	ds, err := volumes.New(volumes.Config{Files: []string{good, bad}, TrainSplit: 1, SkipBadFiles: true,
		PatchSize: [3]int{8, 8, 8}, Stride: [3]int{8, 8, 8}, CacheBytes: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	warnData(&out, "data.train", ds)
	for _, want := range []string{"ortrain: data.train: skipped (data.skip_bad_files): " + bad + ": not NIfTI", "ortrain: data.train: skipped 1 of 2 volume files as bad"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("%q lacks %q", out.String(), want)
		}
	}
}

// TestProfileSyncsLaunchesOnGPU: --profile on a CUDA device sets
// CUDA_LAUNCH_BLOCKING=1 (and says so) unless it is set already; on the
// CPU, or without --profile, the environment is left alone.
func TestProfileSyncsLaunchesOnGPU(t *testing.T) {
	const key = "CUDA_LAUNCH_BLOCKING"
	t.Setenv(key, "") // restored after the test
	os.Unsetenv(key)
	var out bytes.Buffer
	syncLaunchesForProfile(&out, "prof", ort.CPU)
	syncLaunchesForProfile(&out, "", ort.CUDADevice(0))
	if _, set := os.LookupEnv(key); set || out.Len() > 0 {
		t.Fatalf("CPU run or no profile: %s set %v, said %q", key, set, out.String())
	}
	syncLaunchesForProfile(&out, "prof", ort.CUDADevice(0))
	if v := os.Getenv(key); v != "1" || !strings.Contains(out.String(), "synchronous launches") {
		t.Errorf("profile on cuda:0: %s=%q, said %q; want 1 and a line saying so", key, v, out.String())
	}
	os.Setenv(key, "0")
	out.Reset()
	syncLaunchesForProfile(&out, "prof", ort.CUDADevice(0))
	if v := os.Getenv(key); v != "0" || !strings.Contains(out.String(), "CUDA_LAUNCH_BLOCKING=0, as set") {
		t.Errorf("a value the user set: %s=%q, said %q; want it kept and named", key, v, out.String())
	}
}
