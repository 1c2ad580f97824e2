package callback

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/ortrain/ortrain/training/checkpoint"
	"github.com/ortrain/ortrain/training/logging"
)

// Snapshotter gives the checkpoint contents for the loop's current state:
// the tensors (host bytes or streaming writers) and the non-tensor state,
// including List.State for the callbacks.
type Snapshotter interface {
	Snapshot(*State) (*checkpoint.State, []checkpoint.Tensor, error)
}

// Checkpointer saves a checkpoint every N optimizer steps, after each
// validation (scored by the monitored metric for top-k) and at the end of
// training.
type Checkpointer struct {
	manager   *checkpoint.Manager
	source    Snapshotter
	every     int64
	monitor   string
	lastSaved int64
	// A validation's checkpoint waits for the step's end, so that the
	// step's training row is logged before it (the loggers come first in
	// the list): a kill after the checkpoint then loses no row.
	validated bool
	score     *float64
	// LastPath is the directory of the newest checkpoint saved.
	LastPath string
}

// NewCheckpointer saves through m; every is trainer.checkpoint_every_n_steps
// (0: only after validation and at the end) and monitor trainer.monitor.
func NewCheckpointer(m *checkpoint.Manager, source Snapshotter, every int64, monitor string) *Checkpointer {
	return &Checkpointer{manager: m, source: source, every: every, monitor: monitor, lastSaved: -1}
}

// OnTrainStart notes the resume step, so an immediate end does not save a
// copy of the checkpoint just loaded.
func (c *Checkpointer) OnTrainStart(s *State) error {
	c.lastSaved = s.Step
	return nil
}

// OnStepEnd saves the checkpoint of a validation at this step, scored, or
// every N steps.
func (c *Checkpointer) OnStepEnd(s *State, _ StepResult) error {
	switch {
	case c.validated:
		c.validated = false
		return c.save(s, c.score)
	case c.every > 0 && s.Step%c.every == 0 && c.lastSaved != s.Step:
		return c.save(s, nil)
	}
	return nil
}

// OnValidationEnd notes the monitored metric; the checkpoint, scored by
// it, is saved at the step's end.
func (c *Checkpointer) OnValidationEnd(_ *State, metrics map[string]float64) error {
	c.validated, c.score = true, nil
	if v, ok := metrics[c.monitor]; ok && c.monitor != "" {
		c.score = &v
	}
	return nil
}

// OnTrainEnd saves the final state (scored, after a validation the step's
// end did not reach) unless it was just saved or the run failed, which
// leaves the last good checkpoint as the newest.
func (c *Checkpointer) OnTrainEnd(s *State) error {
	if c.lastSaved == s.Step || s.Failed {
		return nil
	}
	score := c.score
	if !c.validated {
		score = nil
	}
	c.validated = false
	return c.save(s, score)
}

func (c *Checkpointer) save(s *State, score *float64) error {
	st, tensors, err := c.source.Snapshot(s)
	if err != nil {
		return err
	}
	st.Step, st.Epoch, st.Score = s.Step, s.Epoch, score
	p, err := c.manager.Save(st, tensors)
	if p != "" {
		c.LastPath, c.lastSaved = p, s.Step
	}
	return err
}

// EarlyStopping stops training when the monitored metric has not improved
// by more than MinDelta for Patience validations, as Lightning's
// EarlyStopping does; a non-finite value stops at once.
type EarlyStopping struct {
	Monitor  string
	Mode     string // min or max
	Patience int
	MinDelta float64

	best float64
	wait int
	seen bool
}

// NewEarlyStopping returns an early stopping callback; mode is min or max.
func NewEarlyStopping(monitor, mode string, patience int, minDelta float64) *EarlyStopping {
	return &EarlyStopping{Monitor: monitor, Mode: mode, Patience: patience, MinDelta: minDelta}
}

// OnTrainStart does nothing; state comes from LoadState on resume.
func (e *EarlyStopping) OnTrainStart(*State) error { return nil }

// OnStepEnd does nothing: only validation results count.
func (e *EarlyStopping) OnStepEnd(*State, StepResult) error { return nil }

// OnTrainEnd does nothing.
func (e *EarlyStopping) OnTrainEnd(*State) error { return nil }

// OnValidationEnd counts validations without improvement and sets
// ShouldStop when patience runs out. A missing metric is an error naming the
// metrics that were logged, since a typo would otherwise silently disable
// early stopping.
func (e *EarlyStopping) OnValidationEnd(s *State, metrics map[string]float64) error {
	v, ok := metrics[e.Monitor]
	if !ok {
		return fmt.Errorf("early stopping monitors %q, but validation logged only %s", e.Monitor, strings.Join(keys(metrics), ", "))
	}
	if math.IsNaN(v) || math.IsInf(v, 0) {
		s.ShouldStop, s.StopReason = true, fmt.Sprintf("%s = %g is not finite", e.Monitor, v)
		return nil
	}
	improved := !e.seen
	if e.seen {
		if e.Mode == "max" {
			improved = v > e.best+e.MinDelta
		} else {
			improved = v < e.best-e.MinDelta
		}
	}
	if improved {
		e.best, e.wait, e.seen = v, 0, true
		return nil
	}
	e.wait++
	if e.wait >= e.Patience {
		s.ShouldStop = true
		s.StopReason = fmt.Sprintf("%s did not improve on %g for %d validations", e.Monitor, e.best, e.wait)
	}
	return nil
}

