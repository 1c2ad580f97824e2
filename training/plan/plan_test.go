package plan

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/data/synthetic"
	"github.com/ortrain/ortrain/training/setup"
)

// preset loads a preset with overrides and resolves it the plan's way.
func preset(t *testing.T, name string, set ...string) (*config.Config, bool) {
	t.Helper()
	c, err := configs.Load(name)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Override(set...); err != nil {
		t.Fatal(err)
	}
	missing, err := Resolve(c)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c, missing
}

// TestPresets plans every preset without its data: the plan is made,
// the parameter count is the recipe's, the training state is 8 (AdamW) or
// 6 (SGD with momentum) × 4 bytes per parameter, one more with
// accumulated micro-batches, the effective batch and
// peak LR are the config's, and a preset without data says to pass
// data.train instead of failing. The text names the run directory.
func TestPresets(t *testing.T) {
	for _, name := range configs.Names() {
		t.Run(name, func(t *testing.T) {
			sets := []string{`output_dir="` + t.TempDir() + `"`}
			c, missing := preset(t, name, sets...)
			p, err := Make(c)
			if err != nil {
				t.Fatal(err)
			}
			n, err := models.Check(c.Model.Recipe, c.Model.Params)
			if err != nil || p.Model.Params != n {
				t.Errorf("params %d, recipe says %d (%v)", p.Model.Params, n, err)
			}
			copies := map[string]int{"adamw": 8, "sgd": 6}[c.Optimizer.Name]
			if c.Trainer.AccumulateGradBatches > 1 {
				copies++ // the scratch a later micro-batch's gradients go to
			}
			if p.Model.StateBytes != int64(copies)*4*n {
				t.Errorf("state %d bytes, want %d × 4 × %d", p.Model.StateBytes, copies, n)
			}
			w := c.Trainer.WorldSize() // 4 for vqgan3d-4gpu
			if p.Batch.Effective != c.EffectiveBatchSize(w) || p.LR.Peak != c.PeakLR(w) || p.Batch.WorldSize != w {
				t.Errorf("batch %d over %d devices, peak lr %g; want %d over %d, %g", p.Batch.Effective, p.Batch.WorldSize, p.LR.Peak, c.EffectiveBatchSize(w), w, c.PeakLR(w))
			}
			// The quickstart names its data, which `ortrain quickstart` writes.
			wantMissing := c.Data.Kind != "synthetic" && name != "quickstart"
			if missing != wantMissing {
				t.Errorf("data.train missing = %v for kind %s", missing, c.Data.Kind)
			}
			if missing && !strings.Contains(p.Data.Unopened, "--set data.train=PATH") {
				t.Errorf("unopened %q does not say to pass data.train", p.Data.Unopened)
			}
			if name == "quickstart" && !strings.Contains(p.Data.Unopened, "does not exist") {
				t.Errorf("quickstart without its data: unopened %q, want the path named", p.Data.Unopened)
			}
			if (missing || name == "quickstart") && (!p.Loader.Known || !p.Loader.Estimated || p.Loader.BatchBytes == 0) {
				t.Errorf("loader plan %+v: want an estimate from the config", p.Loader)
			}
			var b bytes.Buffer
			if err := p.WriteText(&b); err != nil || !strings.Contains(b.String(), filepath.Join(c.Name, "version_0")) {
				t.Errorf("text (%v) lacks the run directory:\n%s", err, b.String())
			}
		})
	}
}

// TestResolveKeepsOtherErrors: only a missing data.train is forgiven; any
// other mistake is still a bad-input error naming its key.
func TestResolveKeepsOtherErrors(t *testing.T) {
	for _, tc := range []struct{ set, key string }{
		{"trainer.accumulate_grad_batches=0", "trainer.accumulate_grad_batches"},
		{"data.tokens.segments=[100,100,100]", "data.tokens.segments"},
		{"scheduler.warmup_steps=99999", "scheduler.warmup_steps"},
	} {
		c, err := configs.Load("hdp-diffusion-gsm8k")
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Override(tc.set); err != nil {
			t.Fatal(err)
		}
		_, err = Resolve(c)
		var bad interface{ BadInput() bool }
		if err == nil || !strings.Contains(err.Error(), tc.key) || strings.Contains(err.Error(), "data.train") || !errors.As(err, &bad) {
			t.Errorf("--set %s: err = %v, want a bad-input error naming only %s", tc.set, err, tc.key)
		}
	}
}

