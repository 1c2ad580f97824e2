package callback

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/checkpoint"
)

// TestEarlyStopping checks patience, min_delta, mode and that its state
// survives a resume.
func TestEarlyStopping(t *testing.T) {
	for _, tc := range []struct {
		name     string
		mode     string
		patience int
		delta    float64
		values   []float64
		stopAt   int // index of the validation that stops; -1: never
	}{
		{"min improves", "min", 2, 0, []float64{5, 4, 3, 2}, -1},
		{"min plateau", "min", 2, 0, []float64{5, 4, 4, 4.5}, 3},
		{"min_delta counts small gains as none", "min", 2, 0.5, []float64{5, 4.8, 4.6, 4.4}, 2},
		{"max", "max", 1, 0, []float64{0.1, 0.5, 0.4}, 2},
		{"NaN stops at once", "min", 5, 0, []float64{1, math.NaN()}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := NewEarlyStopping("val/loss", tc.mode, tc.patience, tc.delta)
			stopped := -1
			for i, v := range tc.values {
				// Resume half-way through: a fresh callback restored from
				// the saved state must behave the same.
				if i == len(tc.values)/2 {
					b, err := e.SaveState()
					if err != nil {
						t.Fatal(err)
					}
					e = NewEarlyStopping("val/loss", tc.mode, tc.patience, tc.delta)
					if err := e.LoadState(b); err != nil {
						t.Fatal(err)
					}
				}
				s := &State{}
				if err := e.OnValidationEnd(s, map[string]float64{"val/loss": v}); err != nil {
					t.Fatal(err)
				}
				if s.ShouldStop {
					stopped = i
					break
				}
			}
			if stopped != tc.stopAt {
				t.Errorf("stopped at validation %d, want %d", stopped, tc.stopAt)
			}
		})
	}
	e := NewEarlyStopping("val/los", "min", 1, 0)
	err := e.OnValidationEnd(&State{}, map[string]float64{"val/loss": 1, "val/acc": 0.5})
	if err == nil || !strings.Contains(err.Error(), "val/acc, val/loss") {
		t.Errorf("missing metric: %v, want an error listing the logged ones", err)
	}
}

type memLogger struct {
	rows   []map[string]float64
	steps  []int64
	closed bool
}

func (m *memLogger) Log(step int64, metrics map[string]float64) error {
	m.steps = append(m.steps, step)
	m.rows = append(m.rows, metrics)
	return nil
}
func (m *memLogger) Close() error { m.closed = true; return nil }

type gpu struct{}

func (gpu) Metrics() map[string]float64 { return map[string]float64{"gpu/util": 97} }

// TestLogMetrics checks the interval means and throughput of training rows.
func TestLogMetrics(t *testing.T) {
	l := &memLogger{}
	cb := NewLogMetrics(l, 2, gpu{})
	s := &State{}
	steps := []StepResult{
		{Loss: 4, LR: 0.1, GradNorm: 1, Samples: 8, Duration: time.Second, DataWait: 250 * time.Millisecond, RunTime: 700 * time.Millisecond},
		{Loss: 2, LR: 0.2, GradNorm: 3, Samples: 8, Duration: time.Second, DataWait: 250 * time.Millisecond, RunTime: 500 * time.Millisecond},
		{Loss: math.NaN(), LR: 0.3, GradNorm: math.NaN(), Samples: 8, Tokens: 80, Duration: time.Second, Skipped: true},
		{Loss: 1, LR: 0.4, GradNorm: 2, Samples: 8, Tokens: 80, Duration: time.Second, Metrics: map[string]float64{"train/kl": 0.5}},
	}
	for i, r := range steps {
		s.Step = int64(i + 1)
		if err := cb.OnStepEnd(s, r); err != nil {
			t.Fatal(err)
		}
	}
	cb.OnValidationEnd(s, map[string]float64{"val/loss": 0.9})
	cb.OnTrainEnd(s)
	if len(l.rows) != 3 || l.steps[0] != 2 || l.steps[1] != 4 || !l.closed {
		t.Fatalf("rows at steps %v, closed %v", l.steps, l.closed)
	}
	for _, tc := range []struct {
		row  int
		key  string
		want float64
	}{
		{0, "train/loss", 3}, {0, "lr", 0.2}, {0, "grad_norm", 3}, {0, "throughput/samples_per_s", 8},
		{0, "time/data_wait_frac", 0.25}, {0, "gpu/util", 97}, {0, "time/step_ms", 1000}, {0, "time/host_ms", 150},
		{1, "train/loss", 1}, {1, "train/skipped_steps", 1}, {1, "throughput/tokens_per_s", 80}, {1, "train/kl", 0.5},
		{2, "val/loss", 0.9},
	} {
		if got, ok := l.rows[tc.row][tc.key]; !ok || got != tc.want {
			t.Errorf("row %d %s = %v (present %v), want %v", tc.row, tc.key, got, ok, tc.want)
		}
	}
}

