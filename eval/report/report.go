// Package report writes a self-contained HTML page on the quality of volume
// reconstructions: slices of every input, reconstruction and absolute error
// in three orthogonal views, per-volume and aggregated metric tables,
// training and validation curves, and the run's configuration and
// environment. Every picture is embedded as a PNG data URI and the styling
// is inline, so the file opens offline, without JavaScript, and can be
// mailed or archived on its own.
package report

import (
	_ "embed"
	"errors"
	"fmt"
	"html/template"
	"image"
	"io"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/ortrain/ortrain/training/safefile"
)

// Report is everything one report shows. Sections with no content are left
// out of the page.
type Report struct {
	Title string
	// Generated is shown under the title when not zero.
	Generated time.Time
	Volumes   []VolumeResult
	// MetricOrder lists the metric columns of the tables in order; metrics
	// not listed follow in alphabetical order.
	MetricOrder []string
	// Tables are further tables shown after the metric tables.
	Tables []Table
	Charts []Chart
	// Config is the resolved configuration (e.g. TOML), shown verbatim.
	Config string
	// Env lists environment facts: ortrain and ONNX Runtime versions,
	// execution provider, device name, ….
	Env []KV
}

// VolumeResult is one evaluated volume.
type VolumeResult struct {
	Name string
	// Group is what the volume's metrics summarise with ("step 400": the
	// checkpoint that reconstructed it); the summary never pools volumes
	// of different groups.
	Group string
	// Shape is the volume's size (axis 0, 1, 2) in C order, axis 2 fastest.
	// The views are named for a NIfTI volume read in that order (axis 0 =
	// NIfTI k, inferior–superior; axis 1 = j, posterior–anterior; axis 2 =
	// i, left–right): axial slices hold axis 0 fixed, coronal axis 1,
	// sagittal axis 2.
	Shape [3]int
	// Spacing is the voxel size along each axis in Shape's order, in mm
	// (NIfTI pixdim[3], pixdim[2], pixdim[1]). All zero means isotropic.
	Spacing [3]float64
	// SpacingUnknown says the file records no spacing (a .npy): the
	// slices are drawn with square voxels and no spacing is shown.
	SpacingUnknown bool
	// Input is the reference volume and Recon its reconstruction.
	Input, Recon []float32
	// InputLabel and ReconLabel name the rows of Input's and Recon's
	// slices ("input" and "reconstruction" when empty).
	InputLabel, ReconLabel string
	Metrics                map[string]float64
	// Slices are the indices along axes 0, 1 and 2 of the axial, coronal
	// and sagittal slices shown; nil means the middle slice of each axis.
	Slices []int
	// Window is the grey-level window [lo, hi] for input and
	// reconstruction; all zero means the input's finite range.
	Window [2]float64
	// ErrorMax is the absolute error drawn at the top of the colour scale;
	// 0 means the 99.5th percentile of the volume's absolute error, so a few
	// outliers do not make the rest of the map black.
	ErrorMax float64
}

// Table is a free-form table of text cells.
type Table struct {
	Title   string
	Columns []string
	Rows    [][]string
}

// KV is one key–value line of the environment section.
type KV struct {
	Key, Value string
}

// maxSide bounds the longer side of a slice picture in pixels; larger
// slices are downsampled for display.
const maxSide = 512

// The three views of a volume are shown side by side at one physical scale
// chosen so that together they are displayRowWidth CSS pixels wide, unless
// that makes one taller than displayMaxHeight. The browser rescales the
// pictures, so their own resolution stays that of the volume.
const (
	displayRowWidth  = 1000
	displayMaxHeight = 420
)

// errorQuantileDefault is the quantile of |recon − input| at the top of the
// error colour scale when VolumeResult.ErrorMax is 0.
const errorQuantileDefault = 0.995

//go:embed report.html.tmpl
var pageSource string

var page = template.Must(template.New("report").Parse(pageSource))

// Render writes r as one HTML page to w.
func Render(w io.Writer, r Report) error {
	m, err := build(r)
	if err != nil {
		return err
	}
	return page.Execute(w, m)
}

