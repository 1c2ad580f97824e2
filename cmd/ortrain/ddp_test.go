package main

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/collective"
	"github.com/ortrain/ortrain/training/safetensors"
)

// ddpConfig is a tiny VQ-GAN (GroupNorm only: no batch statistics that
// would differ per rank) on synthetic volumes, 50 steps of SGD.
func ddpConfig(t *testing.T, root string) string {
	path := filepath.Join(root, "vq.toml")
	body := `name = "vq"
output_dir = "` + filepath.Join(root, "outputs") + `"
seed = 1
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [8, 8, 8]
channels = 4
channel_mult = [1, 2]
res_blocks = 1
z_channels = 4
embed_dim = 4
# One code: no nearest-code choice, whose near ties float rounding breaks
# differently for a batch split in two, sending the runs apart for good
# (with 16 codes, a flip at step 9 of 50).
codebook_size = 1
groups = 2
# The loss-trained codebook: every weight is trained by gradients, which
# the ranks sum. An EMA codebook is a buffer each rank updates from its
# own samples, which no sum of gradients makes equal to one process's.
codebook_decay = 0
[data]
kind = "synthetic"
batch_size = 4
num_workers = 1
[trainer]
device = "cpu"
max_steps = 50
val_check_interval = 25
log_every_n_steps = 5
# SGD: its update is linear in the gradient, so two ranks' float rounding
# stays as small in the weights as in the gradients. AdamW's first steps
# are lr·sign(g): a gradient that is zero in exact arithmetic (a conv's
# bias before a GroupNorm, whose mean the norm removes) is float noise
# there, which AdamW turns into whole steps that differ by rank layout.
[optimizer]
name = "sgd"
lr = 0.05
momentum = 0.9
[runtime]
intra_op_threads = 1
`
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestDataParallelBuffersAgree: with the EMA codebook, a buffer each rank
// updates from its own samples, two ranks end a 20-step run holding the
// same codebook (rank 0's, broadcast after every step as PyTorch's DDP
// does) — the run checks it at the end and fails if they differ.
func TestDataParallelBuffersAgree(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2",
		"--set", "model.params.codebook_decay=0.99", "--set", "trainer.max_steps=20"}, "\x1f")
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args}, os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	if err != nil || !strings.Contains(msg, "reached 20 steps") {
		t.Fatalf("mpirun -np 2 with an EMA codebook: %v\n%s", err, msg)
	}
}