// TestLogMetricsOverflowSkips: float16 steps skipped for overflow have a
// finite loss, which is logged as Lightning logs every step's (a curve
// from step 1, not from the first applied step); a non-finite loss stays
// out of the mean.
func TestLogMetricsOverflowSkips(t *testing.T) {
	l := &memLogger{}
	cb := NewLogMetrics(l, 1)
	s := &State{}
	scaled := func(loss float64, skipped bool) StepResult {
		return StepResult{Loss: loss, GradNorm: math.NaN(), Skipped: skipped, Duration: time.Second, Metrics: map[string]float64{"train/loss_scale": 65536},
			TermNames: []string{"kl"}, Terms: []float64{loss / 2}}
	}
	for i, r := range []StepResult{scaled(0.25, true), scaled(0.5, true), scaled(math.Inf(1), true), scaled(0.125, false)} {
		s.Step = int64(i + 1)
		if err := cb.OnStepEnd(s, r); err != nil {
			t.Fatal(err)
		}
	}
	for i, want := range []float64{0.25, 0.5, math.NaN(), 0.125} {
		got, ok := l.rows[i]["train/loss"]
		if math.IsNaN(want) {
			if ok {
				t.Errorf("step %d (loss +Inf): train/loss %v logged", i+1, got)
			}
			continue
		}
		if !ok || got != want || l.rows[i]["train/kl"] != want/2 {
			t.Errorf("step %d: train/loss %v (present %v), train/kl %v; want %v, %v", i+1, got, ok, l.rows[i]["train/kl"], want, want/2)
		}
	}
	if got := l.rows[3]["train/skipped_steps"]; got != 3 {
		t.Errorf("train/skipped_steps %v, want 3", got)
	}
}

// fakeClock advances by a fixed amount per call.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestProgress checks plain lines off a terminal and the redraw limit on one.
func TestProgress(t *testing.T) {
	var out bytes.Buffer
	p := newProgress(&out, false, 5, 0)
	clk := &fakeClock{t: time.Unix(0, 0), step: 100 * time.Millisecond}
	p.now = clk.now
	s := &State{MaxSteps: 10}
	p.OnTrainStart(s)
	for i := int64(1); i <= 10; i++ {
		s.Step = i
		p.OnStepEnd(s, StepResult{Loss: 1.5, LR: 1e-3, Samples: 4})
	}
	p.OnValidationEnd(s, map[string]float64{"val/loss": 1.25})
	p.OnTrainEnd(s)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "step 5/10 epoch 0 loss 1.5 lr 0.001") ||
		!strings.Contains(lines[0], "ETA") || !strings.Contains(lines[0], "samples/s") ||
		lines[2] != "validation at step 10: val/loss 1.25" || !strings.HasPrefix(lines[3], "training ended at step 10") {
		t.Errorf("output:\n%s", out.String())
	}
	if strings.Contains(out.String(), "\r") {
		t.Error("plain output contains carriage returns")
	}

	out.Reset()
	p = newProgress(&out, true, 5, 120)
	clk = &fakeClock{t: time.Unix(0, 0), step: 10 * time.Millisecond}
	p.now = clk.now
	s = &State{MaxSteps: 1000}
	p.OnTrainStart(s)
	for i := int64(1); i <= 100; i++ { // one simulated second
		s.Step = i
		p.OnStepEnd(s, StepResult{Loss: 1, LR: 1e-3, Tokens: 1000})
	}
	if n := strings.Count(out.String(), "\r"); n < 5 || n > 11 {
		t.Errorf("%d redraws in one second, want about 10", n)
	}
	if !strings.Contains(out.String(), "tok/s") || !strings.Contains(out.String(), "█") {
		t.Errorf("bar: %q", out.String())
	}
}

