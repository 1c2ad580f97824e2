package autodiff_test

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// exactChecks names, per op, the tests on exact inputs for OPS.md.
var exactChecks = map[string][]string{
	"Resize":     {"TestResizeScalesAtRunTime (scales fed at run time: ONNX's test_resize_downsample_scales_linear and others)"},
	"GridSample": {"TestGridSampleOnPixelCentres (grids on pixel centres, the kinks: ONNX's test_gridsample_bilinear and others)"},
	"RNN":        {"TestRNNSeqLengthCase (ONNX's test_rnn_seq_length, float64)", "TestUnrolledSequenceLens (sequence_lens, against ONNX Runtime's op)"},
	"GRU":        {"TestUnrolledSequenceLens (sequence_lens, against ONNX Runtime's op)"},
	"LSTM":       {"TestUnrolledSequenceLens (sequence_lens, against ONNX Runtime's op)"},
}

// exactIn is an input of an exactCase with given values, as the single-node
// models of ONNX's backend test suite (Debian's libonnx-testdata) feed them:
// every input is a graph input, also the ones fixed here (Resize's scales,
// RNN's sequence_lens), which the rules then see only at run time, as in a
// training graph where float initializers become graph inputs.
type exactIn struct {
	name  string
	dt    ort.DType
	shape []int64
	v     []float64
	wrt   bool // differentiate with respect to it
	// kinks: the input may sit exactly on a kink of a piecewise linear
	// function (GridSample's grid on a pixel centre), where there is no
	// derivative and a central difference gives the mean of the two
	// one-sided slopes. The gradient must then lie between the slopes
	// (f(x+h) - f(x)) / h and (f(x) - f(x-h)) / h, each exact up to
	// rounding between kinks; where they agree this is equality.
	kinks bool
}

type exactCase struct {
	name  string
	opset int64
	ins   []exactIn
	build func(b *graph.Builder, x []string) string
	// out declares the output's shape where inference cannot know it
	// (scales fed at run time), as the test suite's model does.
	out []int64
	// unrolledFD differentiates the unrolled recurrence numerically
	// instead of ONNX Runtime's native op (which has no double kernel).
	unrolledFD bool
}

