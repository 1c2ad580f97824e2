package trainer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/ortrain/ortrain/eval"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/precision"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/safetensors"
	"github.com/ortrain/ortrain/training/setup"
)

var tempRoot string

func mkdirTemp() (string, error) { return tempRoot, nil }

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	// Every test binds inputs as the CUDA provider does: a host buffer
	// rewritten in place after it was bound never reaches a run.
	ort.SetBindTimeCopy(true)
	var err error
	if tempRoot, err = os.MkdirTemp("", "ortrain-trainer-"); err != nil {
		panic(err)
	}
	code := m.Run()
	os.RemoveAll(tempRoot)
	os.Exit(code)
}

// TestTrainsAndValidates: the loop with accumulation, clipping and a
// cosine schedule learns the blobs (training loss falls below half its
// start, validation loss below 0.3), validates every 5 steps, and leaves
// the newest checkpoint plus the top 2 by val/loss.
func TestTrainsAndValidates(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.max_steps=40")
	rec := &recorder{}
	dir, err := run(t, c, "", "", rec)
	if err != nil {
		t.Fatal(err)
	}
	first, last := rec.results[0].Loss, rec.results[len(rec.results)-1].Loss
	if len(rec.results) != 40 || len(rec.val) != 8 || !rec.trainEnd {
		t.Fatalf("%d steps, %d validations, train end %v; want 40, 8, true", len(rec.results), len(rec.val), rec.trainEnd)
	}
	t.Logf("loss %.3f -> %.3f, val/loss %.3f -> %.3f", first, last, rec.val[0], rec.val[len(rec.val)-1])
	if last > first/2 || rec.val[len(rec.val)-1] > 0.3 {
		t.Errorf("loss %.3f -> %.3f, val/loss %.3f; want a halving and val/loss < 0.3", first, last, rec.val[len(rec.val)-1])
	}
	for i, r := range rec.results {
		if r.Samples != 16 || r.Skipped || !(r.GradNorm > 0) {
			t.Errorf("step %d: %d samples, skipped %v, grad norm %g; want 16 (2×8), false, > 0", i+1, r.Samples, r.Skipped, r.GradNorm)
		}
	}
	mgr, err := checkpoint.NewManager(filepath.Join(dir, "checkpoints"), 2, "val/loss", "min")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(mgr.Entries()); n < 2 || n > 3 {
		t.Errorf("%d checkpoints kept, want the newest plus the top 2", n)
	}
	for _, f := range []string{"metrics.csv", "checkpoints/last"} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Error(err)
		}
	}
}

// TestResumeIsBitExact: a run interrupted at step 10 (as by SIGINT: the
// step finishes, a checkpoint is written) and resumed from that checkpoint
// gives the uninterrupted run's loss and gradient-norm sequence bit for bit,
// and the same final weights and optimizer state.
func TestResumeIsBitExact(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t))
	full := &recorder{}
	fullDir, err := run(t, c, "", "", full)
	if err != nil {
		t.Fatal(err)
	}
	part := &recorder{stopAt: 10}
	dir, err := run(t, c, "", "", part)
	if err != nil {
		t.Fatal(err)
	}
	if len(part.results) != 10 {
		t.Fatalf("interrupted run did %d steps, want 10", len(part.results))
	}
	ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	rest := &recorder{}
	if _, err := run(t, c, dir, ck, rest); err != nil {
		t.Fatal(err)
	}
	got := append(part.results, rest.results...)
	if len(got) != len(full.results) {
		t.Fatalf("interrupted + resumed = %d steps, uninterrupted %d", len(got), len(full.results))
	}
	for i := range got {
		a, b := full.results[i], got[i]
		if math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || math.Float64bits(a.GradNorm) != math.Float64bits(b.GradNorm) || a.LR != b.LR {
			t.Errorf("step %d: loss %v grad_norm %v lr %v, uninterrupted %v %v %v", i+1, b.Loss, b.GradNorm, b.LR, a.Loss, a.GradNorm, a.LR)
		}
	}
	equalTensors(t, filepath.Join(fullDir, "checkpoints", "last"), filepath.Join(dir, "checkpoints", "last"))
}

