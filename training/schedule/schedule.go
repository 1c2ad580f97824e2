// Package schedule computes the learning rate at each optimizer step: an
// optional linear warmup from 0, then constant, cosine or linear decay to a
// minimum. The curves match Hugging Face's get_{constant,cosine,linear}_
// schedule_with_warmup (the schedulers Lightning users pair with AdamW),
// with min_lr added as the floor of the decay.
package schedule

import (
	"fmt"
	"math"

	"github.com/ortrain/ortrain/training/config"
)

// Schedule is a pure function from step to learning rate.
type Schedule struct {
	Name        string // constant, cosine or linear
	PeakLR      float64
	MinLR       float64
	WarmupSteps int64
	TotalSteps  int64 // optimizer steps of the whole run; needed for decay
}

// FromConfig builds the schedule of a resolved configuration. totalSteps is
// the run's optimizer steps (trainer.max_steps, or max_epochs × steps per
// epoch when only epochs are set); worldSize scales the peak LR as
// trainer.lr_scaling says.
func FromConfig(c *config.Config, totalSteps int64, worldSize int) (Schedule, error) {
	s := Schedule{
		Name:        c.Scheduler.Name,
		PeakLR:      c.PeakLR(worldSize),
		MinLR:       c.Scheduler.MinLR,
		WarmupSteps: c.Scheduler.WarmupSteps,
		TotalSteps:  totalSteps,
	}
	if r := c.Scheduler.WarmupRatio; r > 0 {
		s.WarmupSteps = int64(math.Ceil(r * float64(totalSteps)))
	}
	return s, s.Validate()
}

// Validate reports settings for which LR is undefined.
func (s Schedule) Validate() error {
	switch s.Name {
	case "constant":
	case "cosine", "linear":
		if s.TotalSteps <= 0 {
			return &config.Error{Key: "scheduler.name", Msg: fmt.Sprintf("%s decay needs the run length: set trainer.max_steps, or trainer.max_epochs with a dataset of known length", s.Name)}
		}
	default:
		return &config.Error{Key: "scheduler.name", Msg: fmt.Sprintf("%q is not constant, cosine or linear", s.Name)}
	}
	if s.WarmupSteps < 0 || (s.TotalSteps > 0 && s.WarmupSteps > s.TotalSteps) {
		return &config.Error{Key: "scheduler.warmup_steps", Msg: fmt.Sprintf("%d warmup steps do not fit a run of %d steps", s.WarmupSteps, s.TotalSteps)}
	}
	if s.MinLR < 0 || s.MinLR > s.PeakLR {
		return &config.Error{Key: "scheduler.min_lr", Msg: fmt.Sprintf("%g is not in [0, peak lr %g]", s.MinLR, s.PeakLR)}
	}
	return nil
}

// LR is the learning rate for the optimizer step that follows step steps
// already taken (step 0 is the first). During warmup it rises linearly as
// PeakLR·step/WarmupSteps; afterwards it decays from PeakLR to MinLR over
// the remaining steps and stays at MinLR past TotalSteps.
func (s Schedule) LR(step int64) float64 {
	if step < s.WarmupSteps {
		return s.PeakLR * float64(step) / float64(s.WarmupSteps)
	}
	if s.Name == "constant" {
		return s.PeakLR
	}
	decay := max(s.TotalSteps-s.WarmupSteps, 1)
	p := math.Min(float64(step-s.WarmupSteps)/float64(decay), 1)
	f := 1 - p // linear
	if s.Name == "cosine" {
		f = 0.5 * (1 + math.Cos(math.Pi*p))
	}
	return s.MinLR + (s.PeakLR-s.MinLR)*f
}