// TestDataParallelTwoRanks: mpirun -np 2 with 2 samples per rank trains as
// one process with 4 per step: each rank takes its shard of every step's
// samples and the gradients are summed before the update. After 50 steps
// (AdamW) every weight agrees within float rounding; only rank 0 writes a
// run directory.
func TestDataParallelTwoRanks(t *testing.T) {
	if os.Getenv("ORTRAIN_TEST_DDP_ARGS") != "" {
		// A rank, started by mpirun from the test below.
		if os.Getenv("ORTRAIN_TEST_STOP_RANK") == os.Getenv("OMPI_COMM_WORLD_RANK") {
			go func() { // stops answering, as a hung rank
				time.Sleep(3 * time.Second)
				syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}()
		}
		if os.Getenv("ORTRAIN_TEST_KILL_RANK") == os.Getenv("OMPI_COMM_WORLD_RANK") {
			go func() { // killed mid-run, as by the OOM killer
				time.Sleep(3 * time.Second)
				syscall.Kill(os.Getpid(), syscall.SIGKILL)
			}()
		}
		args := strings.Split(os.Getenv("ORTRAIN_TEST_DDP_ARGS"), "\x1f")
		if extra := os.Getenv("ORTRAIN_TEST_RANK1_ARGS"); extra != "" && os.Getenv("OMPI_COMM_WORLD_RANK") == "1" {
			args = append(args, strings.Split(extra, "\x1f")...)
		}
		// Straight to the process's streams: a failing rank aborts the
		// job before a buffer could be printed.
		code := run(args, os.Stdout, os.Stderr)
		if code != 0 {
			os.Exit(code)
		}
		return
	}
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg}, &out, &errOut); code != 0 {
		t.Fatalf("one process: exit %d: %s", code, errOut.String())
	}
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2"}, "\x1f")
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args}, os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatalf("mpirun -np 2: %v\n%s", err, msg)
	}
	if !strings.Contains(msg, "data-parallel over 2 ranks") {
		t.Errorf("rank 0 does not say it runs data-parallel:\n%s", msg)
	}
	versions, _ := filepath.Glob(filepath.Join(root, "outputs", "vq", "version_*"))
	if len(versions) != 2 {
		t.Fatalf("run directories %v: want the single run's and rank 0's only", versions)
	}
	one, two := tensors(t, filepath.Join(versions[0], "checkpoints", "last")), tensors(t, filepath.Join(versions[1], "checkpoints", "last"))
	worst, name := worstDifference(one, two)
	t.Logf("2 ranks × 2 against 1 × 4 after 50 steps: worst weight difference %.2g of its tensor's largest (%s)", worst, name)
	if worst > 1e-3 || len(one) != len(two) {
		t.Errorf("weights after 50 steps differ by %.2g (%s): the ranks did not train as one process", worst, name)
	}
	// Each rank validates half of the 256 validation samples and the
	// totals are summed: the job's metrics are the single process's.
	valOne, valTwo := valMetrics(t, versions[0]), valMetrics(t, versions[1])
	for _, name := range []string{"val/loss", "val/psnr", "val/codebook_usage", "val/codebook_perplexity"} {
		a, b := valOne[name], valTwo[name]
		if a == 0 || math.Abs(a-b) > 1e-3*math.Abs(a) {
			t.Errorf("%s at step 50: %v from 2 ranks' shards, %v from one process", name, b, a)
		}
	}
	st, err := checkpoint.ReadState(filepath.Join(versions[1], "checkpoints", "last"))
	if err != nil || st.Step != 50 {
		t.Errorf("rank 0's last checkpoint: step %v, %v; want 50", st, err)
	}

	// Checkpoints move between world sizes at the same samples per step:
	// 2 ranks to step 25 then 1 process to 50, and 1 process (2 × 2
	// accumulated) to step 25 then 2 ranks to 50, each continue the data
	// order and end where the uninterrupted run did.
	mpi := func(sets ...string) {
		t.Helper()
		a := append([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2"}, sets...)
		if msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + strings.Join(a, "\x1f")}, os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v"); err != nil {
			t.Fatalf("mpirun -np 2 %v: %v\n%s", sets, err, msg)
		}
	}
	single := func(sets ...string) {
		t.Helper()
		if code := run(append([]string{"ortrain", "train", "--config", cfg}, sets...), &out, &errOut); code != 0 {
			t.Fatalf("one process %v: exit %d: %s", sets, code, errOut.String())
		}
	}
	mpi("--set", "trainer.max_steps=25")
	v2 := filepath.Join(root, "outputs", "vq", "version_2")
	single("--resume", v2)
	// 2 samples × 2 accumulated: the checkpoint's position counts 50
	// batches of 2, which the 2 ranks resume as 25 each.
	single("--set", "trainer.max_steps=25", "--set", "data.batch_size=2", "--set", "trainer.accumulate_grad_batches=2")
	v3 := filepath.Join(root, "outputs", "vq", "version_3")
	mpi("--resume", v3)
	for _, v := range []string{v2, v3} {
		worst, _ := worstDifference(one, tensors(t, filepath.Join(v, "checkpoints", "last")))
		t.Logf("%s (world size changed at step 25) against the uninterrupted run: worst %.2g", filepath.Base(v), worst)
		if worst > 1e-3 {
			t.Errorf("%s: after a resume across world sizes the weights differ by %.2g", filepath.Base(v), worst)
		}
	}
}

// TestDataParallelRankDies: a rank killed mid-run ends the job: the other
// exits and mpirun fails within a bounded time, naming the dead rank,
// rather than the survivor waiting in its next collective forever.
func TestDataParallelRankDies(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2",
		"--set", "trainer.max_steps=100000"}, "\x1f")
	start := time.Now()
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args, "ORTRAIN_TEST_KILL_RANK=1"},
		os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	took := time.Since(start)
	if err == nil || !strings.Contains(msg, "rank 1") || took > 2*time.Minute {
		t.Errorf("rank 1 killed: mpirun returned %v after %v; want a failure naming rank 1 within 2 minutes\n%s", err, took, msg)
	}
	t.Logf("rank 1 killed after 3 s: the job ended after %v", took.Round(time.Second))
}

