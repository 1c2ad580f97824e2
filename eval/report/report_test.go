package report

import (
	"bytes"
	"errors"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/net/html"

	"github.com/ortrain/ortrain/training/safefile"
)

// testReport returns a report of two phantoms, one anisotropic, with
// metrics, charts, a table, config and environment.
func testReport() Report {
	s1, s2 := [3]int{12, 20, 16}, [3]int{10, 24, 18}
	return Report{
		Title: "test <run>",
		Volumes: []VolumeResult{
			{Name: "isotropic", Shape: s1, Input: phantom(s1), Recon: degrade(phantom(s1), s1, 0.05, 1), Metrics: map[string]float64{"PSNR": 30, "SSIM": 0.9, "MAE": 0.02}},
			{Name: "anisotropic", Shape: s2, Spacing: [3]float64{5, 0.5, 1}, Input: phantom(s2), Recon: degrade(phantom(s2), s2, 0.05, 2), Metrics: map[string]float64{"PSNR": 32, "SSIM": 0.8}, Slices: []int{0, 23, 9}},
		},
		MetricOrder: []string{"PSNR"},
		Tables:      []Table{{Title: "extra", Columns: []string{"a", "b"}, Rows: [][]string{{"1", "<b>2</b>"}}}},
		Charts:      demoCharts(),
		Config:      "a = 1\nevil = \"</pre><script>alert(1)</script>\"\n",
		Env:         []KV{{"provider", "CPU"}},
	}
}

func render(t *testing.T, r Report) (string, *html.Node) {
	t.Helper()
	var b bytes.Buffer
	if err := Render(&b, r); err != nil {
		t.Fatal(err)
	}
	doc, err := html.Parse(bytes.NewReader(b.Bytes()))
	if err != nil {
		t.Fatalf("page does not parse: %v", err)
	}
	return b.String(), doc
}

// walk calls f on every element node below n.
func walk(n *html.Node, f func(*html.Node)) {
	if n.Type == html.ElementNode {
		f(n)
	}
	for c := n.FirstChild; c != nil; c = c.NextSibling {
		walk(c, f)
	}
}

func attr(n *html.Node, key string) string {
	for _, a := range n.Attr {
		if a.Key == key {
			return a.Val
		}
	}
	return ""
}

// TestRenderStructure checks the page's structure: one picture per slice
// and row, two scale bars per volume and one picture per chart, every
// picture an embedded PNG, no scripts and no external references, and the
// user's text escaped.
func TestRenderStructure(t *testing.T) {
	r := testReport()
	page, doc := render(t, r)
	var imgs, slices, scripts int
	var pres []string
	walk(doc, func(n *html.Node) {
		switch n.Data {
		case "img":
			imgs++
			if strings.Contains(attr(n, "alt"), " slice ") {
				slices++
			}
			if src := attr(n, "src"); !strings.HasPrefix(src, "data:image/png;base64,") {
				t.Errorf("img src %.40q is not an embedded PNG", src)
			}
		case "script":
			scripts++
		case "pre":
			if n.FirstChild != nil {
				pres = append(pres, n.FirstChild.Data)
			}
		case "link", "iframe", "object", "embed":
			t.Errorf("page has a <%s> element", n.Data)
		}
		for _, a := range n.Attr {
			if (a.Key == "href" || a.Key == "src") && strings.Contains(a.Val, "http") {
				t.Errorf("<%s %s=%.60q> refers outside the page", n.Data, a.Key, a.Val)
			}
		}
	})
	if want := 9 * len(r.Volumes); slices != want {
		t.Errorf("%d slice pictures, want %d (3 views × input, reconstruction, error per volume)", slices, want)
	}
	if want := 11*len(r.Volumes) + len(r.Charts); imgs != want {
		t.Errorf("%d pictures, want %d (9 slices + 2 scale bars per volume, 1 per chart)", imgs, want)
	}
	if scripts != 0 {
		t.Errorf("page has %d <script> elements, want none (the config tried to inject one)", scripts)
	}
	if len(pres) != 1 || pres[0] != r.Config {
		t.Errorf("config <pre> text = %q, want the config verbatim", pres)
	}
	for _, s := range []string{"test &lt;run&gt;", "&lt;b&gt;2&lt;/b&gt;", "evil = &#34;&lt;/pre&gt;&lt;script&gt;"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks escaped text %q", s)
		}
	}
	if strings.Contains(page, "ZgotmplZ") {
		t.Error("html/template rejected a value (ZgotmplZ in the page)")
	}
	// Metric columns: the ordered one first, then the rest alphabetically;
	// PSNR with its unit.
	if !strings.Contains(page, "<th>PSNR (dB)</th><th>MAE</th><th>SSIM</th>") {
		t.Error("per-volume header lacks the columns PSNR (dB), MAE, SSIM in that order")
	}
}

