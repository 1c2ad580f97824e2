package trainer

import (
	"math"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/callback"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/rundir"
	"github.com/ortrain/ortrain/training/setup"
)

// hdpConfig is the hdp-diffusion-gsm8k preset shrunk to a CPU-sized model
// (64 tokens in segments 16 + 16 + 32) on the GSM8K file train, with sets
// on top.
func hdpConfig(t *testing.T, train string, set ...string) *config.Config {
	c, err := configs.Load("hdp-diffusion-gsm8k")
	if err != nil {
		t.Fatal(err)
	}
	err = c.Override(append([]string{
		`data.train="` + train + `"`, `output_dir="` + t.TempDir() + `"`,
		"trainer.device=cpu", "trainer.precision=32", "trainer.max_steps=4", "trainer.accumulate_grad_batches=1",
		"trainer.val_check_interval=2", `trainer.monitor=""`, `trainer.mode=""`, "scheduler.warmup_steps=1",
		"data.batch_size=4", "data.num_workers=1",
		"model.params.hidden=32", "model.params.layers=1", "model.params.heads=2",
		"model.params.seq_len=64", "model.params.blocks=[16,16,32]",
		"data.tokens.seq_len=64", "data.tokens.segments=[16,16,32]",
	}, set...)...)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	return c
}

// TestHDPPresetTrains: the hdp-diffusion-gsm8k preset, shrunk, trains on a
// GSM8K JSONL end to end: trainer.Datasets lays the examples out in the
// question/plan/execution segments of data.tokens.segments (segment ids
// 0, 1, 2 over 16, 16 and 32 positions, with the noised copy the model
// reads), and four steps run with a finite, positive loss.
func TestHDPPresetTrains(t *testing.T) {
	orttest.Init(t)
	train := filepath.Join(t.TempDir(), "train.jsonl")
	if err := synthetic.WriteGSM8K(train, 32, 1); err != nil {
		t.Fatal(err)
	}
	c := hdpConfig(t, train)
	rec := &recorder{}
	tr := buildFromConfig(t, c, rec)
	if err := tr.Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.results) != 4 {
		t.Fatalf("%d steps, want 4", len(rec.results))
	}
	for i, r := range rec.results {
		if !(r.Loss > 0) || math.IsInf(r.Loss, 0) || r.Skipped {
			t.Errorf("step %d: loss %g, skipped %v; want finite and positive", i+1, r.Loss, r.Skipped)
		}
		// Tokens counts the real ones: GSM8K examples do not fill 64
		// positions, and the padding is not throughput.
		if r.Tokens <= 0 || r.Tokens >= r.Samples*64 || r.Positions != r.Samples*64 {
			t.Errorf("step %d: %d tokens and %d positions for %d samples of 64 positions; want the non-padding count and all positions", i+1, r.Tokens, r.Positions, r.Samples)
		}
	}
}

// TestLMValidationPerplexity: a language model's validation reports the
// NLL per predicted token and its perplexity, exp(NLL), beside val/loss.
func TestLMValidationPerplexity(t *testing.T) {
	orttest.Init(t)
	train := filepath.Join(t.TempDir(), "train.jsonl")
	if err := synthetic.WriteGSM8K(train, 32, 1); err != nil {
		t.Fatal(err)
	}
	c := hdpConfig(t, train, `data.val="`+train+`"`, "trainer.limit_val_batches=2")
	rec := &recorder{}
	if err := buildFromConfig(t, c, rec).Run(t.Context()); err != nil {
		t.Fatal(err)
	}
	if len(rec.valMetrics) == 0 {
		t.Fatal("no validation")
	}
	m := rec.valMetrics[len(rec.valMetrics)-1]
	nll, ppl := m["val/nll"], m["val/ppl"]
	if !(nll > 0) || math.Abs(ppl-math.Exp(nll)) > 1e-9*ppl || math.Abs(m["val/bpt"]-nll/math.Ln2) > 1e-12 {
		t.Errorf("validation metrics %v: want val/nll > 0, val/ppl = exp(val/nll) and val/bpt = val/nll / ln 2", m)
	}
	t.Logf("val/nll %.3f, val/ppl %.1f", nll, ppl)
}

// buildFromConfig builds c's artifacts from its recipe and its datasets
// the way `ortrain train` does, checks the HDP layout of the training set,
// and makes a trainer with rec in a new run directory.
func buildFromConfig(t *testing.T, c *config.Config, rec *recorder) *Trainer {
	t.Helper()
	dir := t.TempDir()
	art, m, err := setup.Artifacts(c, dir, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	train, val, err := setup.Datasets(c, m)
	if err != nil {
		t.Fatal(err)
	}
	if (val != nil) != (c.Data.Val != "") {
		t.Errorf("validation set %v with data.val = %q", val != nil, c.Data.Val)
	}
	var names []string
	for _, s := range train.Spec() {
		names = append(names, s.Name)
	}
	for _, want := range []string{"input_ids", "noisy_ids", "t", "loss_mask", "segment_ids"} {
		if !slices.Contains(names, want) {
			t.Fatalf("training set tensors %v lack %s", names, want)
		}
	}
	sample := make(data.Sample, len(train.Spec()))
	for i, s := range train.Spec() {
		sample[i] = data.Tensor{Name: s.Name, DType: s.DType, Shape: s.Shape}
		switch s.DType {
		case data.Int64:
			sample[i].I64 = make([]int64, 64)
		case data.Float32:
			sample[i].F32 = make([]float32, 64)
		case data.Uint8:
			sample[i].U8 = make([]uint8, 64)
		}
	}
	if err := train.Load(0, rand.New(rand.NewPCG(1, 2)), sample); err != nil {
		t.Fatal(err)
	}
	seg := sample.Get("segment_ids").I64
	for pos, id := range seg {
		want := int64(0)
		switch {
		case pos >= 32:
			want = 2
		case pos >= 16:
			want = 1
		}
		if id != want {
			t.Fatalf("segment_ids %v: position %d is %d, want 16 × 0, 16 × 1, 32 × 2", seg, pos, id)
		}
	}
	opts, err := c.SessionOptions(false)
	if err != nil {
		t.Fatal(err)
	}
	rd, err := rundir.New(c.OutputDir, c.Name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rd.Close() })
	tr, err := New(Options{Config: c, Artifacts: art, Session: opts, Train: train, Val: val, Dir: rd, Callbacks: []callback.Callback{rec}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tr.Close() })
	return tr
}

// TestHDPSegmentsMustMatchBlocks: data segments that differ from the
// model's blocks are refused naming data.tokens.segments, before any data
// is read: the attention mask follows the blocks.
func TestHDPSegmentsMustMatchBlocks(t *testing.T) {
	train := filepath.Join(t.TempDir(), "train.jsonl")
	if err := synthetic.WriteGSM8K(train, 4, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		set  []string
	}{
		{"other lengths", []string{"data.tokens.segments=[32,16,16]"}},
		{"blocks without segments", []string{"data.tokens.segments=[]", "data.tokens.block_size=16"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := hdpConfig(t, train, tc.set...)
			_, _, err := setup.Datasets(c, &artifacts.Manifest{})
			if err == nil || !strings.Contains(err.Error(), "data.tokens.segments") || !strings.Contains(err.Error(), "model.params.blocks") {
				t.Fatalf("err = %v, want one naming data.tokens.segments and model.params.blocks", err)
			}
		})
	}
}