// measureExact returns, for each input differentiated, the gradient of
// loss = sum(y * r) (r a random projection) that autodiff builds, after
// UnrollRecurrent as `artifacts build` does, and the numeric derivative of
// the forward graph with the native op, with fd_test.go's step for the
// input's type (for an input with kinks, the one-sided slope nearest the
// gradient, or the gradient itself where it lies between the two).
func measureExact(t *testing.T, c exactCase) (analytic, numeric map[string][]float64) {
	t.Helper()
	orttest.Init(t)
	g := graph.New("exact", c.opset)
	var names, wrt []string
	for _, x := range c.ins {
		g.AddInput(x.name, graph.Info{DType: x.dt, Known: true, Shape: x.shape})
		names = append(names, x.name)
		if x.wrt {
			wrt = append(wrt, x.name)
		}
	}
	b := graph.NewBuilder(g, "fwd/")
	y := c.build(b, names)
	yi := g.Info(y)
	if c.out != nil {
		yi = graph.Info{DType: yi.DType, Known: true, Shape: c.out}
		g.Infos[y] = yi
	}
	if b.Err != nil || !yi.Static() {
		t.Fatalf("forward: %v, output %v", b.Err, yi)
	}
	r := rand.New(rand.NewPCG(3, 7))
	proj, _ := graph.Floats("", yi.DType, yi.Shape, fill(r, normal, int(ort.Numel(yi.Shape))))
	loss := b.ReduceSum(b.Mul(y, b.Const(proj)), false)
	fwd := g.Clone()
	fwd.Outputs = []string{loss}
	if c.unrolledFD {
		if err := autodiff.UnrollRecurrent(fwd); err != nil {
			t.Fatal(err)
		}
	}
	if err := autodiff.UnrollRecurrent(g); err != nil {
		t.Fatal(err)
	}
	grads, err := autodiff.Gradients(g, loss, wrt, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	g.Outputs = nil
	for _, w := range wrt {
		g.Outputs = append(g.Outputs, grads[w])
	}
	session := func(g *graph.Graph) *ort.Session {
		g.Prune()
		g.StripStopGradients()
		m, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		s, err := ort.NewSessionFromBytes(m, ort.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	gs, fs := session(g), session(fwd)

	feed := map[string]*ort.Value{}
	set := func(x exactIn) {
		if v := feed[x.name]; v != nil {
			v.Close()
		}
		var val *ort.Value
		var err error
		switch x.dt {
		case ort.Int32, ort.Int64:
			i32, i64 := make([]int32, len(x.v)), make([]int64, len(x.v))
			for k, f := range x.v {
				i32[k], i64[k] = int32(f), int64(f)
			}
			if x.dt == ort.Int32 {
				val, err = ort.NewTensor(x.shape, i32)
			} else {
				val, err = ort.NewTensor(x.shape, i64)
			}
		default:
			val = tensor(t, x.dt, x.shape, x.v)
		}
		if err != nil {
			t.Fatal(err)
		}
		feed[x.name] = val
	}
	for _, x := range c.ins {
		x.v = append([]float64(nil), x.v...)
		set(x)
	}
	defer func() {
		for _, v := range feed {
			v.Close()
		}
	}()
	outs, err := gs.Run(feed)
	if err != nil {
		t.Fatal(err)
	}
	analytic = map[string][]float64{}
	for i, w := range wrt {
		analytic[w] = values(outs[i])
		outs[i].Close()
	}
	lossAt := func() float64 {
		o, err := fs.Run(feed)
		if err != nil {
			t.Fatal(err)
		}
		defer o[0].Close()
		return values(o[0])[0]
	}
	numeric = map[string][]float64{}
	for _, x := range c.ins {
		if !x.wrt {
			continue
		}
		h := tolerances[x.dt].h
		if len(analytic[x.name]) != len(x.v) {
			t.Fatalf("%s: gradient has %d elements, input %d", x.name, len(analytic[x.name]), len(x.v))
		}
		v := append([]float64(nil), x.v...)
		x.v = v
		at := func(k int, d float64) float64 {
			orig := v[k]
			v[k] = orig + d
			set(x)
			l := lossAt()
			v[k] = orig
			return l
		}
		a := analytic[x.name]
		for k := range v {
			n := (at(k, h) - at(k, -h)) / (2 * h)
			if x.kinks {
				// The one-sided slope nearest the gradient: with it the
				// comparison below accepts anything between the two.
				f0 := at(k, 0)
				lo, hi := (f0-at(k, -h))/h, (at(k, h)-f0)/h
				n = min(max(a[k], min(lo, hi)), max(lo, hi))
			}
			numeric[x.name] = append(numeric[x.name], n)
		}
		set(x)
	}
	return analytic, numeric
}

// checkExact compares measureExact's gradients element by element with
// fd_test.go's tolerances and returns the relative error
// |analytic - numeric| / |numeric| over all inputs differentiated.
func checkExact(t *testing.T, c exactCase) float64 {
	t.Helper()
	a, num := measureExact(t, c)
	for _, x := range c.ins {
		if !x.wrt {
			continue
		}
		tol, bad := tolerances[x.dt], 0
		for k, n := range num[x.name] {
			if d := math.Abs(a[x.name][k] - n); d > tol.atol+tol.rtol*math.Abs(n) && bad < 5 {
				bad++
				t.Errorf("d loss/d %s[%d] = %.8g, numeric %.8g", x.name, k, a[x.name][k], n)
			}
		}
	}
	rel := relError(a, num)
	t.Logf("%s: |analytic - numeric| / |numeric| = %.3g", c.name, rel)
	return rel
}

// relError is |a - n| / |n| over the inputs in n.
func relError(a, n map[string][]float64) float64 {
	var n2, d2 float64
	for name, v := range n {
		for k, x := range v {
			n2 += x * x
			d2 += (a[name][k] - x) * (a[name][k] - x)
		}
	}
	return math.Sqrt(d2 / n2)
}

// ramp is 1, 2, ..., n: the inputs the test suite's examples write out.
func ramp(n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = float64(i + 1)
	}
	return v
}

// drawn is n values from gen g, seeded by the case's name.
func drawn(name string, g gen, n int) []float64 {
	var seed uint64
	for _, c := range name {
		seed = seed*31 + uint64(c)
	}
	return fill(rand.New(rand.NewPCG(seed, 11)), g, n)
}