// TestSpacingAwareAspect checks that pictures of an anisotropic volume keep
// physical proportions: width/height of each view equals the ratio of its
// physical extents, in pixels and in display size.
func TestSpacingAwareAspect(t *testing.T) {
	r := testReport()
	v := r.Volumes[1] // shape 10×24×18, spacing 5, 0.5, 1 mm
	vm, err := buildVolume(v, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{
		"axial":    18 * 1 / (24 * 0.5),   // columns axis 2, rows axis 1
		"coronal":  18 * 1 / (10 * 5.0),   // columns axis 2, rows axis 0
		"sagittal": 24 * 0.5 / (10 * 5.0), // columns axis 1, rows axis 0
	}
	for _, view := range vm.Views {
		for _, wh := range [][2]int{{view.Width, view.Height}, {view.DisplayWidth, view.DisplayHeight}} {
			got := float64(wh[0]) / float64(wh[1])
			// Rounding to whole pixels allows half a pixel on each side.
			tol := want[view.Name] * (0.5/float64(wh[0]) + 0.5/float64(wh[1]))
			if math.Abs(got-want[view.Name]) > tol {
				t.Errorf("%s: %d×%d, aspect %.3f, want %.3f", view.Name, wh[0], wh[1], got, want[view.Name])
			}
		}
	}
}

// TestExtract checks slice shapes, which axes become rows and columns, the
// upward row axis and the spacings carried along.
func TestExtract(t *testing.T) {
	shape, spacing := [3]int{3, 4, 5}, [3]float64{3, 2, 1}
	vol := make([]float32, 60)
	for z := range 3 {
		for y := range 4 {
			for x := range 5 {
				vol[(z*4+y)*5+x] = float32(100*z + 10*y + x)
			}
		}
	}
	tests := []struct {
		view            view
		k, w, h         int
		dx, dy          float64
		topLeft, bottom float32 // first pixel of the top row and of the bottom row
	}{
		{axial, 1, 5, 4, 1, 2, 100 + 30, 100},
		{coronal, 2, 5, 3, 1, 3, 200 + 20, 20},
		{sagittal, 4, 4, 3, 2, 3, 200 + 4, 4},
	}
	for _, tc := range tests {
		p := extract(vol, shape, spacing, tc.view, tc.k)
		if p.w != tc.w || p.h != tc.h || len(p.pix) != tc.w*tc.h || p.dx != tc.dx || p.dy != tc.dy {
			t.Errorf("%v: %d×%d (%d values) spacing %v×%v, want %d×%d spacing %v×%v", tc.view, p.w, p.h, len(p.pix), p.dx, p.dy, tc.w, tc.h, tc.dx, tc.dy)
			continue
		}
		if p.pix[0] != tc.topLeft || p.pix[(p.h-1)*p.w] != tc.bottom {
			t.Errorf("%v: top-left %v, bottom-left %v, want %v and %v", tc.view, p.pix[0], p.pix[(p.h-1)*p.w], tc.topLeft, tc.bottom)
		}
	}
	// sagittal columns run along axis 1: the second pixel of the top row is
	// y = 1.
	if p := extract(vol, shape, spacing, sagittal, 4); p.pix[1] != 214 {
		t.Errorf("sagittal top row second pixel %v, want 214", p.pix[1])
	}
}

// TestResample checks that bilinear resampling keeps constants and linear
// ramps, and makes pixels square with displaySize.
func TestResample(t *testing.T) {
	p := plane{w: 4, h: 2, dx: 1, dy: 3, pix: []float32{0, 1, 2, 3, 0, 1, 2, 3}}
	w, h := displaySize(p, 1)
	if w != 4 || h != 6 {
		t.Fatalf("displaySize = %d×%d, want 4×6", w, h)
	}
	r := resample(p, w, h)
	for y := range h {
		for x := range w {
			if got := r.pix[y*w+x]; got != float32(x) {
				t.Fatalf("resampled (%d,%d) = %v, want %v (ramp along x, constant along y)", x, y, got, x)
			}
		}
	}
	r = resample(p, 8, 2) // half-pixel steps: 0, 0.25, 0.75, 1.25, … clamped at the ends
	want := []float32{0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3}
	for x, v := range want {
		if got := r.pix[x]; math.Abs(float64(got-v)) > 1e-6 {
			t.Errorf("8-wide resample[%d] = %v, want %v", x, got, v)
		}
	}
}

// luminance returns the relative luminance Y of an sRGB colour.
func luminance(c color.NRGBA) float64 {
	lin := func(v uint8) float64 {
		s := float64(v) / 255
		if s <= 0.04045 {
			return s / 12.92
		}
		return math.Pow((s+0.055)/1.055, 2.4)
	}
	return 0.2126*lin(c.R) + 0.7152*lin(c.G) + 0.0722*lin(c.B)
}

// TestColourMap checks the error map's endpoints (black for no error, white
// at the top) and that luminance never decreases, so brighter always means
// larger error.
func TestColourMap(t *testing.T) {
	if c := colourMap[0]; c.R > 2 || c.G > 2 || c.B > 2 || c.A != 255 {
		t.Errorf("colour map starts at %v, want black", c)
	}
	if c := colourMap[len(colourMap)-1]; c.R < 253 || c.G < 253 || c.B < 253 {
		t.Errorf("colour map ends at %v, want white", c)
	}
	// 8-bit rounding can make neighbours equal, or dip by a rounding step.
	for i := 1; i < len(colourMap); i++ {
		if a, b := luminance(colourMap[i-1]), luminance(colourMap[i]); b < a-1e-3 {
			t.Errorf("luminance falls from %.4f at %d to %.4f at %d", a, i-1, b, i)
		}
	}
	if a, b := luminance(colourMap[64]), luminance(colourMap[192]); !(b > a+0.2) {
		t.Errorf("luminance at 1/4 %.3f and 3/4 %.3f: want a clear rise", a, b)
	}
}

// TestSummary checks mean ± sample std over volumes, skipping missing and
// non-finite values.
func TestSummary(t *testing.T) {
	vols := []VolumeResult{
		{Metrics: map[string]float64{"a": 1, "b": 5}},
		{Metrics: map[string]float64{"a": 2, "b": math.NaN()}},
		{Metrics: map[string]float64{"a": 3}},
	}
	rows := summarise(vols, []string{"a", "b", "c"})
	want := []summaryRow{
		{Metric: "a", Mean: "2", Std: "1", Min: "1", Max: "3", N: 3},
		{Metric: "b", Mean: "5", Std: "—", Min: "5", Max: "5", N: 1},
		{Metric: "c", Mean: "—", Std: "—", Min: "—", Max: "—", N: 0},
	}
	for i := range want {
		if rows[i] != want[i] {
			t.Errorf("row %d = %+v, want %+v", i, rows[i], want[i])
		}
	}
}

// TestSummaryPerGroup: volumes of different groups (the first and the
// last checkpoint's reconstructions) are summarised apart, never averaged
// together.
func TestSummaryPerGroup(t *testing.T) {
	s := [3]int{4, 5, 6}
	vol := func(group string, psnr float64) VolumeResult {
		return VolumeResult{Name: "v", Group: group, Shape: s, Input: make([]float32, 120), Recon: make([]float32, 120),
			Metrics: map[string]float64{"PSNR": psnr}}
	}
	m, err := build(Report{Volumes: []VolumeResult{vol("step 10", 10), vol("step 10", 12), vol("step 400", 30), vol("step 400", 32)}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Summary) != 2 || m.Summary[0].Group != "step 10" || m.Summary[0].Rows[0].Mean != "11" || m.Summary[1].Rows[0].Mean != "31" {
		t.Errorf("summaries %+v: want step 10 (mean 11) and step 400 (mean 31) apart", m.Summary)
	}
	page, _ := render(t, Report{Volumes: []VolumeResult{vol("step 10", 10), vol("step 400", 30)}})
	if !strings.Contains(page, "Summary over 1 volume, step 10") || !strings.Contains(page, "Summary over 1 volume, step 400") {
		t.Errorf("the page does not head each group's summary")
	}
}

// TestRenderErrors checks that bad input gives an error that names what is
// wrong, never a panic or a half-written page.
func TestRenderErrors(t *testing.T) {
	s := [3]int{4, 5, 6}
	ok := func() VolumeResult {
		return VolumeResult{Name: "v", Shape: s, Input: make([]float32, 120), Recon: make([]float32, 120)}
	}
	tests := []struct {
		name string
		edit func(*Report)
		want string
	}{
		{"input length", func(r *Report) { r.Volumes[0].Input = make([]float32, 100) }, "volume v: input has 100 values, shape [4 5 6] needs 120"},
		{"recon length", func(r *Report) { r.Volumes[0].Recon = make([]float32, 119) }, "reconstruction has 119 values, input of shape [4 5 6] has 120"},
		{"shape", func(r *Report) { r.Volumes[0].Shape = [3]int{0, 5, 6} }, "shape [0 5 6], want every axis ≥ 1"},
		{"spacing", func(r *Report) { r.Volumes[0].Spacing = [3]float64{1, 0, 1} }, "spacing [1 0 1]"},
		{"slices count", func(r *Report) { r.Volumes[0].Slices = []int{1} }, "1 slice indices, want 3"},
		{"slice range", func(r *Report) { r.Volumes[0].Slices = []int{1, 5, 0} }, "slice index 5 along axis 1 outside shape [4 5 6]"},
		{"window", func(r *Report) { r.Volumes[0].Window = [2]float64{3, 1} }, "grey window [3 1]"},
		{"error max", func(r *Report) { r.Volumes[0].ErrorMax = -1 }, "error scale maximum -1"},
		{"no finite", func(r *Report) {
			for i := range r.Volumes[0].Input {
				r.Volumes[0].Input[i] = float32(math.NaN())
			}
		}, "input has no finite values"},
		{"unnamed", func(r *Report) { r.Volumes[0].Name = ""; r.Volumes[0].Input = nil }, "volume #1: input has 0 values"},
		{"table", func(r *Report) {
			r.Tables = []Table{{Title: "t", Columns: []string{"a"}, Rows: [][]string{{"1", "2"}}}}
		}, `table "t" row 1 has 2 cells for 1 columns`},
		{"series", func(r *Report) { r.Charts = []Chart{{Title: "c", Series: []Series{{Name: "s", Step: []float64{1}}}}} }, `chart "c", series "s": 1 steps but 0 values`},
	}
	for _, tc := range tests {
		r := Report{Volumes: []VolumeResult{ok()}}
		tc.edit(&r)
		var b bytes.Buffer
		err := Render(&b, r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to contain %q", tc.name, err, tc.want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: %d bytes written despite the error", tc.name, b.Len())
		}
	}
}

// TestChartWithoutData checks that a chart whose values are all
// non-drawable is reported in words instead of failing or drawing nothing.
func TestChartWithoutData(t *testing.T) {
	r := Report{Charts: []Chart{{Title: "diverged", LogY: true, Series: []Series{{Name: "loss", Step: []float64{1, 2}, Value: []float64{math.NaN(), -1}}}}}}
	page, _ := render(t, r)
	for _, s := range []string{"diverged: no finite values to draw", "2 points left out"} {
		if !strings.Contains(page, s) {
			t.Errorf("page lacks %q", s)
		}
	}
}

// TestLogChartOfOneValue: a run that logged one point (or a constant
// curve) draws it on a log axis instead of failing: the plot's own widening
// of a one-value range would reach through 0.
func TestLogChartOfOneValue(t *testing.T) {
	for _, values := range [][]float64{{0.5}, {3, 3, 3}} {
		steps := make([]float64, len(values))
		for i := range steps {
			steps[i] = float64(10 * (i + 1))
		}
		r := Report{Charts: []Chart{{Title: "loss", LogY: true, Series: []Series{{Name: "train/loss", Step: steps, Value: values}}}}}
		page, _ := render(t, r)
		if !strings.Contains(page, "data:image/png;base64,") {
			t.Errorf("values %v: no picture drawn", values)
		}
	}
}

// TestWrite checks that Write leaves exactly the report, readable by all,
// and no temporary file, and fails cleanly for a missing directory.
func TestWrite(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "report.html")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	var ex *safefile.ExistsError
	if err := Write(path, testReport(), false); !errors.As(err, &ex) {
		t.Fatalf("Write over an existing file without overwrite: %v", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Fatal("a refused Write changed the file")
	}
	if err := Write(path, testReport(), true); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only report.html", len(entries))
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o644 || st.Size() < 1000 {
		t.Errorf("report mode %v size %d, want 0644 and a whole page", st.Mode().Perm(), st.Size())
	}
	b, _ := os.ReadFile(path)
	if !bytes.HasSuffix(bytes.TrimSpace(b), []byte("</html>")) {
		t.Error("report does not end with </html>")
	}
	// A failing render leaves the old file alone and no temporary file.
	bad := testReport()
	bad.Volumes[0].Recon = nil
	if err := Write(path, bad, true); err == nil {
		t.Error("Write of a bad report succeeded")
	}
	if b2, _ := os.ReadFile(path); !bytes.Equal(b, b2) {
		t.Error("failed Write changed the existing report")
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed Write left %d entries", len(entries))
	}
	if err := Write(filepath.Join(dir, "missing", "r.html"), testReport(), true); err == nil {
		t.Error("Write into a missing directory succeeded")
	}
}

// TestTicks checks scale-bar labels: five evenly spaced, no rounding noise
// at zero, and "≥" on a clipped top.
func TestTicks(t *testing.T) {
	got := ticks(-0.1*3, 0.1*7, true)
	want := []string{"-0.3", "-0.05", "0.2", "0.45", "≥ 0.7"}
	for i, tk := range got {
		if tk.Label != want[i] || tk.Percent != float64(25*i) {
			t.Errorf("tick %d = %q at %v%%, want %q at %d%%", i, tk.Label, tk.Percent, want[i], 25*i)
		}
	}
	if l := ticks(-1.0/3, 1.0/3, false)[2].Label; l != "0" {
		t.Errorf("middle tick of a symmetric range = %q, want 0", l)
	}
}

// TestRowLabelsAndUnknownSpacing: the rows of the slices are named as the
// caller says (eval --reference shows the reference and the input, not a
// "reconstruction"), the error map says what it subtracts, and a volume
// whose file records no spacing (.npy) is not given one.
func TestRowLabelsAndUnknownSpacing(t *testing.T) {
	s := [3]int{12, 12, 12}
	r := Report{Volumes: []VolumeResult{{Name: "rec.npy", Shape: s, Input: phantom(s), Recon: degrade(phantom(s), s, 0.05, 1),
		InputLabel: "reference", ReconLabel: "input", SpacingUnknown: true, Metrics: map[string]float64{"PSNR": 30}}}}
	page, _ := render(t, r)
	for _, want := range []string{`<th class="row">reference</th>`, `<th class="row">input</th>`, "|input − reference| (black body)", "spacing not recorded"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	for _, bad := range []string{`<th class="row">reconstruction</th>`, "1 × 1 × 1 mm"} {
		if strings.Contains(page, bad) {
			t.Errorf("page has %q", bad)
		}
	}
}

// TestPlainTicks: tick labels carry no trailing zeros (steps read 50, not
// 50.00).
func TestPlainTicks(t *testing.T) {
	var labels []string
	for _, tk := range (plainTicks{}).Ticks(0, 100) {
		if tk.Label != "" {
			labels = append(labels, tk.Label)
		}
	}
	if len(labels) == 0 || strings.Join(labels, " ") != "0 50 100" {
		t.Errorf("tick labels %q, want 0 50 100", labels)
	}
	for _, tk := range (plainTicks{}).Ticks(0, 0.3) {
		if strings.HasSuffix(tk.Label, "0") && strings.Contains(tk.Label, ".") {
			t.Errorf("tick label %q has trailing zeros", tk.Label)
		}
	}
}