type snap struct {
	list   *List
	logged *int64 // the last step the logger before the checkpointer saw
}

func (s snap) Snapshot(st *State) (*checkpoint.State, []checkpoint.Tensor, error) {
	if s.logged != nil && *s.logged != st.Step {
		return nil, nil, fmt.Errorf("checkpoint at step %d before the step's row was logged (last %d)", st.Step, *s.logged)
	}
	cbs, err := s.list.State()
	if err != nil {
		return nil, nil, err
	}
	return &checkpoint.State{Callbacks: cbs}, []checkpoint.Tensor{{Name: "w", DType: ort.Float32, Shape: []int64{1}, Data: []byte{0, 0, 128, 63}}}, nil
}

// stepLogger notes the steps whose end it saw, as LogMetrics writes rows.
type stepLogger struct{ last *int64 }

func (l stepLogger) OnTrainStart(*State) error                        { return nil }
func (l stepLogger) OnStepEnd(s *State, _ StepResult) error           { *l.last = s.Step; return nil }
func (l stepLogger) OnValidationEnd(*State, map[string]float64) error { return nil }
func (l stepLogger) OnTrainEnd(*State) error                          { return nil }

// TestCheckpointer checks when checkpoints are written, that validation
// scores reach top-k, that callback state is stored, and that every
// checkpoint comes after its step's training row (a kill between them
// would lose the row: a resume truncates metrics.csv to the checkpoint).
// The loop calls OnValidationEnd, then OnStepEnd, at a validation step.
func TestCheckpointer(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "checkpoints")
	m, err := checkpoint.NewManager(dir, 1, "val/loss", "min")
	if err != nil {
		t.Fatal(err)
	}
	es := NewEarlyStopping("val/loss", "min", 3, 0)
	var list List
	logged := int64(-1)
	cp := NewCheckpointer(m, snap{&list, &logged}, 4, "val/loss")
	list = List{stepLogger{last: &logged}, es, cp}
	s := &State{}
	list.OnTrainStart(s)
	for i := int64(1); i <= 10; i++ {
		s.Step = i
		if i == 5 || i == 10 {
			if err := list.OnValidationEnd(s, map[string]float64{"val/loss": 10 / float64(i*i)}); err != nil {
				t.Fatal(err)
			}
		}
		if err := list.OnStepEnd(s, StepResult{}); err != nil {
			t.Fatal(err)
		}
	}
	if err := list.OnTrainEnd(s); err != nil {
		t.Fatal(err)
	}
	// Saved at 4, 5 (val), 8, 10 (val); the end adds nothing. Kept: the
	// best (10, also newest).
	var steps []int64
	for _, e := range m.Entries() {
		steps = append(steps, e.Step)
	}
	if len(steps) != 1 || steps[0] != 10 {
		t.Errorf("kept %v, want [10]", steps)
	}
	c, err := checkpoint.Load(cp.LastPath)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if c.State.Score == nil || *c.State.Score != 0.1 {
		t.Errorf("score %v, want 0.1", c.State.Score)
	}
	var st earlyStoppingState
	if err := json.Unmarshal(c.State.Callbacks["early_stopping"], &st); err != nil || st.Best != 0.1 {
		t.Errorf("early stopping state %s (%v)", c.State.Callbacks["early_stopping"], err)
	}
}

// failingSnapshot cannot snapshot the training state.
type failingSnapshot struct{}

func (failingSnapshot) Snapshot(*State) (*checkpoint.State, []checkpoint.Tensor, error) {
	return nil, nil, fmt.Errorf("no space left on device")
}

// TestErrorsSayWhatFailed: a callback's error says what it was doing, in
// words, not Go's type names.
func TestErrorsSayWhatFailed(t *testing.T) {
	m, err := checkpoint.NewManager(filepath.Join(t.TempDir(), "checkpoints"), 1, "", "")
	if err != nil {
		t.Fatal(err)
	}
	list := List{NewCheckpointer(m, failingSnapshot{}, 1, "")}
	err = list.OnStepEnd(&State{Step: 1}, StepResult{})
	if err == nil || err.Error() != "saving a checkpoint: no space left on device" {
		t.Errorf("a failed checkpoint: %v", err)
	}
	if err := list.OnTrainEnd(&State{Step: 2}); err == nil || strings.Contains(err.Error(), "*callback.") {
		t.Errorf("a failed final checkpoint: %v", err)
	}
}