type earlyStoppingState struct {
	Best float64 `json:"best"`
	Wait int     `json:"wait"`
	Seen bool    `json:"seen"`
}

// Name keys the state in checkpoints.
func (e *EarlyStopping) Name() string { return "early_stopping" }

// SaveState returns the best value and the count of validations without
// improvement.
func (e *EarlyStopping) SaveState() (json.RawMessage, error) {
	return json.Marshal(earlyStoppingState{e.best, e.wait, e.seen})
}

// LoadState restores what SaveState returned.
func (e *EarlyStopping) LoadState(b json.RawMessage) error {
	var st earlyStoppingState
	if err := json.Unmarshal(b, &st); err != nil {
		return err
	}
	e.best, e.wait, e.seen = st.Best, st.Wait, st.Seen
	return nil
}

func keys(m map[string]float64) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// MetricSource supplies extra values to log with each training row, such
// as GPU telemetry.
type MetricSource interface {
	Metrics() map[string]float64
}

// LogMetrics writes training rows every N steps and validation results to a
// logger. A training row holds train/loss and train/<term> for the
// model's other scalar outputs (means over the steps since the last row,
// steps whose loss is not finite excluded; a step skipped with a finite
// loss, as float16 overflow skips, counts), lr, grad_norm, epoch,
// throughput/samples_per_s (and tokens_per_s without padding,
// padded_tokens_per_s with it), time/data_wait_frac, time/step_ms (a
// step's mean wall time) and time/host_ms (its part outside ONNX
// Runtime's runs and the wait for data: staging batches, collectives,
// the loop's bookkeeping), train/skipped_steps (cumulative), the step's own Metrics and those of the
// sources.
type LogMetrics struct {
	logger  logging.Logger
	every   int64
	sources []MetricSource

	lossSum         float64
	lossN           int64
	termSums        []float64 // of StepResult.Terms, over the same steps as lossSum
	samples, tokens int64
	positions       int64
	steps           int64
	elapsed, wait   time.Duration
	run             time.Duration
	skipped         int64
}

// NewLogMetrics logs to l every `every` steps (trainer.log_every_n_steps).
func NewLogMetrics(l logging.Logger, every int64, sources ...MetricSource) *LogMetrics {
	return &LogMetrics{logger: l, every: max(every, 1), sources: sources}
}

// OnTrainStart does nothing.
func (m *LogMetrics) OnTrainStart(*State) error { return nil }

// OnStepEnd accumulates the step and writes a row every N steps.
func (m *LogMetrics) OnStepEnd(s *State, r StepResult) error {
	if r.Skipped {
		m.skipped++
	}
	// A skipped step's loss is logged when it is finite, as Lightning logs
	// every step's: float16 overflow skips the update of a step whose loss
	// was fine. A non-finite loss would poison the mean.
	if !math.IsNaN(r.Loss) && !math.IsInf(r.Loss, 0) {
		m.lossSum += r.Loss
		m.lossN++
		if len(m.termSums) != len(r.Terms) {
			m.termSums = make([]float64, len(r.Terms))
		}
		for i, v := range r.Terms {
			m.termSums[i] += v
		}
	}
	m.samples += r.Samples
	m.tokens += r.Tokens
	m.positions += r.Positions
	m.steps++
	m.elapsed += r.Duration
	m.wait += r.DataWait
	m.run += r.RunTime
	if s.Step%m.every != 0 {
		return nil
	}
	row := map[string]float64{
		"lr":                  r.LR,
		"epoch":               float64(s.Epoch),
		"train/skipped_steps": float64(m.skipped),
	}
	if m.lossN > 0 {
		row["train/loss"] = m.lossSum / float64(m.lossN)
		for i, name := range r.TermNames {
			if i < len(m.termSums) {
				row["train/"+name] = m.termSums[i] / float64(m.lossN)
				m.termSums[i] = 0
			}
		}
	}
	if !math.IsNaN(r.GradNorm) {
		row["grad_norm"] = r.GradNorm
	}
	if sec := m.elapsed.Seconds(); sec > 0 {
		row["throughput/samples_per_s"] = float64(m.samples) / sec
		if m.tokens > 0 {
			row["throughput/tokens_per_s"] = float64(m.tokens) / sec
		}
		if m.positions > 0 {
			// The padded figure alongside: what the model computed.
			row["throughput/padded_tokens_per_s"] = float64(m.positions) / sec
		}
		row["time/data_wait_frac"] = m.wait.Seconds() / sec
		row["time/step_ms"] = sec * 1e3 / float64(m.steps)
		row["time/host_ms"] = max(0, (m.elapsed-m.wait-m.run).Seconds()) * 1e3 / float64(m.steps)
	}
	for k, v := range r.Metrics {
		row[k] = v
	}
	for _, src := range m.sources {
		for k, v := range src.Metrics() {
			row[k] = v
		}
	}
	m.lossSum, m.lossN, m.samples, m.tokens, m.positions, m.elapsed, m.wait = 0, 0, 0, 0, 0, 0, 0
	m.steps, m.run = 0, 0
	return m.logger.Log(s.Step, row)
}

// OnValidationEnd logs the validation metrics at the current step.
func (m *LogMetrics) OnValidationEnd(s *State, metrics map[string]float64) error {
	return m.logger.Log(s.Step, metrics)
}

// OnTrainEnd closes the logger.
func (m *LogMetrics) OnTrainEnd(*State) error { return m.logger.Close() }
