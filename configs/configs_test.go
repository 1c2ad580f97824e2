package configs_test

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/configs"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/training/config"
)

// presets states what each preset must be: its recipe, the range of its
// model's parameter count, and the settings the seeds fixed.
var presets = []struct {
	name           string
	recipe         string
	minP, maxP     int64
	batch, workers int
	prefetch       int
	effective      int     // batch × accumulation on one device
	peakLR         float64 // after lr_scaling
	precision      config.Precision
}{
	{"vqgan3d-h200", "vqgan3d", 35e6, 37e6, 2, 8, 2, 4, 1e-4, config.BF16Mixed},
	{"vqgan3d-4gpu", "vqgan3d", 35e6, 37e6, 1, 8, 2, 1, 1e-4, config.BF16Mixed},
	{"bd3lm-gsm8k-h200", "bd3lm", 120e6, 125e6, 64, 4, 2, 512, 5e-4, config.BF16Mixed},
	{"hdp-diffusion-gsm8k", "bd3lm", 120e6, 125e6, 64, 4, 2, 512, 5e-4, config.BF16Mixed},
	{"resnet50-a10g-conservative", "resnet", 25_557_032, 25_557_032, 192, 8, 2, 192, 0.5 * 192 / 256, config.FP16Mixed},
	{"resnet50-a10g-balanced", "resnet", 25_557_032, 25_557_032, 256, 12, 3, 256, 0.5, config.FP16Mixed},
	{"resnet50-a10g-aggressive", "resnet", 25_557_032, 25_557_032, 320, 16, 4, 320, 0.5 * 320 / 256, config.FP16Mixed},
	{"quickstart", "vqgan3d", 5e3, 100e3, 2, 1, 2, 2, 2e-3, config.FP32},
	{"resnet-photos-cpu", "resnet", 703_386, 703_386, 32, 2, 2, 32, 0.1, config.FP32},
}

// load reads a preset, fills in a data path where the preset leaves it to
// the user, and resolves it: every preset must be a complete, valid
// configuration once given its data.
func load(t *testing.T, name string) *config.Config {
	c, err := configs.Load(name)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if c.Data.Kind != "synthetic" {
		if err := c.Override(`data.train="/data/train"`); err != nil {
			t.Fatal(err)
		}
	}
	if key, ok := refused[name]; ok {
		// Refused until its feature is built; checked as it would run.
		if err := c.Resolve(); err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("%s: %v, want a refusal naming %s", name, err, key)
		}
		if err := c.Override(key + "=1"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Resolve(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

// refused are presets that name a feature not built yet, by the key
// refused: they must say so rather than run something else.
var refused = map[string]string{}

// TestPresets parses and resolves every preset, checks its model parameters
// with the recipe (unknown names and impossible sizes fail) and the count
// they give, the settings in the table, and that the model and data agree
// on the sizes both name.
func TestPresets(t *testing.T) {
	var names []string
	for _, p := range presets {
		names = append(names, p.name)
		c := load(t, p.name)
		if c.Model.Recipe != p.recipe {
			t.Errorf("%s: recipe %q, want %q", p.name, c.Model.Recipe, p.recipe)
		}
		n, err := models.Check(c.Model.Recipe, c.Model.Params)
		if err != nil {
			t.Errorf("%s: %v", p.name, err)
		}
		t.Logf("%s: %d parameters", p.name, n)
		if n < p.minP || n > p.maxP {
			t.Errorf("%s: %d parameters, want %d..%d", p.name, n, p.minP, p.maxP)
		}
		d := c.Data
		if d.BatchSize != p.batch || d.NumWorkers != p.workers || d.Prefetch != p.prefetch {
			t.Errorf("%s: batch %d workers %d prefetch %d, want %d %d %d", p.name, d.BatchSize, d.NumWorkers, d.Prefetch, p.batch, p.workers, p.prefetch)
		}
		if got := c.EffectiveBatchSize(1); got != p.effective {
			t.Errorf("%s: effective batch %d, want %d", p.name, got, p.effective)
		}
		if got := c.PeakLR(1); math.Abs(got-p.peakLR) > 1e-12 {
			t.Errorf("%s: peak lr %g, want %g", p.name, got, p.peakLR)
		}
		if c.Trainer.Precision != p.precision {
			t.Errorf("%s: precision %s, want %s", p.name, c.Trainer.Precision, p.precision)
		}
		for _, msg := range agree(c) {
			t.Errorf("%s: %s", p.name, msg)
		}
	}
	if got := configs.Names(); !slices.Equal(got, sorted(names)) {
		t.Errorf("embedded presets %v, the table covers %v", got, sorted(names))
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// agree lists the sizes that model.params and [data] both name but set
// differently.
func agree(c *config.Config) []string {
	p := c.Model.Params
	var bad []string
	same := func(key string, v any, dataKey string, dv any) {
		if fmt.Sprint(v) != fmt.Sprint(dv) {
			bad = append(bad, fmt.Sprintf("model.params.%s = %v but %s = %v", key, v, dataKey, dv))
		}
	}
	switch c.Model.Recipe {
	case "vqgan3d":
		if c.Data.Kind == "volumes" || c.Data.Kind == "synthetic" {
			same("patch_size", p["patch_size"], "data.volumes.patch_size", c.Data.Volumes.PatchSize)
		}
	case "bd3lm":
		same("seq_len", p["seq_len"], "data.tokens.seq_len", c.Data.Tokens.SeqLen)
		if bs, ok := p["block_size"]; ok {
			same("block_size", bs, "data.tokens.block_size", c.Data.Tokens.BlockSize)
		}
	case "resnet":
		same("image_size", p["image_size"], "data.images.size", c.Data.Images.Size)
		same("layout", p["layout"], "data.images.layout", c.Data.Images.Layout)
	}
	return bad
}

// TestVQGANH200 pins the seeds' VQ-GAN run settings.
func TestVQGANH200(t *testing.T) {
	c := load(t, "vqgan3d-h200")
	v := c.Data.Volumes
	if !slices.Equal(v.PatchSize, []int{128, 256, 256}) || !slices.Equal(v.Stride, []int{96, 192, 192}) {
		t.Errorf("patch %v stride %v, want [128 256 256] and [96 192 192]", v.PatchSize, v.Stride)
	}
	tr := c.Trainer
	if tr.MaxEpochs != 30 || tr.ValCheckInterval.Fraction != 0.25 || tr.GradientClipVal != 1.0 {
		t.Errorf("epochs %d, val_check_interval %v, clip %g; want 30, 0.25, 1.0", tr.MaxEpochs, tr.ValCheckInterval, tr.GradientClipVal)
	}
}

// TestLoadUnknown: asking for a preset that does not exist is a bad-input
// error listing the known ones.
func TestLoadUnknown(t *testing.T) {
	_, err := configs.Load("nope")
	if bi, ok := err.(interface{ BadInput() bool }); !ok || !bi.BadInput() {
		t.Fatalf("err = %v, want a bad-input error", err)
	}
}