// TestWithData plans the HDP preset on a GSM8K file of 100 examples with
// 20 for validation (each drawn 4 times): the samples are counted, steps per epoch are
// ⌊100 / 8⌋ batches / 2 accumulated = 6, two epochs cut max_steps to 12,
// validation every 3 steps (val_check_interval 0.5), and the LR points are
// the schedule's at 0, end of warmup, middle and last step.
func TestWithData(t *testing.T) {
	dir := t.TempDir()
	train, val := filepath.Join(dir, "train.jsonl"), filepath.Join(dir, "val.jsonl")
	if err := synthetic.WriteGSM8K(train, 100, 1); err != nil {
		t.Fatal(err)
	}
	if err := synthetic.WriteGSM8K(val, 20, 2); err != nil {
		t.Fatal(err)
	}
	c, missing := preset(t, "hdp-diffusion-gsm8k", `data.train="`+train+`"`, `data.val="`+val+`"`, `output_dir="`+dir+`"`,
		"data.batch_size=8", "trainer.accumulate_grad_batches=2", "data.drop_last=true", "trainer.max_epochs=2", "trainer.max_steps=1000",
		"trainer.val_check_interval=0.5", "scheduler.warmup_steps=2")
	if missing {
		t.Fatal("data.train reported missing")
	}
	p, err := Make(c)
	if err != nil {
		t.Fatal(err)
	}
	if p.Data.Unopened != "" || p.Data.TrainSamples != 100 || p.Data.ValSamples != 20 || p.Data.ValDraws != 4 {
		t.Fatalf("data %+v: want 100 and 20 samples opened, the preset's 4 noise draws per validation sequence", p.Data)
	}
	s := p.Steps
	if s.PerEpoch != 6 || s.Total != 12 || s.ValEvery != 3 {
		t.Errorf("steps per epoch %d, total %d, validation every %d; want 6, 12, 3", s.PerEpoch, s.Total, s.ValEvery)
	}
	var steps []int64
	for _, pt := range p.LR.Points {
		steps = append(steps, pt.Step)
	}
	if !reflect.DeepEqual(steps, []int64{0, 2, 6, 11}) || p.LR.Points[0].LR != 0 || p.LR.Points[1].LR != p.LR.Peak || p.LR.Points[3].LR <= c.Scheduler.MinLR {
		t.Errorf("lr points %+v: want steps 0, 2, 6, 11 rising from 0 to the peak, then decaying", p.LR.Points)
	}
	// data.prefetch counts per worker (PyTorch's prefetch_factor): the
	// preset's 4 workers × (1 + 2) + 1 held by the trainer.
	if l := p.Loader; l.Workers != 4 || l.Prefetch != 2 || l.Buffers != 13 {
		t.Errorf("loader %+v: want 4 workers, prefetch 2 per worker, 13 batch buffers", l)
	}
	// The loader also counts each batch's index slice: a few bytes a row.
	if l := p.Loader; l.Estimated || l.TotalBytes < int64(l.Buffers)*l.BatchBytes || l.TotalBytes > int64(l.Buffers)*l.BatchBytes*101/100 {
		t.Errorf("loader %+v: want the measured plan of (workers + prefetch + 1) batches", p.Loader)
	}
}

// TestEstimate: the sample sizes estimated from the configuration equal
// those of the dataset setup.Datasets opens, for volumes and for tokens
// (HDP, with the noised copy): the estimate used before the data exists
// is the plan the loader will make.
func TestEstimate(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "ct"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, err := synthetic.WritePhantoms(filepath.Join(dir, "ct"), 2, [3]int{24, 20, 16}, 0, 1); err != nil {
		t.Fatal(err)
	}
	if err := synthetic.WriteGSM8K(filepath.Join(dir, "gsm.jsonl"), 10, 1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		preset string
		set    []string
	}{
		{"quickstart", []string{`data.train="` + filepath.Join(dir, "ct") + `"`, `data.val=""`, "data.volumes.patch_size=[8,12,16]", "model.params.patch_size=[8,12,16]", `data.memory_limit="64MiB"`, "data.volumes.train_split=1"}},
		{"hdp-diffusion-gsm8k", []string{`data.train="` + filepath.Join(dir, "gsm.jsonl") + `"`}},
	} {
		c, _ := preset(t, tc.preset, tc.set...)
		m := &artifacts.Manifest{}
		if c.Model.Recipe == "bd3lm" {
			m.Data = []artifacts.Tensor{{Name: "noisy_ids"}}
		}
		ds, _, err := setup.Datasets(c, m)
		if err != nil {
			t.Fatal(err)
		}
		spec, cache, ok := Estimate(c, m)
		if !ok || !reflect.DeepEqual(spec, ds.Spec()) {
			t.Errorf("%s: estimated %v, dataset %v", tc.preset, spec, ds.Spec())
		}
		if ca, isCacher := ds.(interface{ CacheBytes() int64 }); isCacher && ca.CacheBytes() != cache {
			t.Errorf("%s: estimated cache %d, dataset %d", tc.preset, cache, ca.CacheBytes())
		}
	}
}