// equalTensors checks two checkpoints hold the same tensors byte for byte.
func equalTensors(t *testing.T, a, b string) {
	t.Helper()
	ta, _, err := safetensors.Read(filepath.Join(a, checkpoint.TensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	tb, _, err := safetensors.Read(filepath.Join(b, checkpoint.TensorsFile))
	if err != nil {
		t.Fatal(err)
	}
	if len(ta) != len(tb) {
		t.Fatalf("%d tensors vs %d", len(ta), len(tb))
	}
	for i := range ta {
		if ta[i].Name != tb[i].Name || string(ta[i].Data) != string(tb[i].Data) {
			t.Errorf("tensor %s differs after resume", ta[i].Name)
		}
	}
}

// TestNonFinite: sample 5 carries a NaN. Without skip_nonfinite the run
// stops at the first step that meets it with a NonFiniteError naming the
// last checkpoint, and writes none after it (the newest stays whole and
// finite). With skip_nonfinite the run finishes, each step that met it is
// marked skipped, and the weights stay finite.
func TestNonFinite(t *testing.T) {
	art := mlpArtifacts(t)
	for _, skip := range []bool{false, true} {
		c := testConfig(t, art, "trainer.checkpoint_every_n_steps=1", "trainer.skip_nonfinite="+map[bool]string{true: "true", false: "false"}[skip])
		rec := &recorder{}
		dir, err := run(t, c, "", "", rec, newBlobs(96, 1, 5))
		ck, lerr := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
		if lerr != nil {
			t.Fatal(lerr)
		}
		loaded, lerr := checkpoint.Load(ck)
		if lerr != nil {
			t.Fatal(lerr)
		}
		for _, info := range loaded.Tensors.Tensors() {
			raw, _ := loaded.Tensors.Read(info.Name)
			for _, v := range asFloat32(raw) {
				if !finite(float64(v)) {
					t.Fatalf("skip=%v: checkpoint %s holds non-finite %s", skip, ck, info.Name)
				}
			}
		}
		loaded.Close()
		var nf *NonFiniteError
		skipped := 0
		for _, r := range rec.results {
			if r.Skipped {
				skipped++
			}
		}
		if !skip {
			if !errors.As(err, &nf) || nf.LastCheckpoint != ck || loaded.State.Step != nf.Step-1 {
				t.Errorf("skip=false: err = %v, latest checkpoint %s at step %d; want a NonFiniteError naming it, one step before", err, ck, loaded.State.Step)
			}
			t.Logf("skip=false: %v", err)
			continue
		}
		// 24 steps of 16 samples cover 4 epochs of 96: sample 5 comes up 4 times.
		if err != nil || skipped != 4 || len(rec.results) != 24 {
			t.Errorf("skip=true: err %v, %d of %d steps skipped; want nil, 4 of 24", err, skipped, len(rec.results))
		}
	}
}

func asFloat32(b []byte) []float32 {
	out := make([]float32, len(b)/4)
	for i := range out {
		out[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
	}
	return out
}

// TestStateStaysOnDevice counts the copies through the ort layer between
// steps 2 and 20 of a run without checkpoints or validation in between:
// only the batches and the step scalars go to the device (weights,
// gradients, optimizer state and buffers cross zero times), nothing comes
// back through a copy, and every parameter is always one of its two
// preallocated buffers.
func TestStateStaysOnDevice(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.checkpoint_every_n_steps=0", "trainer.val_check_interval=1000")
	var before, after ort.TransferStats
	rec := &recorder{}
	rec.onStep = func(s *callback.State) {
		switch s.Step {
		case 2:
			before = ort.Transfers()
		case 20:
			after = ort.Transfers()
		}
	}
	if _, err := run(t, c, "", "", rec); err != nil {
		t.Fatal(err)
	}
	d := after.Sub(before)
	t.Logf("steps 3..20: %+v", d)
	// Per step: 2 micro-batches of 8 samples of 4 float32 features and an
	// int64 label, and at most 7 scalars of 4 bytes.
	const batches, scalars = 2 * 8 * (4*4 + 8), 7 * 4
	if d.DeviceToHost != 0 || d.HostToDevice == 0 || d.Bytes > 18*(batches+scalars) {
		t.Errorf("18 steps moved %+v through the ort layer, want only batches and scalars to the device (at most %d bytes)", d, 18*(batches+scalars))
	}
}

// TestStepDoesNotAllocate: once the loader runs and the batch tensors are
// bound, an optimizer step (two micro-batches, the update, the schedule)
// makes no Go allocation, and every parameter stays one of its two
// preallocated device buffers.
func TestStepDoesNotAllocate(t *testing.T) {
	bn := filepath.Join(t.TempDir(), "bn")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlpBN(rand.New(rand.NewPCG(1, 2))), Out: bn, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	// With BatchNorm, a step of two micro-batches also keeps its buffers
	// aside (see Trainer.step).
	for _, art := range []string{mlpArtifacts(t), bn} {
		c := testConfig(t, art, "trainer.max_steps=1000", "data.drop_last=true")
		tr, _ := build(t, c, "", "", nil)
		for range 3 {
			if _, err := tr.step(context.Background()); err != nil {
				t.Fatal(err)
			}
		}
		ptrs := map[uintptr]bool{}
		for _, p := range tr.eng.params {
			ptrs[p.v[0].DataPointer()], ptrs[p.v[1].DataPointer()] = true, true
		}
		allocs := testing.AllocsPerRun(50, func() {
			if _, err := tr.step(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: a step allocates %.1f times, want 0", filepath.Base(art), allocs)
		}
		for _, nv := range tr.eng.current()[:len(tr.eng.params)] {
			if !ptrs[nv.v.DataPointer()] {
				t.Errorf("parameter %s moved to memory outside its two buffers", nv.name)
			}
		}
	}
}

// TestFloat16LossScaling: "16-mixed" with a first loss scale far too large
// for float16: the first steps overflow, are skipped (not an error, even
// without skip_nonfinite) and halve the scale; clean steps double it every
// growth interval; the run learns; and a run interrupted at step 10 and
// resumed repeats the uninterrupted run bit for bit, loss scale included.
func TestFloat16LossScaling(t *testing.T) {
	orttest.Init(t)
	dir, err := mkdirTemp()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "mlp16")
	m, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: art, Loss: "cross_entropy",
		Precision: ort.Float16, Probe: precision.NewProbe(ort.Options{}, graph.EmitOpset)})
	if err != nil {
		t.Fatal(err)
	}
	if m.LossScaleInput == "" || m.Precision.Compute != "float16" || m.Precision.Master != "float32" {
		t.Fatalf("manifest precision %+v, loss scale input %q", m.Precision, m.LossScaleInput)
	}
	// Master weights, and so gradients and optimizer states (shaped and
	// typed as their parameter), stay float32.
	for _, p := range m.Params {
		if p.DType != "float32" {
			t.Errorf("parameter %s is %s", p.Name, p.DType)
		}
	}
	og, err := graph.Load(filepath.Join(art, artifacts.OptimizerFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range og.Inputs {
		if info := og.Info(in); info.Float() && info.DType != ort.Float32 {
			t.Errorf("optimizer input %s is %s", in, info.DType)
		}
	}
	c := testConfig(t, art, `trainer.precision="16-mixed"`, "trainer.loss_scale_init=16777216", "trainer.loss_scale_growth_interval=3", "trainer.max_steps=40",
		"trainer.skip_nonfinite=false")
	full := &recorder{}
	fullDir, err := run(t, c, "", "", full)
	if err != nil {
		t.Fatal(err)
	}
	scale, clean, skips := 16777216.0, 0, 0
	for i, r := range full.results {
		if got := r.Metrics["train/loss_scale"]; got != scale {
			t.Fatalf("step %d: loss scale %g, want %g", i+1, got, scale)
		}
		if r.Skipped {
			skips++
			scale, clean = scale/2, 0
			continue
		}
		if clean++; clean == 3 {
			scale, clean = scale*2, 0
		}
	}
	if skips == 0 || skips > len(full.results)/2 {
		t.Fatalf("%d of %d steps skipped for overflow", skips, len(full.results))
	}
	part := &recorder{stopAt: 10}
	partDir, err := run(t, c, "", "", part)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Latest(filepath.Join(partDir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	rest := &recorder{}
	if _, err := run(t, c, partDir, ck, rest); err != nil {
		t.Fatal(err)
	}
	got := append(part.results, rest.results...)
	if len(got) != len(full.results) {
		t.Fatalf("interrupted + resumed = %d steps, uninterrupted %d", len(got), len(full.results))
	}
	for i := range got {
		a, b := full.results[i], got[i]
		if math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || a.Skipped != b.Skipped || a.Metrics["train/loss_scale"] != b.Metrics["train/loss_scale"] ||
			!(math.IsNaN(a.GradNorm) && math.IsNaN(b.GradNorm)) && math.Float64bits(a.GradNorm) != math.Float64bits(b.GradNorm) {
			t.Errorf("step %d: loss %v skipped %v scale %v grad_norm %v, uninterrupted %v %v %v %v", i+1,
				b.Loss, b.Skipped, b.Metrics["train/loss_scale"], b.GradNorm, a.Loss, a.Skipped, a.Metrics["train/loss_scale"], a.GradNorm)
		}
	}
	equalTensors(t, filepath.Join(fullDir, "checkpoints", "last"), filepath.Join(partDir, "checkpoints", "last"))
	t.Logf("%d steps skipped for overflow; loss %.3f -> %.3f", skips, full.results[0].Loss, full.results[len(full.results)-1].Loss)
}

// TestFloat16LossScaleBackoff: overflow skips while dynamic loss scaling
// backs off from too large a loss_scale_init are GradScaler's normal
// start, not a run that no longer learns: a run shorter than the back-off
// ends normally, saying every step was skipped and naming
// trainer.loss_scale_init and the scales tried; a back-off longer than
// the 100 skips in a row that stop a failing run trains on once the
// scale fits.
func TestFloat16LossScaleBackoff(t *testing.T) {
	orttest.Init(t)
	dir, err := mkdirTemp()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "mlp16-backoff")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: art, Loss: "cross_entropy",
		Precision: ort.Float16, Probe: precision.NewProbe(ort.Options{}, graph.EmitOpset)}); err != nil {
		t.Fatal(err)
	}
	short := &recorder{}
	c := testConfig(t, art, `trainer.precision="16-mixed"`, "trainer.loss_scale_init=4294967296", "trainer.max_steps=6", "trainer.skip_nonfinite=false")
	if _, err := run(t, c, "", "", short); err != nil {
		t.Fatalf("6 steps backing off from 2^32: %v", err)
	}
	for i, r := range short.results {
		if !r.Skipped || !finite(r.Loss) {
			t.Errorf("step %d: skipped %v, loss %v; want an overflow skip with a finite loss", i+1, r.Skipped, r.Loss)
		}
	}
	if !strings.Contains(short.stopReason, "trainer.loss_scale_init = 4.294967296e+09") || !strings.Contains(short.stopReason, "all 6 steps were skipped for float16 overflow") {
		t.Errorf("end of a run that only backed off: %q", short.stopReason)
	}

	long := &recorder{}
	c = testConfig(t, art, `trainer.precision="16-mixed"`, "trainer.loss_scale_init=1.7e38", "trainer.max_steps=140", "trainer.val_check_interval=1000",
		"trainer.checkpoint_every_n_steps=0")
	if _, err := run(t, c, "", "", long); err != nil {
		t.Fatalf("backing off from 1.7e38: %v", err)
	}
	skips := 0
	for _, r := range long.results {
		if !r.Skipped {
			break
		}
		skips++
	}
	if skips <= maxSkipsInARow || skips == len(long.results) {
		t.Errorf("%d of %d steps skipped in a row from 1.7e38; want more than %d, then training", skips, len(long.results), maxSkipsInARow)
	}
	t.Logf("from 1.7e38: %d overflow skips, then the scale fit (%g)", skips, long.results[skips].Metrics["train/loss_scale"])

	e := &NonFiniteError{Step: 40, Loss: 0.2, GradNorm: math.NaN(), InARow: 41, Overflow: &overflowRun{41, 65536, 0x1p-24}, InitScale: 65536}
	if msg := e.Error(); !strings.Contains(msg, "every loss scale from 65536 down to 5.96") || !strings.Contains(msg, "trainer.loss_scale_init = 65536") {
		t.Errorf("overflow at the scale's floor: %s", msg)
	}
}

// TestResumeRefusalNamesWhatMatters: a resume refused for a changed
// computation lists only the keys to restore (not the run length or
// [runtime], which a resume may change), says the samples-per-step
// arithmetic when that is what changed, and points at model.init_weights
// for going on from the weights under the new configuration; the same
// samples per step split otherwise resumes.
func TestResumeRefusalNamesWhatMatters(t *testing.T) {
	art := mlpArtifacts(t)
	dir, err := run(t, testConfig(t, art, "trainer.max_steps=4", "trainer.val_check_interval=1000"), "", "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	ck := filepath.Join(dir, "checkpoints", "last")
	for _, tc := range []struct {
		sets      []string
		want, not []string
	}{
		{[]string{`trainer.precision="bf16-mixed"`}, []string{"restore trainer.precision;", "model.init_weights"}, []string{"volatile", "max_steps", "use_tf32"}},
		{[]string{"data.batch_size=4"}, []string{"from 16 (1 rank × 8 × 2 accumulated) to 8 (1 rank × 4 × 2 accumulated)", "model.init_weights"}, []string{"volatile", "restore"}},
		{[]string{"data.batch_size=4", "trainer.devices=3", "optimizer.lr=0.5"}, []string{"from 16 (1 rank × 8 × 2 accumulated) to 24 (3 ranks × 4 × 2 accumulated)", "restore optimizer.lr;"}, []string{"volatile", "trainer.devices,"}},
		{[]string{"data.batch_size=4", "trainer.devices=2"}, nil, nil},
	} {
		err := CheckResume(testConfig(t, art, append([]string{"trainer.max_steps=6"}, tc.sets...)...), ck)
		if (err == nil) != (tc.want == nil) {
			t.Errorf("%v: %v", tc.sets, err)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; want %q", tc.sets, err, w)
			}
		}
		for _, w := range tc.not {
			if strings.Contains(err.Error(), w) {
				t.Errorf("%v: %v; names %q", tc.sets, err, w)
			}
		}
	}
}

// TestNonFiniteWeights: finite loss and gradients, but an update that
// overflows the weights (lr 1e30 with weight decay 1e10): without
// skip_nonfinite the run stops at step 1 saying the weights would not be
// finite; with it, every step is skipped and the run stops once it has
// skipped all it had. No checkpoint ever holds a non-finite weight.
func TestNonFiniteWeights(t *testing.T) {
	orttest.Init(t)
	dir, err := mkdirTemp()
	if err != nil {
		t.Fatal(err)
	}
	art := filepath.Join(dir, "mlp-decay")
	oc := optim.Config{Kind: optim.AdamW, WeightDecay: 1e10}.Defaults()
	oc.WeightDecay = 1e10
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 2))), Out: art, Loss: "cross_entropy", Optimizer: oc}); err != nil {
		t.Fatal(err)
	}
	for _, skip := range []string{"false", "true"} {
		c := testConfig(t, art, "optimizer.lr=1e30", "scheduler.warmup_steps=0", "trainer.max_steps=6", "trainer.checkpoint_every_n_steps=1", "trainer.skip_nonfinite="+skip)
		rec := &recorder{}
		runDir, err := run(t, c, "", "", rec)
		var nf *NonFiniteError
		if !errors.As(err, &nf) || !nf.Weights {
			t.Fatalf("skip_nonfinite=%s: err = %v, want a NonFiniteError about the weights", skip, err)
		}
		if skip == "false" && nf.Step != 1 || skip == "true" && (nf.InARow != 6 || len(rec.results) != 5) {
			t.Errorf("skip_nonfinite=%s: %v after %d steps", skip, err, len(rec.results))
		}
		if ck, err := checkpoint.Latest(filepath.Join(runDir, "checkpoints")); err == nil {
			loaded, err := checkpoint.Load(ck)
			if err != nil {
				t.Fatal(err)
			}
			for _, info := range loaded.Tensors.Tensors() {
				raw, _ := loaded.Tensors.Read(info.Name)
				for _, v := range asFloat32(raw) {
					if !finite(float64(v)) {
						t.Fatalf("skip_nonfinite=%s: checkpoint %s holds non-finite %s", skip, ck, info.Name)
					}
				}
			}
			loaded.Close()
		}
		t.Logf("skip_nonfinite=%s: %v", skip, err)
	}
}