// Write renders r into the file at path atomically (safefile): readers
// see the old report, none, or the whole new one. An existing file is
// replaced only with overwrite.
func Write(path string, r Report, overwrite bool) error {
	if err := safefile.Write(path, overwrite, func(w io.Writer) error { return Render(w, r) }); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// model is the template's data.
type model struct {
	Title     string
	Generated string
	Metrics   []string
	Volumes   []volumeModel
	Summary   []summaryTable
	Tables    []Table
	Charts    []renderedChart
	Config    string
	Env       []KV
}

type volumeModel struct {
	Name       string
	Shape      string
	Spacing    string
	Values     []string
	Views      []viewModel
	Rows       []string
	Grey       scale
	Error      scale
	ErrorNote  string
	GreyNote   string
	SliceIndex [3]int
	ErrorName  string // what the error map shows: |recon − input|
}

// viewModel is one column of a volume's picture grid.
type viewModel struct {
	Name  string
	Index int
	// Width and Height are the pictures' pixel size, DisplayWidth and
	// DisplayHeight the CSS size they are shown at.
	Width, Height               int
	DisplayWidth, DisplayHeight int
	Images                      [3]template.URL // input, reconstruction, error
}

// scale is a labelled colour bar.
type scale struct {
	Src   template.URL
	Ticks []tick
}

type tick struct {
	Percent float64
	Label   string
}

// summaryTable summarises the volumes of one group.
type summaryTable struct {
	Group string // "" when the report has one group
	N     int    // volumes in the group
	Rows  []summaryRow
}

type summaryRow struct {
	Metric         string
	Mean, Std, Min string
	Max            string
	N              int
}

// build validates r and turns it into the template's data.
func build(r Report) (*model, error) {
	m := &model{Title: r.Title, Config: r.Config, Env: r.Env, Tables: r.Tables}
	if m.Title == "" {
		m.Title = "Reconstruction report"
	}
	if !r.Generated.IsZero() {
		m.Generated = r.Generated.Format(time.RFC3339)
	}
	for _, t := range r.Tables {
		for i, row := range t.Rows {
			if len(row) != len(t.Columns) {
				return nil, fmt.Errorf("report: table %q row %d has %d cells for %d columns", t.Title, i+1, len(row), len(t.Columns))
			}
		}
	}
	names := metricNames(r)
	for _, name := range names {
		m.Metrics = append(m.Metrics, withUnit(name))
	}
	for i, v := range r.Volumes {
		vm, err := buildVolume(v, names)
		if err != nil {
			name := v.Name
			if name == "" {
				name = "#" + strconv.Itoa(i+1)
			}
			return nil, fmt.Errorf("report: volume %s: %w", name, err)
		}
		m.Volumes = append(m.Volumes, vm)
	}
	var groups []string
	byGroup := map[string][]VolumeResult{}
	for _, v := range r.Volumes {
		if _, seen := byGroup[v.Group]; !seen {
			groups = append(groups, v.Group)
		}
		byGroup[v.Group] = append(byGroup[v.Group], v)
	}
	for _, g := range groups {
		m.Summary = append(m.Summary, summaryTable{Group: g, N: len(byGroup[g]), Rows: summarise(byGroup[g], names)})
	}
	for _, c := range r.Charts {
		rc, err := c.render()
		if err != nil {
			return nil, err
		}
		m.Charts = append(m.Charts, rc)
	}
	return m, nil
}

// metricNames returns the metric columns: r.MetricOrder, then every other
// metric any volume has, alphabetically.
func metricNames(r Report) []string {
	names := slices.Clone(r.MetricOrder)
	var rest []string
	for _, v := range r.Volumes {
		for k := range v.Metrics {
			if !slices.Contains(names, k) && !slices.Contains(rest, k) {
				rest = append(rest, k)
			}
		}
	}
	slices.Sort(rest)
	return append(names, rest...)
}

// units are the units of the metrics that have one.
var units = map[string]string{"PSNR": "dB"}

// withUnit is a metric's column heading: its name, and its unit if any.
func withUnit(name string) string {
	if u, ok := units[name]; ok {
		return name + " (" + u + ")"
	}
	return name
}

// format prints a metric value with five significant digits.
func format(v float64) string {
	return strconv.FormatFloat(v, 'g', 5, 64)
}

// summarise returns mean, sample standard deviation, minimum and maximum
// of each metric over the volumes that have a finite value for it.
func summarise(vols []VolumeResult, names []string) []summaryRow {
	if len(vols) == 0 {
		return nil
	}
	var rows []summaryRow
	for _, name := range names {
		var xs []float64
		for _, v := range vols {
			if x, ok := v.Metrics[name]; ok && !math.IsNaN(x) && !math.IsInf(x, 0) {
				xs = append(xs, x)
			}
		}
		row := summaryRow{Metric: withUnit(name), N: len(xs), Mean: "—", Std: "—", Min: "—", Max: "—"}
		if len(xs) > 0 {
			mean := 0.0
			for _, x := range xs {
				mean += x
			}
			mean /= float64(len(xs))
			row.Mean, row.Min, row.Max = format(mean), format(slices.Min(xs)), format(slices.Max(xs))
			if len(xs) > 1 {
				ss := 0.0
				for _, x := range xs {
					ss += (x - mean) * (x - mean)
				}
				row.Std = format(math.Sqrt(ss / float64(len(xs)-1)))
			}
		}
		rows = append(rows, row)
	}
	return rows
}

// errNoFinite reports a volume without a single finite voxel.
var errNoFinite = errors.New("input has no finite values")

// buildVolume validates v and renders its pictures.
func buildVolume(v VolumeResult, metrics []string) (volumeModel, error) {
	vm := volumeModel{Name: v.Name, Rows: []string{"input", "reconstruction", "|error|"}}
	if v.InputLabel != "" {
		vm.Rows[0] = v.InputLabel
	}
	if v.ReconLabel != "" {
		vm.Rows[1] = v.ReconLabel
	}
	vm.ErrorName = "|" + vm.Rows[1] + " − " + vm.Rows[0] + "|"
	n := v.Shape[0] * v.Shape[1] * v.Shape[2]
	switch {
	case v.Shape[0] < 1 || v.Shape[1] < 1 || v.Shape[2] < 1:
		return vm, fmt.Errorf("shape %v, want every axis ≥ 1", v.Shape)
	case len(v.Input) != n:
		return vm, fmt.Errorf("input has %d values, shape %v needs %d", len(v.Input), v.Shape, n)
	case len(v.Recon) != len(v.Input):
		return vm, fmt.Errorf("reconstruction has %d values, input of shape %v has %d", len(v.Recon), v.Shape, n)
	}
	spacing := v.Spacing
	if spacing == ([3]float64{}) {
		spacing = [3]float64{1, 1, 1}
	}
	for _, s := range spacing {
		if !(s > 0) || math.IsInf(s, 0) {
			return vm, fmt.Errorf("spacing %v, want finite values > 0 (or all zero for isotropic)", v.Spacing)
		}
	}
	idx := [3]int{v.Shape[0] / 2, v.Shape[1] / 2, v.Shape[2] / 2}
	if v.Slices != nil {
		if len(v.Slices) != 3 {
			return vm, fmt.Errorf("%d slice indices, want 3 (axes 0, 1, 2)", len(v.Slices))
		}
		for i, k := range v.Slices {
			if k < 0 || k >= v.Shape[i] {
				return vm, fmt.Errorf("slice index %d along axis %d outside shape %v", k, i, v.Shape)
			}
			idx[i] = k
		}
	}
	vm.SliceIndex = idx
	vm.Shape = fmt.Sprintf("%d × %d × %d", v.Shape[0], v.Shape[1], v.Shape[2])
	vm.Spacing = fmt.Sprintf("%.4g × %.4g × %.4g mm", spacing[0], spacing[1], spacing[2])
	if v.SpacingUnknown {
		vm.Spacing = "not recorded (drawn as square voxels)"
	}
	for _, name := range metrics {
		if x, ok := v.Metrics[name]; ok {
			vm.Values = append(vm.Values, format(x))
		} else {
			vm.Values = append(vm.Values, "—")
		}
	}

	lo, hi := v.Window[0], v.Window[1]
	if v.Window == ([2]float64{}) {
		var ok bool
		if lo, hi, ok = rangeOf(v.Input); !ok {
			return vm, errNoFinite
		}
		vm.GreyNote = "range of the " + vm.Rows[0]
	} else if !(lo < hi) || math.IsInf(lo, 0) || math.IsInf(hi, 0) {
		return vm, fmt.Errorf("grey window %v, want finite lo < hi", v.Window)
	} else {
		vm.GreyNote = "as given"
	}
	if lo == hi {
		// A constant volume: widen the window so it renders mid-grey.
		lo, hi = lo-1, hi+1
	}
	top := v.ErrorMax
	switch {
	case top < 0 || math.IsNaN(top) || math.IsInf(top, 0):
		return vm, fmt.Errorf("error scale maximum %v, want a finite value ≥ 0", top)
	case top == 0:
		top = errorQuantile(v.Input, v.Recon, errorQuantileDefault)
		vm.ErrorNote = "99.5th percentile"
	}
	if top == 0 {
		// A perfect reconstruction: any positive scale shows it all black.
		top = math.Max(1e-6, (hi-lo)*1e-3)
	}
	vm.Grey = scale{Ticks: ticks(lo, hi, false)}
	vm.Error = scale{Ticks: ticks(0, top, true)}
	var err error
	if vm.Grey.Src, err = dataURI(colourBar(256, 12, true)); err != nil {
		return vm, err
	}
	if vm.Error.Src, err = dataURI(colourBar(256, 12, false)); err != nil {
		return vm, err
	}

	// One physical pixel size for all three views keeps their anatomy at
	// the same scale; it is the finest spacing, coarsened if needed so no
	// picture exceeds maxSide pixels.
	pixel := min(spacing[0], spacing[1], spacing[2])
	longest := max(float64(v.Shape[0])*spacing[0], float64(v.Shape[1])*spacing[1], float64(v.Shape[2])*spacing[2])
	pixel = math.Max(pixel, longest/maxSide)
	// Physical width and height of each view, to fix the display scale.
	extent := [3][2]float64{
		{float64(v.Shape[2]) * spacing[2], float64(v.Shape[1]) * spacing[1]},
		{float64(v.Shape[2]) * spacing[2], float64(v.Shape[0]) * spacing[0]},
		{float64(v.Shape[1]) * spacing[1], float64(v.Shape[0]) * spacing[0]},
	}
	cssPerMM := displayRowWidth / (extent[0][0] + extent[1][0] + extent[2][0])
	cssPerMM = math.Min(cssPerMM, displayMaxHeight/max(extent[0][1], extent[1][1], extent[2][1]))
	for fixed := axial; fixed <= sagittal; fixed++ {
		in := extract(v.Input, v.Shape, spacing, fixed, idx[fixed])
		rec := extract(v.Recon, v.Shape, spacing, fixed, idx[fixed])
		diff := plane{w: in.w, h: in.h, dx: in.dx, dy: in.dy, pix: make([]float32, len(in.pix))}
		for i := range in.pix {
			diff.pix[i] = float32(math.Abs(float64(rec.pix[i]) - float64(in.pix[i])))
		}
		w, h := displaySize(in, pixel)
		vw := viewModel{Name: fixed.String(), Index: idx[fixed], Width: w, Height: h,
			DisplayWidth:  max(1, int(math.Round(extent[fixed][0]*cssPerMM))),
			DisplayHeight: max(1, int(math.Round(extent[fixed][1]*cssPerMM)))}
		pics := []image.Image{grey(resample(in, w, h), lo, hi), grey(resample(rec, w, h), lo, hi), coloured(resample(diff, w, h), top)}
		for i, p := range pics {
			if vw.Images[i], err = dataURI(p); err != nil {
				return vm, err
			}
		}
		vm.Views = append(vm.Views, vw)
	}
	return vm, nil
}

// ticks returns five labels evenly spread over [lo, hi]; with clipped the
// top one reads "≥ hi", as values above it are drawn in the top colour.
func ticks(lo, hi float64, clipped bool) []tick {
	var t []tick
	for i := range 5 {
		v := lo + (hi-lo)*float64(i)/4
		if math.Abs(v) < 1e-4*(hi-lo) {
			v = 0 // not −5.551e−17 from rounding, nor −0.005 of a −1000.09..1000.08 window
		}
		label := strconv.FormatFloat(v, 'g', 4, 64)
		if i == 4 && clipped {
			label = "≥ " + label
		}
		t = append(t, tick{Percent: float64(i) * 25, Label: label})
	}
	return t
}
