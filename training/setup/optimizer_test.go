package setup

import (
	"strings"
	"testing"

	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/config"
	"github.com/ortrain/ortrain/training/optim"
)

// TestAdoptOptimizer: prebuilt SGD artifacts carry momentum 0.9 and weight
// decay 1e-4 (optim's defaults) where the config's defaults are 0: a
// config that leaves the keys unset takes the artifacts' values (what
// trains, and what config.toml must say), one that sets another value is
// refused naming the key, and Adam's keys stay untouched for SGD.
func TestAdoptOptimizer(t *testing.T) {
	m := &artifacts.Manifest{}
	m.Optimizer.Config = optim.Config{Kind: optim.SGD, Momentum: 0.9, WeightDecay: 1e-4}
	c := config.Default()
	if err := c.Override(`optimizer.lr=0.1`); err != nil {
		t.Fatal(err)
	}
	eps, betas := c.Optimizer.Eps, c.Optimizer.Betas
	if err := AdoptOptimizer(c, m); err != nil {
		t.Fatal(err)
	}
	o := c.Optimizer
	if o.Name != optim.SGD || o.Momentum != 0.9 || o.WeightDecay != 1e-4 || o.LR != 0.1 || o.Eps != eps || len(o.Betas) != len(betas) {
		t.Errorf("adopted %+v; want sgd, momentum 0.9, weight decay 1e-4, lr 0.1 kept, Adam's keys untouched", o)
	}
	c = config.Default()
	if err := c.Override(`optimizer.name="sgd"`, `optimizer.momentum=0.5`); err != nil {
		t.Fatal(err)
	}
	err := AdoptOptimizer(c, m)
	if err == nil || !strings.Contains(err.Error(), "optimizer.momentum") || !strings.Contains(err.Error(), "0.9") {
		t.Errorf("momentum 0.5 over artifacts with 0.9: %v, want a refusal naming the key and the baked value", err)
	}
}