// TestMonitorMustExist: a monitor validation never reports, or any
// monitor without validation data, is refused naming trainer.monitor:
// top-k would otherwise keep the newest checkpoints, silently.
func TestMonitorMustExist(t *testing.T) {
	art := mlpArtifacts(t)
	for _, c := range []struct {
		monitor string
		val     bool
	}{{"val/psnr", true}, {"val/loss", false}} {
		cfg := testConfig(t, art, `trainer.monitor="`+c.monitor+`"`)
		rd, err := rundir.New(filepath.Join(t.TempDir(), "outputs"), cfg.Name)
		if err != nil {
			t.Fatal(err)
		}
		opts, _ := cfg.SessionOptions(false)
		o := Options{Config: cfg, Artifacts: art, Session: opts, Train: newBlobs(96, 1), Dir: rd}
		if c.val {
			o.Val = newBlobs(40, 2)
		}
		tr, err := New(o)
		var ce *config.Error
		if !errors.As(err, &ce) || ce.Key != "trainer.monitor" {
			t.Errorf("monitor %q, validation %v: %v, want a refusal naming trainer.monitor", c.monitor, c.val, err)
		}
		if tr != nil {
			tr.Close()
		}
		rd.Close()
	}
}

// TestValidationTopK: a classifier's validation reports val/top1 (and not
// val/top5 with 3 classes), which learns along with val/loss and ranks
// checkpoints as trainer.monitor with mode max.
func TestValidationTopK(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), `trainer.monitor="val/top1"`, `trainer.mode="max"`, "trainer.max_steps=30")
	rec := &recorder{}
	if _, err := run(t, c, "", "", rec); err != nil {
		t.Fatal(err)
	}
	if len(rec.valMetrics) == 0 {
		t.Fatal("no validation")
	}
	first, last := rec.valMetrics[0], rec.valMetrics[len(rec.valMetrics)-1]
	top1, ok := last["val/top1"]
	if !ok || top1 < 0 || top1 > 1 {
		t.Fatalf("validation metrics %v, want val/top1 in [0, 1]", last)
	}
	if _, ok := last["val/top5"]; ok {
		t.Errorf("val/top5 reported for 3 classes: %v", last)
	}
	if !(top1 > first["val/top1"]) && first["val/top1"] < 0.95 {
		t.Errorf("val/top1 %g -> %g: did not improve", first["val/top1"], top1)
	}
	t.Logf("val/top1 %.3f -> %.3f", first["val/top1"], top1)
}

