package report

import (
	"bytes"
	"fmt"
	"html/template"
	"math"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Series is one curve: Value[i] at Step[i], e.g. the training loss per
// step. Non-finite values (a diverged loss) are left out of the drawing and
// counted in the chart's caption.
type Series struct {
	Name  string
	Step  []float64
	Value []float64
}

// Chart is one plot of several series sharing axes.
type Chart struct {
	Title  string
	XLabel string // "step" when empty
	YLabel string
	// LogY draws the y axis on a log scale; values ≤ 0 are then left out
	// like non-finite ones.
	LogY   bool
	Series []Series
}

// Chart picture size in points, drawn at twice the CSS pixel density so it
// stays sharp on high-density screens.
const (
	chartWidth  = 7.5 * vg.Inch
	chartHeight = 3.2 * vg.Inch
	chartDPI    = 192
)

// renderedChart is what the template needs of a chart.
type renderedChart struct {
	Title         string
	Src           template.URL
	Width, Height int
	Omitted       int
	Legend        []legendEntry
}

// legendEntry is one series of a chart's legend, which the page draws below
// the picture: inside the plot it would hide the curves' ends, where the
// latest values are.
type legendEntry struct {
	Name   string
	Colour template.CSS
}

// render draws c with gonum/plot into a PNG data URI. A chart without any
// drawable point gets no picture (Src empty), only its caption.
func (c Chart) render() (renderedChart, error) {
	out := renderedChart{Title: c.Title}
	p := plot.New()
	p.Title.Text = c.Title
	p.X.Label.Text = c.XLabel
	if p.X.Label.Text == "" {
		p.X.Label.Text = "step"
	}
	p.Y.Label.Text = c.YLabel
	p.X.Tick.Marker = plainTicks{}
	p.Y.Tick.Marker = plainTicks{}
	if c.LogY {
		p.Y.Scale = plot.LogScale{}
		p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	for _, f := range []*font.Font{&p.Title.TextStyle.Font, &p.X.Label.TextStyle.Font, &p.Y.Label.TextStyle.Font, &p.X.Tick.Label.Font, &p.Y.Tick.Label.Font} {
		f.Variant = "Sans"
	}
	p.Add(plotter.NewGrid())
	points := 0
	lo, hi := math.Inf(1), math.Inf(-1)
	for i, s := range c.Series {
		if len(s.Step) != len(s.Value) {
			return out, fmt.Errorf("report: chart %q, series %q: %d steps but %d values", c.Title, s.Name, len(s.Step), len(s.Value))
		}
		xy := make(plotter.XYs, 0, len(s.Step))
		for j, v := range s.Value {
			x := s.Step[j]
			if math.IsNaN(v) || math.IsInf(v, 0) || math.IsNaN(x) || math.IsInf(x, 0) || (c.LogY && v <= 0) {
				out.Omitted++
				continue
			}
			xy = append(xy, plotter.XY{X: x, Y: v})
			lo, hi = min(lo, v), max(hi, v)
		}
		if len(xy) == 0 {
			continue
		}
		points += len(xy)
		l, err := plotter.NewLine(xy)
		if err != nil {
			return out, fmt.Errorf("report: chart %q, series %q: %w", c.Title, s.Name, err)
		}
		l.Color = plotutil.Color(i)
		l.Width = vg.Points(1.5)
		p.Add(l)
		if s.Name != "" {
			r, g, b, _ := l.Color.RGBA()
			out.Legend = append(out.Legend, legendEntry{Name: s.Name, Colour: template.CSS(fmt.Sprintf("#%02x%02x%02x", r>>8, g>>8, b>>8))})
		}
	}
	if points == 0 {
		return out, nil
	}
	if c.LogY && lo == hi {
		// One value (a single logged point, a constant curve): the plot
		// would widen the range by ±1, through 0 on a log axis.
		p.Y.Min, p.Y.Max = lo/2, hi*2
	}
	canvas := vgimg.NewWith(vgimg.UseWH(chartWidth, chartHeight), vgimg.UseDPI(chartDPI))
	p.Draw(draw.New(canvas))
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: canvas}).WriteTo(&buf); err != nil {
		return out, fmt.Errorf("report: chart %q: %w", c.Title, err)
	}
	img := canvas.Image().Bounds()
	out.Width, out.Height = img.Dx()/2, img.Dy()/2
	out.Src = pngURI(buf.Bytes())
	return out, nil
}

// plainTicks are gonum's default ticks labelled without trailing zeros:
// steps read 50, 75, 100, not 50.00, 75.00, 100.00.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ticks := plot.DefaultTicks{}.Ticks(lo, hi)
	for i, t := range ticks {
		switch {
		case t.Label == "":
		case t.Value == math.Trunc(t.Value) && math.Abs(t.Value) < 1e12:
			ticks[i].Label = strconv.FormatFloat(t.Value, 'f', 0, 64)
		default:
			ticks[i].Label = strconv.FormatFloat(t.Value, 'g', 6, 64)
		}
	}
	return ticks
}