// TestDataParallelRankHangs: a rank that stops answering (SIGSTOP) ends
// the job once the collective timeout has passed: the rank waiting for
// it says no rank answered and exits 1, and mpirun ends the job, rather
// than the job waiting forever.
func TestDataParallelRankHangs(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2",
		"--set", "trainer.max_steps=100000"}, "\x1f")
	start := time.Now()
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args, "ORTRAIN_TEST_STOP_RANK=1", collective.TimeoutEnv + "=5"},
		os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	took := time.Since(start)
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 1 || !strings.Contains(msg, "rank 0: no rank answered within the collective timeout of 5s") ||
		strings.Contains(msg, "rank 1: no rank answered") || took > 2*time.Minute {
		t.Errorf("rank 1 stopped after 3 s, timeout 5 s: mpirun returned %v after %v; want exit 1 from rank 0's timeout within 2 minutes\n%s", err, took, msg)
	}
	t.Logf("rank 1 stopped after 3 s: the job ended after %v", took.Round(time.Second))
}

// TestDataParallelRanksDisagree: ranks started by hand with different run
// lengths (each node with its own config file) are refused at start with
// exit 2, naming the key and both values, rather than one rank waiting in
// a collective the other never calls; nothing is left on disk.
func TestDataParallelRanksDisagree(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2",
		"--set", "trainer.max_steps=6"}, "\x1f")
	start := time.Now()
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args, "ORTRAIN_TEST_RANK1_ARGS=--set\x1ftrainer.max_steps=9"},
		os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	took := time.Since(start)
	if err == nil || !strings.Contains(msg, "trainer.max_steps") || !strings.Contains(msg, "rank 1 has 9, rank 0 6") || took > 2*time.Minute {
		t.Errorf("ranks with max_steps 6 and 9: mpirun returned %v after %v; want a refusal naming trainer.max_steps and both values within 2 minutes\n%s", err, took, msg)
	}
	if left, _ := filepath.Glob(filepath.Join(root, "outputs", "vq", "version_*")); len(left) > 0 {
		t.Errorf("the refused job left %v", left)
	}
}

// TestDataParallelOnGPU (ORTRAIN_TEST_DEVICE=cuda:N, with NCCL): a one-rank
// job (strategy = "ddp") sums its gradients with NCCL on the GPU — NCCL does
// not allow two ranks on one GPU — and trains as the plain run on the same
// device: after 20 steps the weights agree within float rounding.
func TestDataParallelOnGPU(t *testing.T) {
	dev := orttest.Device(t)
	if !dev.CUDA {
		t.Skip("ORTRAIN_TEST_DEVICE is not a CUDA device")
	}
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip(collective.ErrNoMpirun)
	}
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	saved := rankCommand
	t.Cleanup(func() { rankCommand = saved })
	rankCommand = func() ([]string, error) {
		return []string{os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v"}, nil
	}
	common := []string{"--set", "trainer.device=" + dev.String(), "--set", "trainer.max_steps=20", "--set", `trainer.precision="32"`}
	var out, errOut bytes.Buffer
	if code := run(append([]string{"ortrain", "train", "--config", cfg}, common...), &out, &errOut); code != 0 {
		t.Fatalf("plain run on %v: exit %d: %s", dev, code, errOut.String())
	}
	args := append([]string{"ortrain", "train", "--config", cfg, "--set", `trainer.strategy="ddp"`}, common...)
	t.Setenv("ORTRAIN_TEST_DDP_ARGS", strings.Join(args, "\x1f"))
	out.Reset()
	errOut.Reset()
	// The rank's messages come through mpirun's output.
	if code := run(args, &out, &errOut); code != 0 || !strings.Contains(out.String()+errOut.String(), "NCCL on each rank's GPU") {
		t.Fatalf("one-rank NCCL job on %v: exit %d:\n%s%s", dev, code, out.String(), errOut.String())
	}
	one := tensors(t, filepath.Join(root, "outputs", "vq", "version_0", "checkpoints", "last"))
	nccl := tensors(t, filepath.Join(root, "outputs", "vq", "version_1", "checkpoints", "last"))
	worst, _ := worstDifference(one, nccl)
	t.Logf("one-rank NCCL job against the plain run on %v after 20 steps: worst weight difference %.2g", dev, worst)
	if worst > 1e-4 || len(one) != len(nccl) {
		t.Errorf("the NCCL job's weights differ by %.2g from the plain run's", worst)
	}
}

// valMetrics are a run's validation metrics at its last step, from
// metrics.csv (rows step, name, value, time).
func valMetrics(t *testing.T, version string) map[string]float64 {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(version, "metrics.csv"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(raw), "\n") {
		f := strings.Split(line, ",")
		if len(f) >= 3 && strings.HasPrefix(f[1], "val/") {
			var v float64
			fmt.Sscan(f[2], &v)
			out[f[1]] = v // the last row of each wins
		}
	}
	return out
}