// TestVQValidationMetrics: the vqgan3d recipe's validation reports PSNR
// and SSIM of the reconstruction and the codebook's usage (of
// codebook_size) and perplexity, and val/psnr ranks checkpoints.
func TestVQValidationMetrics(t *testing.T) {
	orttest.Init(t)
	c, err := config.Parse([]byte(`name = "vq"
output_dir = "`+t.TempDir()+`"
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [16, 16, 16]
channels = 4
channel_mult = [1, 2]
res_blocks = 1
z_channels = 4
embed_dim = 4
codebook_size = 16
groups = 2
[data]
kind = "synthetic"
batch_size = 2
num_workers = 0
[trainer]
device = "cpu"
max_steps = 2
val_check_interval = 2
monitor = "val/psnr"
mode = "max"
`), "vq.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	art, m, err := setup.Artifacts(c, t.TempDir(), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	train, val, err := setup.Datasets(c, m)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := rundir.New(c.OutputDir, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	opts, _ := c.SessionOptions(false)
	rec := &recorder{}
	tr, err := New(Options{Config: c, Artifacts: art, Session: opts, Train: train, Val: val, Dir: rd, Callbacks: []callback.Callback{rec}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	if err := tr.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.valMetrics) == 0 {
		t.Fatal("no validation")
	}
	vm := rec.valMetrics[len(rec.valMetrics)-1]
	psnr, ssim, usage, ppl := vm["val/psnr"], vm["val/ssim"], vm["val/codebook_usage"], vm["val/codebook_perplexity"]
	if !(psnr > 0 && psnr < 100) || !(ssim > -1 && ssim <= 1) || !(usage > 0 && usage <= 1) || !(ppl >= 1 && ppl <= 16) {
		t.Errorf("validation metrics %v: want PSNR in dB, SSIM in (-1, 1], usage in (0, 1], perplexity in [1, 16]", vm)
	}
	// `ortrain eval` of the checkpoint taken after that validation reports
	// the same metrics on the same patches.
	res, err := eval.EvaluateCheckpoint(t.Context(), eval.CheckpointOptions{Checkpoint: filepath.Join(rd.Path, "checkpoints", "last")})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"val/loss", "val/psnr", "val/ssim", "val/codebook_usage", "val/codebook_perplexity"} {
		if a, b := vm[name], res.Mean[name]; math.Abs(a-b) > 1e-9*math.Abs(a) {
			t.Errorf("%s: %v at validation, %v from eval of the checkpoint", name, a, b)
		}
	}
}

// TestGANTrainsFromStartStep: the vqgan3d recipe with both discriminators
// and discriminator_iter_start 3 logs g_loss, d_loss, d_real and d_fake
// every step (the adversarial losses zero before step 3, not after), its
// validation loss is the autoencoder's alone, and a run interrupted at
// step 2 and resumed repeats the uninterrupted run bit for bit across the
// start step (the step the graph reads comes back with the checkpoint).
func TestGANTrainsFromStartStep(t *testing.T) {
	c, m, train := ganConfig(t, `image_gan_weight = 1.0
video_gan_weight = 0.5
gan_feat_weight = 4.0
disc_channels = 4
disc_layers = 2
discriminator_iter_start = 3`)
	if m.StepInput != graph.GlobalStepInput {
		t.Fatalf("manifest step input %q, want %q", m.StepInput, graph.GlobalStepInput)
	}
	eval, err := graph.Load(filepath.Join(c.Model.Artifacts, artifacts.EvalFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range eval.Nodes {
		for _, in := range n.Inputs {
			if strings.Contains(in, "discriminator") || in == graph.GlobalStepInput {
				t.Fatalf("eval graph node %s reads %s: validation must not run the discriminators", n.Name, in)
			}
		}
	}
	full := &recorder{}
	fullDir, err := run(t, c, "", "", full, train)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range full.results {
		terms := map[string]float64{}
		for k, name := range r.TermNames {
			terms[name] = r.Terms[k]
		}
		for _, name := range []string{"g_loss", "d_loss", "d_real", "d_fake", "gan_feat_loss", "rec_loss", "commit_loss"} {
			if _, ok := terms[name]; !ok {
				t.Fatalf("step %d logs %v, no %s", i+1, r.TermNames, name)
			}
		}
		on := i+1 > 3 // global step i ≥ 3 from the fourth step on
		for _, name := range []string{"g_loss", "d_loss", "gan_feat_loss"} {
			if (terms[name] != 0) != on {
				t.Errorf("step %d: %s = %g, want it zero before the start step and not after", i+1, name, terms[name])
			}
		}
		if terms["d_real"] == 0 || terms["d_fake"] == 0 {
			t.Errorf("step %d: d_real %g, d_fake %g: the discriminators' logits are logged from the first step", i+1, terms["d_real"], terms["d_fake"])
		}
	}
	part := &recorder{stopAt: 2}
	dir, err := run(t, c, "", "", part, train)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	rest := &recorder{}
	if _, err := run(t, c, dir, ck, rest, train); err != nil {
		t.Fatal(err)
	}
	got := append(part.results, rest.results...)
	if len(got) != len(full.results) {
		t.Fatalf("interrupted + resumed = %d steps, uninterrupted %d", len(got), len(full.results))
	}
	for i := range got {
		if a, b := full.results[i], got[i]; math.Float64bits(a.Loss) != math.Float64bits(b.Loss) || !slices.Equal(a.Terms, b.Terms) {
			t.Errorf("step %d: loss %v terms %v, uninterrupted %v %v", i+1, b.Loss, b.Terms, a.Loss, a.Terms)
		}
	}
	equalTensors(t, filepath.Join(fullDir, "checkpoints", "last"), filepath.Join(dir, "checkpoints", "last"))
}

// ganConfig is a tiny vqgan3d run on synthetic volumes, 5 steps, with
// extra [model.params] lines, its artifacts built, and its training set.
func ganConfig(t *testing.T, params string) (*config.Config, *artifacts.Manifest, data.Dataset) {
	orttest.Init(t)
	c, err := config.Parse([]byte(`name = "gan"
output_dir = "`+t.TempDir()+`"
[model]
recipe = "vqgan3d"
[model.params]
patch_size = [8, 8, 8]
channels = 4
channel_mult = [1, 2]
res_blocks = 1
z_channels = 4
embed_dim = 4
codebook_size = 16
groups = 2
`+params+`
[data]
kind = "synthetic"
batch_size = 2
num_workers = 0
[trainer]
device = "cpu"
max_steps = 5
val_check_interval = 1000
[optimizer]
weight_decay = 0.0
`), "gan.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	art, m, err := setup.Artifacts(c, t.TempDir(), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c.Model.Artifacts = art
	train, _, err := setup.Datasets(c, m)
	if err != nil {
		t.Fatal(err)
	}
	return c, m, train
}

// TestResumeTurnsGANOn: the anchors' second stage. A checkpoint of an
// L1-only run resumed under a configuration that turns the discriminators
// on (and changes nothing else) continues the step count and data order
// with the autoencoder and its optimizer state as saved and the
// discriminators at their initial values; a resume that also changes
// another parameter is refused before anything is written.
func TestResumeTurnsGANOn(t *testing.T) {
	l1, _, train := ganConfig(t, "")
	part := &recorder{stopAt: 2}
	dir, err := run(t, l1, "", "", part, train)
	if err != nil {
		t.Fatal(err)
	}
	ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatal(err)
	}
	gan, m, _ := ganConfig(t, "image_gan_weight = 1.0\nvideo_gan_weight = 0.5\ndisc_channels = 4\ndisc_layers = 2\ndiscriminator_iter_start = 3")
	if err := CheckResume(gan, ck); err != nil {
		t.Fatalf("turning the discriminators on is refused: %v", err)
	}
	other, _, _ := ganConfig(t, "beta = 0.5\nimage_gan_weight = 1.0")
	if err := CheckResume(other, ck); err == nil || !strings.Contains(err.Error(), "model.params.beta") {
		t.Errorf("resume that also changes beta: err = %v, want a refusal naming model.params.beta", err)
	}
	rest := &recorder{}
	if _, err := run(t, gan, dir, ck, rest, train); err != nil {
		t.Fatal(err)
	}
	if len(rest.results) != 3 {
		t.Fatalf("resumed run did %d steps, want 3 (steps 3 to 5)", len(rest.results))
	}
	// Before their start step the discriminators get zero gradients and,
	// without weight decay, do not move: a run with them on from the
	// start takes the same steps as the L1 stage and its resume.
	whole := &recorder{}
	if _, err := run(t, gan, "", "", whole, train); err != nil {
		t.Fatal(err)
	}
	for i, r := range append(part.results, rest.results...) {
		if a := whole.results[i].Loss; math.Abs(a-r.Loss) > 1e-6*math.Abs(a) {
			t.Errorf("step %d: loss %v after the L1 stage and the resume, %v with the discriminators from the start", i+1, r.Loss, a)
		}
	}
	final, err := checkpoint.Load(filepath.Join(dir, "checkpoints", "last"))
	if err != nil {
		t.Fatal(err)
	}
	defer final.Close()
	if final.State.Step != 5 {
		t.Errorf("last checkpoint at step %d, want 5", final.State.Step)
	}
	for _, p := range m.Params {
		if _, ok := final.Tensors.Info(p.Name); !ok {
			t.Errorf("last checkpoint lacks %s", p.Name)
		}
	}
}

// badSample fails to load one sample, as a corrupt file would.
type badSample struct {
	*blobs
	bad int
}

func (b badSample) Load(i int, rng *rand.Rand, dst data.Sample) error {
	if i == b.bad {
		return fmt.Errorf("/data/train/sample-%d.jpg: not a JPEG", i)
	}
	return b.blobs.Load(i, rng, dst)
}

// TestBadTrainingData: a sample that cannot be loaded stops the run with a
// DataError naming the file (exit 2), and the steps done before it are
// checkpointed, at the data position where the failed step began.
func TestBadTrainingData(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.checkpoint_every_n_steps=0", "data.shuffle=false", "data.num_workers=1")
	rec := &recorder{}
	// 16 samples per step (2 × 8, in order): sample 40 falls in step 3.
	dir, err := run(t, c, "", "", rec, badSample{newBlobs(96, 1), 40})
	var de *DataError
	if !errors.As(err, &de) || !strings.Contains(err.Error(), "/data/train/sample-40.jpg") {
		t.Fatalf("err = %v, want a DataError naming the file", err)
	}
	var bi interface{ BadInput() bool }
	if !errors.As(err, &bi) || !bi.BadInput() {
		t.Errorf("a bad file is not bad input: %v", err)
	}
	ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatalf("no checkpoint of the steps done: %v", err)
	}
	st, err := checkpoint.ReadState(ck)
	if err != nil {
		t.Fatal(err)
	}
	if st.Step != 2 {
		t.Errorf("checkpoint at step %d, want 2 (the steps done)", st.Step)
	}
	if rec.stopReason != "stopped on bad training data; checkpoint written" {
		t.Errorf("stop reason %q", rec.stopReason)
	}
	var cur data.Cursor
	if err := json.Unmarshal(st.Loader, &cur); err != nil || cur.Position != 4 {
		t.Errorf("checkpoint's data position %+v (%v), want batch 4: step 3 begins there", cur, err)
	}
}

// TestBadDataAtTheFirstStep: bad data in the first step stops the run
// with no step done, so nothing is saved, and the stop reason says so
// (it said "checkpoint written" over an empty checkpoints folder).
func TestBadDataAtTheFirstStep(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.checkpoint_every_n_steps=0", "data.shuffle=false", "data.num_workers=1")
	rec := &recorder{}
	dir, err := run(t, c, "", "", rec, badSample{newBlobs(96, 1), 3})
	var de *DataError
	if !errors.As(err, &de) {
		t.Fatalf("err = %v, want a DataError", err)
	}
	if ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints")); err == nil {
		t.Errorf("a checkpoint %s of no step", ck)
	}
	if want := "stopped on bad training data; no checkpoint written: no step was taken"; rec.stopReason != want {
		t.Errorf("stop reason %q, want %q", rec.stopReason, want)
	}
}

// TestBadValidationData: a validation sample that cannot be loaded stops
// the run as bad training data does, with the steps done checkpointed and
// resumable after the step that validated; with data.skip_bad_files it is
// counted as val/skipped_samples.
func TestBadValidationData(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.checkpoint_every_n_steps=0", "data.shuffle=false", "trainer.val_check_interval=3", "trainer.max_steps=6")
	rec := &recorder{}
	dir, err := run(t, c, "", "", rec, newBlobs(96, 1), badSample{newBlobs(40, 2), 20})
	var de *DataError
	var bi interface{ BadInput() bool }
	if !errors.As(err, &de) || !de.Validation || !strings.HasPrefix(err.Error(), "validation data: /data/train/sample-20.jpg") || !errors.As(err, &bi) || !bi.BadInput() {
		t.Fatalf("err = %v, want bad validation data naming the file", err)
	}
	ck, err := checkpoint.Latest(filepath.Join(dir, "checkpoints"))
	if err != nil {
		t.Fatalf("no checkpoint of the steps done: %v", err)
	}
	st, err := checkpoint.ReadState(ck)
	if err != nil {
		t.Fatal(err)
	}
	var cur data.Cursor
	if err := json.Unmarshal(st.Loader, &cur); err != nil || st.Step != 3 || cur.Position != 6 {
		t.Errorf("checkpoint at step %d, data position %+v (%v); want step 3 at batch 6", st.Step, cur, err)
	}

	c = testConfig(t, mlpArtifacts(t), "data.skip_bad_files=true", "data.shuffle=false", "trainer.val_check_interval=3", "trainer.max_steps=6")
	rec = &recorder{}
	if _, err := run(t, c, "", "", rec, newBlobs(96, 1), badSample{newBlobs(40, 2), 20}); err != nil {
		t.Fatal(err)
	}
	if len(rec.valMetrics) != 2 || rec.valMetrics[1]["val/skipped_samples"] != 1 {
		t.Errorf("validations %v; want two, each with val/skipped_samples 1", rec.valMetrics)
	}

	// The last batch all bad files: dropped whole, counted, and validation
	// ends with the set rather than going on into its next pass.
	rec = &recorder{}
	if _, err := run(t, c, "", "", rec, newBlobs(96, 1), badRange{newBlobs(40, 2), 32, 40}); err != nil {
		t.Fatal(err)
	}
	first32 := &recorder{}
	if _, err := run(t, c, "", "", first32, newBlobs(96, 1), firstN{newBlobs(40, 2), 32}); err != nil {
		t.Fatal(err)
	}
	if len(rec.valMetrics) != 2 || rec.valMetrics[1]["val/skipped_samples"] != 8 || rec.valMetrics[1]["val/loss"] != first32.valMetrics[1]["val/loss"] {
		t.Errorf("validations %v; want val/skipped_samples 8 and the val/loss of the first 32 samples, %v", rec.valMetrics, first32.valMetrics[1]["val/loss"])
	}
}

// badRange fails to load samples lo to hi-1.
type badRange struct {
	*blobs
	lo, hi int
}

func (b badRange) Load(i int, rng *rand.Rand, dst data.Sample) error {
	if i >= b.lo && i < b.hi {
		return fmt.Errorf("/data/val/sample-%d.jpg: not a JPEG", i)
	}
	return b.blobs.Load(i, rng, dst)
}

// firstN is the first n samples of a dataset.
type firstN struct {
	*blobs
	n int
}

func (f firstN) Len() int { return f.n }

// TestSkipBadFiles: with data.skip_bad_files the run goes on past a
// sample that cannot be loaded, and counts it.
func TestSkipBadFiles(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "data.skip_bad_files=true", "data.shuffle=false", "trainer.max_steps=6")
	rec := &recorder{}
	if _, err := run(t, c, "", "", rec, badSample{newBlobs(96, 1), 40}); err != nil {
		t.Fatal(err)
	}
	last := rec.results[len(rec.results)-1]
	if len(rec.results) != 6 || last.Metrics["data/skipped_samples"] != 1 {
		t.Errorf("%d steps, skipped %v; want 6 and 1", len(rec.results), last.Metrics["data/skipped_samples"])
	}
}

