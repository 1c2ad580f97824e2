package autodiff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// Tolerances of the finite-difference checks, |analytic - numeric| <=
// atol + rtol*|numeric|, with central differences (f(x+h) - f(x-h)) / 2h.
//
// float64 (every op whose ONNX Runtime CPU kernel has a double version):
// h = 1e-6 makes the truncation error h²·f”'/6 ~ 1e-12 and the rounding
// error ~ 1e-16·|L|/h ~ 1e-9 for the |L| ~ 10 losses here, so 1e-6 absolute
// and 1e-5 relative leave three orders of margin while any wrong rule
// (a missing term, a wrong axis, a transposed operand) errs by O(1).
//
// float32 (Conv, ConvTranspose, AveragePool, GlobalAveragePool have no
// double CPU kernel): the loss is linear in each input of these ops, so the
// truncation error vanishes and the error is rounding, ~ 6e-8·|L|/h; with
// h = 1e-2 that is ~ 1e-4, so 3e-3 absolute and 1e-2 relative.
var tolerances = map[ort.DType]struct{ h, atol, rtol float64 }{
	ort.Float64: {1e-6, 1e-6, 1e-5},
	ort.Float32: {1e-2, 3e-3, 1e-2},
}

// gen draws input values; kinks of Relu/Abs and ties of MaxPool are kept
// further than h away so the function is smooth where it is probed.
type gen int

const (
	normal    gen = iota // N(0,1)
	positive             // U(0.5, 2), for Log, Sqrt, divisors, Pow bases
	away                 // |x| in [0.2, 1] with random sign, away from kinks
	distinct             // a shuffled ramp with steps of 0.1, no ties
	unit                 // U(-0.8, 0.8), inside the domain of asin, acos, atanh
	aboveOne             // U(1.2, 3), inside acosh's
	wide                 // |x| in [0, 2.3] or [3.5, 5], random sign: both sides of kinks at ±0.5..±3
	zeroFirst            // away, but the first element exactly 0 (a product's zero)
)

type in struct {
	shape []int64
	g     gen
	fixed bool // a constant data input: no gradient asked for
}

type fdCase struct {
	name    string
	dtype   ort.DType
	ins     []in
	build   func(b *graph.Builder, x []string) string
	trainBN bool  // expand training-mode BatchNormalization first
	opset   int64 // the graph's ai.onnx opset; 0 is graph.EmitOpset
	// conv is the form of convolution gradients; "" is the default.
	conv autodiff.ConvForm
}

func op(name string, attrs ...*graph.Attr) func(b *graph.Builder, x []string) string {
	return func(b *graph.Builder, x []string) string { return b.Op(name, x, attrs...) }
}

func ins(g gen, shapes ...[]int64) []in {
	var v []in
	for _, s := range shapes {
		v = append(v, in{shape: s, g: g})
	}
	return v
}

func s(d ...int64) []int64 { return d }

var (
	ai  = graph.AInt
	ais = graph.AInts
)

func fill(r *rand.Rand, g gen, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		switch g {
		case normal:
			v[i] = r.NormFloat64()
		case positive:
			v[i] = 0.5 + 1.5*r.Float64()
		case away:
			v[i] = 0.2 + 0.8*r.Float64()
			if r.IntN(2) == 0 {
				v[i] = -v[i]
			}
		case distinct:
			v[i] = 0.1*float64(i) - 0.05*float64(n)
		case unit:
			v[i] = -0.8 + 1.6*r.Float64()
		case aboveOne:
			v[i] = 1.2 + 1.8*r.Float64()
		case zeroFirst:
			v[i] = 0.2 + 0.8*r.Float64()
			if i == 0 {
				v[i] = 0
			}
		case wide:
			v[i] = 2.3 * r.Float64()
			if r.IntN(2) == 0 {
				v[i] = 3.5 + 1.5*r.Float64()
			}
			if r.IntN(2) == 0 {
				v[i] = -v[i]
			}
		}
	}
	if g == distinct {
		r.Shuffle(n, func(i, j int) { v[i], v[j] = v[j], v[i] })
	}
	return v
}

func tensor(t testing.TB, dt ort.DType, shape []int64, v []float64) *ort.Value {
	var val *ort.Value
	var err error
	if dt == ort.Float64 {
		val, err = ort.NewTensor(shape, v)
	} else {
		f := make([]float32, len(v))
		for i, x := range v {
			f[i] = float32(x)
		}
		val, err = ort.NewTensor(shape, f)
	}
	if err != nil {
		t.Fatal(err)
	}
	return val
}

