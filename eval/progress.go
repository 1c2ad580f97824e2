package eval

import (
	"fmt"
	"io"
	"math"
	"strings"
	"time"
)

// VolumeProgress is how far the sliding-window reconstruction of one
// volume has got.
type VolumeProgress struct {
	// Name labels the volume; Index (from 1) of Volumes is its place in
	// the set evaluated.
	Name           string
	Index, Volumes int
	Shape          [3]int // as reconstructed (padded to the patch)
	Patch          [3]int
	Interval       [3]int // the windows' scan interval per axis
	Overlap        float64
	// Windows is the number of windows of the volume, Done those
	// predicted so far: 0 when the volume starts, Windows when it ends.
	Windows, Done int
	// DefaultWindows is the number at the default overlap, 0.25.
	DefaultWindows int
}

// DefaultOverlap is MONAI's and eval's default window overlap.
const DefaultOverlap = 0.25

// ManyWindows is the ratio to the default overlap's window count above
// which ProgressPrinter says how many windows an overlap asks for.
const ManyWindows = 4

// ProgressPrinter shows VolumeProgress the way the trainer shows its
// steps: on a terminal one line redrawn at most ten times a second (a bar,
// windows done/total, windows/s, ETA); elsewhere (a log, a pipe) a line
// when a volume starts, every Every while it runs, and when it ends, so
// logs stay readable. An overlap that asks for many more windows than the
// default is said up front with the count, and with an estimate of the
// time once the first windows are timed.
type ProgressPrinter struct {
	w   io.Writer
	tty bool
	// Every is the interval of plain progress lines off a terminal.
	Every time.Duration
	now   func() time.Time

	start, last time.Time
	drawn       bool
	estimate    bool // a time estimate is owed for a volume of many windows
}

// NewProgressPrinter writes to w; tty says whether w is a terminal.
func NewProgressPrinter(w io.Writer, tty bool) *ProgressPrinter {
	return &ProgressPrinter{w: w, tty: tty, Every: 10 * time.Second, now: time.Now}
}

// Update reports p; a reconstruction calls it with Done = 0 first, then
// after every batch of windows.
func (pp *ProgressPrinter) Update(p VolumeProgress) {
	now := pp.now()
	if p.Done == 0 {
		pp.start, pp.last, pp.estimate = now, now, false
		pp.clear()
		fmt.Fprintf(pp.w, "reconstructing %s: %d windows of %s voxels, every %s\n",
			pp.volume(p), p.Windows, dims(p.Patch), dims(p.Interval))
		if p.DefaultWindows > 0 && p.Windows > ManyWindows*p.DefaultWindows {
			fmt.Fprintf(pp.w, "note: --overlap %g asks for %d windows for this volume, %.0f times the %d of the default %g (the time grows with the count; a lower --overlap needs fewer)\n",
				p.Overlap, p.Windows, float64(p.Windows)/float64(p.DefaultWindows), p.DefaultWindows, DefaultOverlap)
			pp.estimate = true
		}
		return
	}
	elapsed := now.Sub(pp.start)
	if p.Done >= p.Windows {
		pp.clear()
		fmt.Fprintf(pp.w, "reconstructed %s: %d windows in %s\n", pp.volume(p), p.Windows, formatDuration(elapsed))
		return
	}
	rate := float64(p.Done) / elapsed.Seconds()
	eta := time.Duration(float64(p.Windows-p.Done) / rate * float64(time.Second))
	if pp.estimate && elapsed >= time.Second {
		pp.estimate = false
		pp.clear()
		fmt.Fprintf(pp.w, "note: at %.3g windows/s this volume takes about %s more\n", rate, formatDuration(eta))
	}
	if pp.tty {
		if now.Sub(pp.last) < 100*time.Millisecond {
			return
		}
		pp.last = now
		const barLen = 20
		n := min(max(int(math.Round(float64(p.Done)/float64(p.Windows)*barLen)), 0), barLen)
		fmt.Fprintf(pp.w, "\r\x1b[2K[%s%s] %s: windows %d/%d %.3g/s ETA %s", strings.Repeat("█", n), strings.Repeat("·", barLen-n),
			pp.volume(p), p.Done, p.Windows, rate, formatDuration(eta))
		pp.drawn = true
		return
	}
	if now.Sub(pp.last) < pp.Every {
		return
	}
	pp.last = now
	fmt.Fprintf(pp.w, "%s: windows %d/%d %.3g/s ETA %s\n", pp.volume(p), p.Done, p.Windows, rate, formatDuration(eta))
}

// Done ends a redrawn line left on the terminal (a reconstruction that
// stopped before its last window).
func (pp *ProgressPrinter) Done() {
	if pp.drawn {
		fmt.Fprintln(pp.w)
		pp.drawn = false
	}
}

func (pp *ProgressPrinter) clear() {
	if pp.drawn {
		fmt.Fprint(pp.w, "\r\x1b[2K")
		pp.drawn = false
	}
}

func (pp *ProgressPrinter) volume(p VolumeProgress) string {
	if p.Volumes > 1 {
		return fmt.Sprintf("volume %d/%d %s", p.Index, p.Volumes, p.Name)
	}
	return p.Name
}

func dims(d [3]int) string {
	return fmt.Sprintf("%d×%d×%d", d[0], d[1], d[2])
}

// formatDuration writes h:mm:ss, as the trainer's progress line does.
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	return fmt.Sprintf("%d:%02d:%02d", s/3600, s/60%60, s%60)
}