// TestResumePastTheSchedule: a resume that trains past the end of the
// schedule the run began with says so, with the LR those steps get.
func TestResumePastTheSchedule(t *testing.T) {
	art := mlpArtifacts(t)
	c := testConfig(t, art, "trainer.max_steps=4", "scheduler.min_lr=0.0001")
	dir, err := run(t, c, "", "", &recorder{})
	if err != nil {
		t.Fatal(err)
	}
	rd, err := rundir.Resume(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	longer := testConfig(t, art, "trainer.max_steps=6", "scheduler.min_lr=0.0001")
	opts, err := longer.SessionOptions(false)
	if err != nil {
		t.Fatal(err)
	}
	log, err := os.Create(filepath.Join(t.TempDir(), "log"))
	if err != nil {
		t.Fatal(err)
	}
	defer log.Close()
	tr, err := New(Options{Config: longer, Artifacts: art, Session: opts, Train: newBlobs(96, 1), Val: newBlobs(40, 2), Dir: rd,
		Resume: filepath.Join(dir, "checkpoints", "last"), Progress: log})
	if err != nil {
		t.Fatal(err)
	}
	tr.Close()
	var ce *config.Error
	if err := CheckResume(c, filepath.Join(dir, "checkpoints", "last")); !errors.As(err, &ce) || ce.Key != "trainer.max_steps" {
		t.Errorf("resume of a run at step 4 with max_steps 4: %v; want a refusal naming trainer.max_steps", err)
	}
	said, _ := os.ReadFile(log.Name())
	if want := "cosine over 4 steps: steps 5 to 6 train at its final LR, 0.0001"; !strings.Contains(string(said), want) {
		t.Errorf("resume log %q; want it to say %q", said, want)
	}
}

// TestEpochOfAStep: a step is logged with the epoch its samples came from,
// the last step of an epoch included (the loader has moved on by then).
func TestEpochOfAStep(t *testing.T) {
	// 96 samples, 2 × 8 per step: 6 steps an epoch.
	c := testConfig(t, mlpArtifacts(t), "trainer.max_steps=12", "trainer.checkpoint_every_n_steps=0")
	var epochs []int64
	rec := &recorder{onStep: func(s *callback.State) { epochs = append(epochs, s.Epoch) }}
	if _, err := run(t, c, "", "", rec); err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1}
	if !slices.Equal(epochs, want) {
		t.Errorf("epochs by step %v, want %v", epochs, want)
	}
}