func values(v *ort.Value) []float64 {
	if v.DType() == ort.Float64 {
		return append([]float64(nil), ort.Data[float64](v)...)
	}
	f := ort.Data[float32](v)
	out := make([]float64, len(f))
	for i, x := range f {
		out[i] = float64(x)
	}
	return out
}

// runOutputs runs g on the CPU with feed and returns each graph output's
// values.
func runOutputs(t testing.TB, g *graph.Graph, feed map[string]*ort.Value) [][]float64 {
	t.Helper()
	return runOutputsWith(t, g, feed, ort.Options{})
}

// runOutputsWith is runOutputs in a session with opts.
func runOutputsWith(t testing.TB, g *graph.Graph, feed map[string]*ort.Value, opts ort.Options) [][]float64 {
	t.Helper()
	m, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	sess, err := ort.NewSessionFromBytes(m, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	outs, err := sess.Run(feed, g.Outputs...)
	if err != nil {
		t.Fatal(err)
	}
	var res [][]float64
	for _, o := range outs {
		res = append(res, values(o))
		o.Close()
	}
	return res
}

// checkFD builds loss = sum(op(x) * r) for a random projection r, asks
// autodiff for d loss / dx, and compares it element by element with
// central differences of the same ONNX Runtime forward graph.
func checkFD(t *testing.T, c fdCase, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	opset := c.opset
	if opset == 0 {
		opset = graph.EmitOpset
	}
	g := graph.New("fd", opset)
	var names, wrt []string
	for i, x := range c.ins {
		name := fmt.Sprintf("x%d", i)
		g.AddInput(name, graph.Info{DType: c.dtype, Known: true, Shape: x.shape})
		names = append(names, name)
		if !x.fixed {
			wrt = append(wrt, name)
		}
	}
	b := graph.NewBuilder(g, "fwd/")
	y := c.build(b, names)
	if c.trainBN {
		if _, err := autodiff.TrainingBatchNorm(g, func(s string) string { return s + ".out" }, false); err != nil {
			t.Fatal(err)
		}
	}
	yi := g.Info(y)
	if b.Err != nil || !yi.Static() {
		t.Fatalf("forward: %v, output %v", b.Err, yi)
	}
	proj, _ := graph.Floats("", c.dtype, yi.Shape, fill(r, normal, int(ort.Numel(yi.Shape))))
	loss := b.ReduceSum(b.Mul(y, b.Const(proj)), false)
	grads, err := autodiff.GradientsWith(g, loss, wrt, "grad/", autodiff.Options{ConvForm: c.conv})
	if err != nil {
		t.Fatal(err)
	}
	g.Outputs = []string{loss}
	for _, w := range wrt {
		g.Outputs = append(g.Outputs, grads[w])
	}
	g.Prune()
	g.StripStopGradients()
	m, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	orttest.Init(t)
	sess, err := ort.NewSessionFromBytes(m, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()

	data := make([][]float64, len(c.ins))
	feed := map[string]*ort.Value{}
	for i, x := range c.ins {
		data[i] = fill(r, x.g, int(ort.Numel(x.shape)))
		feed[names[i]] = tensor(t, c.dtype, x.shape, data[i])
	}
	outs, err := sess.Run(feed)
	if err != nil {
		t.Fatal(err)
	}
	analytic := map[string][]float64{}
	for i, w := range wrt {
		analytic[w] = values(outs[1+i])
		outs[1+i].Close()
	}
	outs[0].Close()
	lossAt := func() float64 {
		o, err := sess.Run(feed, loss)
		if err != nil {
			t.Fatal(err)
		}
		defer o[0].Close()
		return values(o[0])[0]
	}
	tol := tolerances[c.dtype]
	for i, x := range c.ins {
		if x.fixed {
			continue
		}
		a := analytic[names[i]]
		if len(a) != len(data[i]) {
			t.Fatalf("%s: gradient has %d elements, input %d", names[i], len(a), len(data[i]))
		}
		bad := 0
		for k := range data[i] {
			orig := data[i][k]
			at := func(v float64) float64 {
				data[i][k] = v
				feed[names[i]].Close()
				feed[names[i]] = tensor(t, c.dtype, x.shape, data[i])
				return lossAt()
			}
			num := (at(orig+tol.h) - at(orig-tol.h)) / (2 * tol.h)
			data[i][k] = orig
			if diff := math.Abs(a[k] - num); diff > tol.atol+tol.rtol*math.Abs(num) && bad < 5 {
				bad++
				t.Errorf("d loss/d %s[%d] = %.8g, central difference %.8g", names[i], k, a[k], num)
			}
		}
		feed[names[i]].Close()
		feed[names[i]] = tensor(t, c.dtype, x.shape, data[i])
	}
	for _, v := range feed {
		v.Close()
	}
}

func autodiffOps() []string { return autodiff.Ops() }
