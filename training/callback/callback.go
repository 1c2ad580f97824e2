// Package callback defines the hooks the training loop calls and the
// standard callbacks built on them: checkpointing, early stopping, metric
// logging and the progress display. The loop owns the State and calls each
// hook of a List in order; a callback asks the loop to stop by setting
// State.ShouldStop.
package callback

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"
)

// State is the loop's position, shared with the callbacks.
type State struct {
	Step          int64 // optimizer steps done
	Epoch         int64 // current epoch, from 0
	MaxSteps      int64 // run length in optimizer steps; 0 when unknown
	StepsPerEpoch int64 // optimizer steps per epoch; 0 when unknown
	// ShouldStop asks the loop to end after the current hook; StopReason
	// says why, for the log.
	ShouldStop bool
	StopReason string
	// Failed is set before OnTrainEnd when the loop stopped on an error (a
	// non-finite loss, say): the state in hand is not one to checkpoint.
	Failed bool
}

// StepResult describes one optimizer step (after gradient accumulation).
type StepResult struct {
	Loss     float64
	LR       float64
	GradNorm float64 // before clipping; NaN when not computed
	Samples  int64   // samples in the step, over all accumulated batches
	Tokens   int64   // tokens in the step (token models), padding excluded; 0 otherwise
	// Positions is the token positions the step computed, padding
	// included (samples × sequence length).
	Positions int64
	Duration  time.Duration
	DataWait  time.Duration // part of Duration spent waiting for batches
	// RunTime is the part of Duration spent inside ONNX Runtime's
	// training and optimizer runs (on a GPU, the device's work too: a run
	// returns when its outputs are ready).
	RunTime time.Duration
	// Skipped is true when the loss or gradients were not finite and the
	// optimizer step was skipped (trainer.skip_nonfinite).
	Skipped bool
	// Metrics are further values to log under their own names.
	Metrics map[string]float64
	// Terms are the model's scalar outputs besides the loss (loss terms,
	// discriminator logits), means over the step's batches, named by
	// TermNames; logged as train/<name>, averaged like train/loss. The
	// loop reuses both slices from step to step.
	TermNames []string
	Terms     []float64
}

// Callback is a part of training that hangs off the loop. A returned error
// stops training.
type Callback interface {
	OnTrainStart(*State) error
	OnStepEnd(*State, StepResult) error
	OnValidationEnd(*State, map[string]float64) error
	OnTrainEnd(*State) error
}

// Stateful callbacks keep state across a resume (e.g. early stopping's
// patience); the loop stores it in the checkpoint via List.State.
type Stateful interface {
	// Name keys the state in the checkpoint.
	Name() string
	SaveState() (json.RawMessage, error)
	LoadState(json.RawMessage) error
}

// List calls its callbacks in order; it stops at the first error, which it
// returns saying what the callback was doing.
type List []Callback

func (l List) each(f func(Callback) error) error {
	for _, c := range l {
		if err := f(c); err != nil {
			return fmt.Errorf("%s: %w", doing(c), err)
		}
	}
	return nil
}

// doing says what a callback was doing when it failed, in the user's
// words (not Go's type names).
func doing(c Callback) string {
	switch c.(type) {
	case *Checkpointer:
		return "saving a checkpoint"
	case *LogMetrics:
		return "logging metrics"
	case *EarlyStopping:
		return "early stopping"
	case *Progress:
		return "printing progress"
	}
	return fmt.Sprintf("callback %T", c)
}

// OnTrainStart calls OnTrainStart of each callback.
func (l List) OnTrainStart(s *State) error {
	return l.each(func(c Callback) error { return c.OnTrainStart(s) })
}

// OnStepEnd calls OnStepEnd of each callback.
func (l List) OnStepEnd(s *State, r StepResult) error {
	return l.each(func(c Callback) error { return c.OnStepEnd(s, r) })
}

// OnValidationEnd calls OnValidationEnd of each callback.
func (l List) OnValidationEnd(s *State, m map[string]float64) error {
	return l.each(func(c Callback) error { return c.OnValidationEnd(s, m) })
}

// OnTrainEnd calls OnTrainEnd of every callback, even after one fails, so
// files are closed; the errors are joined.
func (l List) OnTrainEnd(s *State) error {
	var errs []error
	for _, c := range l {
		if err := c.OnTrainEnd(s); err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", doing(c), err))
		}
	}
	return errors.Join(errs...)
}

// State collects the state of the Stateful callbacks for a checkpoint
// (checkpoint.State.Callbacks).
func (l List) State() (map[string]json.RawMessage, error) {
	out := map[string]json.RawMessage{}
	for _, c := range l {
		if s, ok := c.(Stateful); ok {
			b, err := s.SaveState()
			if err != nil {
				return nil, fmt.Errorf("callback %s: %w", s.Name(), err)
			}
			out[s.Name()] = b
		}
	}
	return out, nil
}

// Restore gives each Stateful callback its state from a checkpoint;
// callbacks absent from it keep their fresh state.
func (l List) Restore(states map[string]json.RawMessage) error {
	for _, c := range l {
		if s, ok := c.(Stateful); ok {
			if b, ok := states[s.Name()]; ok {
				if err := s.LoadState(b); err != nil {
					return fmt.Errorf("callback %s: restoring state: %w", s.Name(), err)
				}
			}
		}
	}
	return nil
}