// TestValidationShardsCountEachSampleOnce: with a validation set that
// does not divide over the ranks, each rank's loader pads its shard (as
// DistributedSampler does) and the rank drops that repeated sample from
// its last batch before summing, so that over the ranks every sample
// counts exactly once, whatever the world size and batch size.
func TestValidationShardsCountEachSampleOnce(t *testing.T) {
	for _, n := range []int{1, 4, 7, 11, 12} {
		for world := 1; world <= 5; world++ {
			for _, bs := range []int{1, 2, 3} {
				seen := make([]int, n)
				for rank := range world {
					l, err := data.New(newBlobs(n, 1), data.Config{BatchSize: bs, Workers: 1, Prefetch: 1, MaxBytes: 1 << 30, Rank: rank, WorldSize: world})
					if err != nil {
						t.Fatal(err)
					}
					pad := paddedIndex(n, rank, world)
					for k := range l.BatchesPerEpoch() {
						b, err := l.Next()
						if err != nil {
							t.Fatal(err)
						}
						if pad >= 0 && k == l.BatchesPerEpoch()-1 && dropLastRow(b, pad) {
							continue
						}
						for _, x := range b.Tensors {
							per := 1
							for _, d := range x.Shape[1:] {
								per *= d
							}
							if x.Shape[0] != len(b.Indices) || x.Len() != len(b.Indices)*per {
								t.Errorf("n %d world %d: tensor %s%v holds %d values for %d rows", n, world, x.Name, x.Shape, x.Len(), len(b.Indices))
							}
						}
						for _, i := range b.Indices {
							seen[i]++
						}
					}
					l.Close()
				}
				for i, c := range seen {
					if c != 1 {
						t.Errorf("%d samples over %d ranks in batches of %d: sample %d counted %d times", n, world, bs, i, c)
					}
				}
			}
		}
	}
}

