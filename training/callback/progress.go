package callback

import (
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"golang.org/x/term"
)

// Progress reports training progress. On a terminal it redraws one line
// (step/total, epoch, it/s, samples/s or tokens/s, loss, lr, ETA) at most
// ten times a second; elsewhere (a log file, CI) it prints a plain line
// every N steps, so logs stay readable.
type Progress struct {
	w     io.Writer
	tty   bool
	every int64
	width int
	now   func() time.Time

	start, lastDraw time.Time
	startStep       int64
	drawn           bool // a bar line is on screen
	// rate over the last interval, smoothed
	ips, sps, tps float64
	lastT         time.Time
	lastStep      int64
	samples       int64
	tokens        int64
}

// NewProgress writes to f, drawing a bar when f is a terminal; every is
// trainer.log_every_n_steps for plain lines.
func NewProgress(f *os.File, every int64) *Progress {
	tty := term.IsTerminal(int(f.Fd()))
	width := 0
	if tty {
		width, _, _ = term.GetSize(int(f.Fd()))
	}
	return newProgress(f, tty, every, width)
}

func newProgress(w io.Writer, tty bool, every int64, width int) *Progress {
	if width <= 0 {
		width = 120
	}
	return &Progress{w: w, tty: tty, every: max(every, 1), width: width, now: time.Now}
}

// OnTrainStart starts the clocks (ETA counts from the resume step).
func (p *Progress) OnTrainStart(s *State) error {
	p.start = p.now()
	p.lastT = p.start
	p.startStep, p.lastStep = s.Step, s.Step
	return nil
}

// OnStepEnd updates rates and redraws or prints.
func (p *Progress) OnStepEnd(s *State, r StepResult) error {
	p.samples += r.Samples
	p.tokens += r.Tokens
	now := p.now()
	if p.tty && now.Sub(p.lastDraw) < 100*time.Millisecond && s.Step != s.MaxSteps {
		return nil
	}
	if !p.tty && s.Step%p.every != 0 {
		return nil
	}
	if dt := now.Sub(p.lastT).Seconds(); dt > 0 {
		smooth := func(old, x float64) float64 {
			if old == 0 {
				return x
			}
			return 0.7*old + 0.3*x
		}
		p.ips = smooth(p.ips, float64(s.Step-p.lastStep)/dt)
		p.sps = smooth(p.sps, float64(p.samples)/dt)
		p.tps = smooth(p.tps, float64(p.tokens)/dt)
	}
	p.lastT, p.lastStep, p.samples, p.tokens = now, s.Step, 0, 0
	p.lastDraw = now
	line := p.line(s, r)
	if p.tty {
		fmt.Fprintf(p.w, "\r\x1b[2K%s", p.fit(line, s))
		p.drawn = true
		return nil
	}
	_, err := fmt.Fprintln(p.w, line)
	return err
}

// fit prepends a bar when the terminal is wide enough and cuts the line to
// the terminal width, so the redraw stays on one line.
func (p *Progress) fit(line string, s *State) string {
	const barLen = 20
	r := []rune(line)
	if s.MaxSteps > 0 && len(r)+barLen+3 < p.width {
		n := int(math.Round(float64(s.Step) / float64(s.MaxSteps) * barLen))
		n = min(max(n, 0), barLen)
		return fmt.Sprintf("[%s%s] %s", strings.Repeat("█", n), strings.Repeat("·", barLen-n), line)
	}
	if len(r) > p.width-1 {
		r = r[:p.width-1]
	}
	return string(r)
}

func (p *Progress) line(s *State, r StepResult) string {
	var b strings.Builder
	total := s.MaxSteps
	if total > 0 {
		fmt.Fprintf(&b, "step %d/%d", s.Step, total)
	} else {
		fmt.Fprintf(&b, "step %d", s.Step)
	}
	fmt.Fprintf(&b, " epoch %d", s.Epoch)
	switch {
	case r.Skipped && !math.IsNaN(r.Loss) && !math.IsInf(r.Loss, 0) && r.Metrics["train/loss_scale"] > 0:
		fmt.Fprintf(&b, " loss %.4g, step skipped (float16 gradients overflowed at loss scale %g)", r.Loss, r.Metrics["train/loss_scale"])
	case r.Skipped:
		b.WriteString(" loss skipped(non-finite)")
	default:
		fmt.Fprintf(&b, " loss %.4g", r.Loss)
	}
	fmt.Fprintf(&b, " lr %.3g %.2f it/s", r.LR, p.ips)
	if p.tps > 0 {
		fmt.Fprintf(&b, " %s tok/s", si(p.tps))
	} else if p.sps > 0 {
		fmt.Fprintf(&b, " %s samples/s", si(p.sps))
	}
	if total > 0 && p.ips > 0 {
		fmt.Fprintf(&b, " ETA %s", formatDuration(time.Duration(float64(total-s.Step)/p.ips*float64(time.Second))))
	}
	return b.String()
}

// OnValidationEnd prints the validation metrics on their own line.
func (p *Progress) OnValidationEnd(s *State, metrics map[string]float64) error {
	p.clear()
	var b strings.Builder
	fmt.Fprintf(&b, "validation at step %d:", s.Step)
	for _, k := range keys(metrics) {
		fmt.Fprintf(&b, " %s %.5g", k, metrics[k])
	}
	_, err := fmt.Fprintln(p.w, b.String())
	return err
}

// OnTrainEnd ends the bar line and prints the elapsed time and why the run
// stopped.
func (p *Progress) OnTrainEnd(s *State) error {
	if p.drawn {
		fmt.Fprintln(p.w)
		p.drawn = false
	}
	msg := fmt.Sprintf("training ended at step %d after %s", s.Step, formatDuration(p.now().Sub(p.start)))
	if s.StopReason != "" {
		msg += ": " + s.StopReason
	}
	_, err := fmt.Fprintln(p.w, msg)
	return err
}

func (p *Progress) clear() {
	if p.drawn {
		fmt.Fprint(p.w, "\r\x1b[2K")
		p.drawn = false
	}
}

// si formats a rate with a k/M suffix.
func si(x float64) string {
	switch {
	case x >= 1e6:
		return fmt.Sprintf("%.2fM", x/1e6)
	case x >= 1e3:
		return fmt.Sprintf("%.1fk", x/1e3)
	}
	return fmt.Sprintf("%.1f", x)
}

// formatDuration writes h:mm:ss.
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}
