package eval

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// fakeClock advances by a fixed amount per reading.
type fakeClock struct {
	t    time.Time
	step time.Duration
}

func (c *fakeClock) now() time.Time { c.t = c.t.Add(c.step); return c.t }

// TestProgressPrinter: off a terminal a line when a volume starts, one
// every Every while it runs (windows done/total, ETA) and one when it
// ends; on a terminal one line redrawn at most ten times a second; an
// overlap asking for many times the default's windows is said up front
// with the count, then with an estimate of the time.
func TestProgressPrinter(t *testing.T) {
	var out bytes.Buffer
	pp := NewProgressPrinter(&out, false)
	pp.now = (&fakeClock{t: time.Unix(0, 0), step: time.Second}).now
	p := VolumeProgress{Name: "case_1", Index: 1, Volumes: 2, Shape: [3]int{64, 64, 64}, Patch: [3]int{32, 32, 32}, Interval: [3]int{24, 24, 24},
		Overlap: 0.25, Windows: 27, DefaultWindows: 27}
	for done := 0; done <= 27; done++ {
		p.Done = done
		pp.Update(p)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 4 || lines[0] != "reconstructing volume 1/2 case_1: 27 windows of 32×32×32 voxels, every 24×24×24" ||
		!strings.HasPrefix(lines[1], "volume 1/2 case_1: windows 10/27 1/s ETA 0:00:17") ||
		!strings.HasPrefix(lines[2], "volume 1/2 case_1: windows 20/27") ||
		lines[3] != "reconstructed volume 1/2 case_1: 27 windows in 0:00:27" {
		t.Errorf("plain output:\n%s", out.String())
	}
	if strings.Contains(out.String(), "\r") || strings.Contains(out.String(), "note:") {
		t.Error("plain output has carriage returns, or a note on the default overlap")
	}

	// On a terminal, 10 windows a second for 100 windows: about ten redraws.
	out.Reset()
	pp = NewProgressPrinter(&out, true)
	pp.now = (&fakeClock{t: time.Unix(0, 0), step: 10 * time.Millisecond}).now
	p = VolumeProgress{Name: "ct", Index: 1, Volumes: 1, Patch: [3]int{32, 32, 32}, Interval: [3]int{1, 1, 1}, Overlap: 0.99, Windows: 100000, DefaultWindows: 27}
	for done := 0; done <= 100; done++ {
		p.Done = done
		pp.Update(p)
	}
	pp.Done()
	s := out.String()
	if n := strings.Count(s, "\r\x1b[2K["); n < 5 || n > 11 {
		t.Errorf("%d redraws in one second, want about 10:\n%q", n, s)
	}
	if !strings.Contains(s, "note: --overlap 0.99 asks for 100000 windows for this volume, 3704 times the 27 of the default 0.25") ||
		!strings.Contains(s, "note: at 100 windows/s this volume takes about 0:16:39 more") || !strings.Contains(s, "ct: windows 100/100000") {
		t.Errorf("terminal output on a huge window count:\n%q", s)
	}
	if !strings.HasSuffix(s, "\n") {
		t.Error("Done left the redrawn line open")
	}
}