// TestUnevenShardsSaid: the line a data-parallel run prints at start when
// its sets do not divide over the ranks.
func TestUnevenShardsSaid(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t))
	for _, tc := range []struct {
		train, val, world int
		shards            bool
		want              string
	}{
		{12, 4, 2, true, ""},
		{11, 4, 2, true, "11 training samples over 2 ranks: 1 repeated each epoch"},
		{12, 4, 3, true, "4 validation samples over 3 ranks: 2 ranks validate one repeated sample each, left out of the metrics"},
		{12, 4, 3, false, ""},
		{12, 4, 64, true, "12 training samples over 64 ranks: 52 repeated each epoch"},
	} {
		got := unevenShards(c, newBlobs(tc.train, 1), newBlobs(tc.val, 2), tc.world, tc.shards)
		if (tc.want == "") != (got == "") || !strings.Contains(got, tc.want) {
			t.Errorf("%d/%d samples over %d ranks: %q, want %q", tc.train, tc.val, tc.world, got, tc.want)
		}
	}
}

// diskFull fails from step failAt on with ENOSPC, as a logger on a full
// disk does, and again when closed at the end.
type diskFull struct{ failAt int64 }

var errDiskFull = &os.PathError{Op: "write", Path: "events.out.tfevents.x", Err: syscall.ENOSPC}