// tensors reads a checkpoint's float32 tensors as float64.
// worstDifference is the largest difference between two checkpoints'
// tensors, each relative to its tensor's largest magnitude in a but at
// least noiseFloor, and the tensor where it is (a tensor b lacks counts as
// all zeros). The floor: a tensor whose gradient is zero in exact
// arithmetic (a conv's bias before a GroupNorm, which removes its mean)
// holds float noise that differs with how the batch is split — its SGD
// momentum peaks near 1e-9 — and its own scale would make that noise 100 %.
func worstDifference(a, b map[string][]float64) (float64, string) {
	const noiseFloor = 1e-3
	worst, name := 0.0, ""
	for k, x := range a {
		y := b[k]
		scale := noiseFloor
		for _, v := range x {
			scale = max(scale, math.Abs(v))
		}
		for i := range x {
			yi := 0.0
			if i < len(y) {
				yi = y[i]
			}
			if d := math.Abs(x[i]-yi) / scale; d > worst {
				worst, name = d, k
			}
		}
	}
	return worst, name
}

func tensors(t *testing.T, ck string) map[string][]float64 {
	t.Helper()
	ts, _, err := safetensors.Read(filepath.Join(ck, checkpoint.TensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]float64{}
	for _, x := range ts {
		if x.DType != ort.Float32 {
			continue
		}
		v := make([]float64, len(x.Data)/4)
		for i := range v {
			v[i] = float64(math.Float32frombits(uint32(x.Data[4*i]) | uint32(x.Data[4*i+1])<<8 | uint32(x.Data[4*i+2])<<16 | uint32(x.Data[4*i+3])<<24))
		}
		out[x.Name] = v
	}
	return out
}

// TestDataParallelSpawnsRanks: trainer.devices = 2 without a launcher
// starts the 2 ranks under mpirun itself, as Lightning does; a SIGINT to
// it stops both ranks at the same step with a checkpoint; several nodes,
// or no mpirun on the path, are refused with exit 2.
func TestDataParallelSpawnsRanks(t *testing.T) {
	if _, err := exec.LookPath("mpirun"); err != nil {
		t.Skip(collective.ErrNoMpirun)
	}
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	saved := rankCommand
	t.Cleanup(func() { rankCommand = saved })
	// The ranks are this test binary in TestDataParallelTwoRanks's rank
	// mode, running the command line spawnRanks was given.
	rankCommand = func() ([]string, error) {
		return []string{os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v"}, nil
	}
	job := func(sets ...string) (int, string) {
		args := append([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2"}, sets...)
		t.Setenv("ORTRAIN_TEST_DDP_ARGS", strings.Join(args, "\x1f"))
		var out, errOut bytes.Buffer
		code := run(args, &out, &errOut)
		return code, out.String() + errOut.String()
	}
	code, msg := job("--set", "trainer.max_steps=10")
	if code != 0 || !strings.Contains(msg, "starting 2 ranks") || !strings.Contains(msg, "data-parallel over 2 ranks") {
		t.Fatalf("trainer.devices=2: exit %d:\n%s", code, msg)
	}
	if st, err := checkpoint.ReadState(filepath.Join(root, "outputs", "vq", "version_0", "checkpoints", "last")); err != nil || st.Step != 10 {
		t.Errorf("rank 0's checkpoint: %+v, %v; want step 10", st, err)
	}

	// Ctrl-C: the first SIGINT reaches this process only, which asks the
	// ranks to stop; they agree on the step and rank 0 checkpoints it.
	// (sent once rank 0 has logged a step)
	go func() {
		metrics := filepath.Join(root, "outputs", "vq", "version_1", "metrics.csv")
		for deadline := time.Now().Add(2 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if b, err := os.ReadFile(metrics); err == nil && strings.Count(string(b), "\n") > 1 {
				break
			}
		}
		syscall.Kill(os.Getpid(), syscall.SIGINT)
	}()
	code, msg = job("--set", "trainer.max_steps=100000")
	st, err := checkpoint.ReadState(filepath.Join(root, "outputs", "vq", "version_1", "checkpoints", "last"))
	if code != 0 || !strings.Contains(msg, "interrupted; checkpoint written") || err != nil || st.Step < 1 || st.Step >= 100000 {
		t.Errorf("SIGINT: exit %d, checkpoint %+v (%v):\n%s", code, st, err, msg)
	}

	// strategy = "ddp" on one device: a one-rank job through the same
	// path (the way a GPU's NCCL path runs on one card).
	code, msg = job("--set", "trainer.devices=1", "--set", `trainer.strategy="ddp"`, "--set", "trainer.max_steps=3")
	if code != 0 || !strings.Contains(msg, "starting 1 rank on") || !strings.Contains(msg, "data-parallel over 1 rank (MPI)") {
		t.Errorf("strategy ddp on one device: exit %d:\n%s", code, msg)
	}

	if code, msg := job("--set", "trainer.num_nodes=2"); code != 2 || !strings.Contains(msg, "trainer.num_nodes") {
		t.Errorf("2 nodes without a launcher: exit %d, %q; want 2", code, msg)
	}
	t.Setenv("PATH", t.TempDir())
	if code, msg := job(); code != 2 || !strings.Contains(msg, "openmpi-bin") {
		t.Errorf("no mpirun: exit %d, %q; want 2 naming the package", code, msg)
	}
}

// TestDataParallelConfigDiffers: ranks started with configurations that
// hash differently are refused with exit 2, each rank other than 0 naming
// the keys that differ from rank 0's and both values (rank 0 broadcasts
// its configuration), without MPI_ABORT or a doubled "config:".
func TestDataParallelConfigDiffers(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	args := strings.Join([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.devices=2", "--set", "data.batch_size=2"}, "\x1f")
	msg, err := collective.Mpirun(2, []string{"ORTRAIN_TEST_DDP_ARGS=" + args, "ORTRAIN_TEST_RANK1_ARGS=--set\x1foptimizer.lr=0.02\x1f--set\x1ftrainer.log_every_n_steps=7"},
		os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v")
	if errors.Is(err, collective.ErrNoMpirun) {
		t.Skip(err)
	}
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != 2 || !strings.Contains(msg, "rank 1's configuration differs from rank 0's: optimizer.lr = 0.02 (rank 0: 0.05);") ||
		strings.Contains(msg, "log_every_n_steps") || strings.Contains(msg, "config: config:") || strings.Contains(msg, "MPI_ABORT") {
		t.Errorf("rank 1 with another optimizer.lr: mpirun returned %v; want exit 2 naming optimizer.lr and both values, once\n%s", err, msg)
	}
}

// TestDataParallelResumeRefusedBeforeLaunch: a resume across world sizes
// that changes the samples per step is refused once, before any rank is
// started, with the arithmetic and without the keys a resume may change.
func TestDataParallelResumeRefusedBeforeLaunch(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	root := t.TempDir()
	cfg := ddpConfig(t, root)
	saved := rankCommand
	t.Cleanup(func() { rankCommand = saved })
	rankCommand = func() ([]string, error) {
		return []string{os.Args[0], "-test.run", "^TestDataParallelTwoRanks$", "-test.v"}, nil
	}
	var out, errOut bytes.Buffer
	if code := run([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.max_steps=2"}, &out, &errOut); code != 0 {
		t.Fatalf("one process: exit %d: %s", code, errOut.String())
	}
	args := []string{"ortrain", "train", "--config", cfg, "--resume", "last", "--set", "trainer.devices=3", "--set", "data.batch_size=2", "--set", "trainer.max_steps=4"}
	t.Setenv("ORTRAIN_TEST_DDP_ARGS", strings.Join(args, "\x1f"))
	errOut.Reset()
	code := run(args, &out, &errOut)
	msg := errOut.String()
	if code != 2 || !strings.Contains(msg, "samples per optimizer step change from 4 (1 rank × 4) to 6 (3 ranks × 2)") ||
		strings.Contains(msg, "starting 3 ranks") || strings.Contains(msg, "volatile") || strings.Count(msg, "resume:") != 1 {
		t.Errorf("resume on 3 ranks × 2 of a 1 × 4 run: exit %d\n%s", code, msg)
	}
}

// TestDataParallelNoGPU: GPU ranks on a machine whose GPU is not usable
// are refused saying so (as one process is), not that NCCL is missing.
func TestDataParallelNoGPU(t *testing.T) {
	orttest.Init(t)
	if usableDevice("trainer.device", ort.Options{Device: ort.CUDADevice(0)}) == nil {
		t.Skip("cuda:0 is usable here")
	}
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	cfg := ddpConfig(t, t.TempDir())
	var out, errOut bytes.Buffer
	code := run([]string{"ortrain", "train", "--config", cfg, "--set", "trainer.device=cuda", "--set", "trainer.devices=2"}, &out, &errOut)
	if msg := errOut.String(); code != 2 || !strings.Contains(msg, "trainer.device: cuda:0") || strings.Contains(msg, "NCCL") {
		t.Errorf("2 GPU ranks without a usable GPU: exit %d\n%s", code, msg)
	}
}
