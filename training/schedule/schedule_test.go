package schedule

import (
	"errors"
	"math"
	"testing"

	"github.com/ortrain/ortrain/training/config"
)

// TestLR checks exact values at the start, inside and at the end of warmup,
// mid-decay, at the end of the run and past it.
func TestLR(t *testing.T) {
	cos := Schedule{Name: "cosine", PeakLR: 1e-3, MinLR: 1e-5, WarmupSteps: 100, TotalSteps: 1100}
	lin := Schedule{Name: "linear", PeakLR: 2e-3, MinLR: 0, WarmupSteps: 10, TotalSteps: 110}
	con := Schedule{Name: "constant", PeakLR: 3e-4, WarmupSteps: 4}
	noWarm := Schedule{Name: "cosine", PeakLR: 1, TotalSteps: 4}
	for _, tc := range []struct {
		name string
		s    Schedule
		step int64
		want float64
	}{
		{"cosine warmup start", cos, 0, 0},
		{"cosine warmup quarter", cos, 25, 2.5e-4},
		{"cosine warmup end = peak", cos, 100, 1e-3},
		{"cosine half-way", cos, 600, 1e-5 + (1e-3-1e-5)*0.5},
		{"cosine quarter decay", cos, 350, 1e-5 + (1e-3-1e-5)*0.5*(1+math.Sqrt2/2)},
		{"cosine end = min", cos, 1100, 1e-5},
		{"cosine past end", cos, 5000, 1e-5},
		{"linear warmup", lin, 5, 1e-3},
		{"linear peak", lin, 10, 2e-3},
		{"linear mid", lin, 60, 1e-3},
		{"linear end", lin, 110, 0},
		{"constant warmup", con, 1, 7.5e-5},
		{"constant after", con, 4, 3e-4},
		{"constant far", con, 1 << 40, 3e-4},
		{"no warmup first step", noWarm, 0, 1},
		{"no warmup step 1", noWarm, 1, 0.5 * (1 + math.Cos(math.Pi/4))},
	} {
		if got := tc.s.LR(tc.step); math.Abs(got-tc.want) > 1e-15 {
			t.Errorf("%s: LR(%d) = %.17g, want %.17g", tc.name, tc.step, got, tc.want)
		}
	}
}

// TestFromConfig checks warmup_ratio, LR scaling and refused settings.
func TestFromConfig(t *testing.T) {
	c, err := config.Parse([]byte(`
[model]
recipe = "resnet"
[data]
kind = "synthetic"
batch_size = 512
[trainer]
max_steps = 1000
base_batch_size = 128
lr_scaling = "sqrt"
[optimizer]
lr = 3e-4
[scheduler]
name = "cosine"
warmup_ratio = 0.05
min_lr = 1e-6
`), "test.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Resolve(); err != nil {
		t.Fatal(err)
	}
	s, err := FromConfig(c, 1000, 1)
	if err != nil {
		t.Fatal(err)
	}
	if s.WarmupSteps != 50 || math.Abs(s.PeakLR-6e-4) > 1e-15 || s.LR(50) != s.PeakLR {
		t.Errorf("schedule %+v", s)
	}
	if _, err := FromConfig(c, 0, 1); err == nil {
		t.Error("cosine without a run length was accepted")
	} else if b := (interface{ BadInput() bool })(nil); !errors.As(err, &b) {
		t.Errorf("error %v is not BadInput", err)
	}
}