func (d *diskFull) OnTrainStart(*callback.State) error { return nil }
func (d *diskFull) OnStepEnd(s *callback.State, _ callback.StepResult) error {
	if s.Step >= d.failAt {
		return errDiskFull
	}
	return nil
}
func (d *diskFull) OnValidationEnd(*callback.State, map[string]float64) error { return nil }
func (d *diskFull) OnTrainEnd(*callback.State) error                          { return errDiskFull }

// TestDiskFullNamesResumePoint: a run stopped by a full disk says so once
// (not again for the logger's close), and names the newest whole
// checkpoint to --resume from.
func TestDiskFullNamesResumePoint(t *testing.T) {
	c := testConfig(t, mlpArtifacts(t), "trainer.max_steps=40", "trainer.checkpoint_every_n_steps=4")
	tr, rd := build(t, c, "", "", []callback.Callback{&diskFull{failAt: 7}})
	err := tr.Run(context.Background())
	want, _ := checkpoint.Latest(filepath.Join(rd.Path, "checkpoints"))
	if err == nil || strings.Count(err.Error(), "no space left on device") != 1 || !strings.HasSuffix(err.Error(), "--resume "+want+")") {
		t.Errorf("a full disk at step 7: %v; want it said once, naming %s", err, want)
	}
	if st, err := checkpoint.ReadState(want); err != nil || st.Step >= 7 {
		t.Errorf("the checkpoint named: step %d, %v; want one before step 7", st.Step, err)
	}
}
