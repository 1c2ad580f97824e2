package autodiff_test

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestHoistScalesExact: attention's scores scaled by 1/8 after the
// product (Mul) and by 8 (Div) have the scale moved onto q; a scale of 0.1
// and a product read twice stay. The loss and the gradients of q, k and v
// are bit for bit those of the graph as written, in float32 and with
// bfloat16-rounded operands, as emulated mixed precision rounds them. ONNX
// Runtime's MatMulScaleFusion is off for the comparison: it folds either
// form's scale into one FusedMatMul, which would hide a scale moved
// inexactly.
func TestHoistScalesExact(t *testing.T) {
	orttest.Init(t)
	for _, rounded := range []bool{false, true} {
		build := func(hoist bool) *graph.Graph {
			g := graph.New("attention", graph.EmitOpset)
			for _, in := range []string{"q", "k", "v"} {
				g.AddInput(in, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3, 8, 4}})
			}
			b := graph.NewBuilder(g, "")
			round := func(x string) string {
				if !rounded {
					return x
				}
				return b.Cast(b.Cast(x, dtype.BFloat16), dtype.Float32)
			}
			kt := b.Transpose("k", 0, 1, 3, 2)
			head := func(op string, scale float64) string {
				s := b.Op(op, []string{b.MatMul(round("q"), round(kt)), b.Scalar(dtype.Float32, scale)})
				return b.MatMul(round(b.Op("Softmax", []string{round(s)}, graph.AInt("axis", -1))), round("v"))
			}
			a, c, d := head("Mul", 0.125), head("Div", 8), head("Mul", 0.1)
			shared := b.MatMul("q", kt)
			e := b.Add(b.Mul(shared, b.Scalar(dtype.Float32, 0.5)), shared)
			loss := b.ReduceSum(b.Add(b.Add(b.Mul(a, c), d), b.ReduceSum(e, true, 3)), false)
			if b.Err != nil {
				t.Fatal(b.Err)
			}
			if hoist {
				if n := g.HoistScales(); n != 2 {
					t.Errorf("rounded %v: %d scales hoisted, want 2 (by 1/8 and by 8)", rounded, n)
				}
			}
			grads, err := autodiff.GradientsWith(g, loss, []string{"q", "k", "v"}, "grad/", autodiff.Options{})
			if err != nil {
				t.Fatal(err)
			}
			g.Outputs = []string{loss, grads["q"], grads["k"], grads["v"]}
			return g
		}
		feed := map[string]*ort.Value{}
		r := rand.New(rand.NewPCG(7, 8))
		for _, in := range []string{"q", "k", "v"} {
			vals := make([]float32, 2*3*8*4)
			for i := range vals {
				vals[i] = float32(r.NormFloat64() * 2)
			}
			v, err := ort.NewTensor([]int64{2, 3, 8, 4}, vals)
			if err != nil {
				t.Fatal(err)
			}
			defer v.Close()
			feed[in] = v
		}
		unfused := ort.Options{DisabledOptimizers: []string{"MatMulScaleFusion"}}
		sameBits(t, fmt.Sprintf("rounded %v", rounded), runOutputsWith(t, build(false), feed, unfused), runOutputsWith(t, build(true), feed, unfused))
	}
}

// TestSinkScalesExact: a GELU MLP, MatMul(gelu(MatMul(x, W1)), W2), with
// GELU as the builder and torch.onnx write it (½ on x, or on x·A), has the
// ½ moved onto W2, so the chain's gradient is differentiated without a
// scale. The loss and the gradients of x, W1 and W2 are bit for bit those
// of the graph as written, in float32 and with bfloat16-rounded operands.
func TestSinkScalesExact(t *testing.T) {
	orttest.Init(t)
	for _, rounded := range []bool{false, true} {
		for _, torchForm := range []bool{false, true} {
			build := func(sink bool) *graph.Graph {
				g := graph.New("mlp", graph.EmitOpset)
				g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 8, 4}})
				g.AddInput("w1", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4, 16}})
				g.AddInput("w2", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{16, 4}})
				b := graph.NewBuilder(g, "")
				round := func(x string) string {
					if !rounded {
						return x
					}
					return b.Cast(b.Cast(x, dtype.BFloat16), dtype.Float32)
				}
				h := round(b.MatMul(round("x"), round("w1")))
				a := b.Add(b.Erf(b.Div(h, b.Scalar(dtype.Float32, math.Sqrt2))), b.Scalar(dtype.Float32, 1))
				var gelu string
				if torchForm {
					gelu = b.Mul(b.Mul(h, a), b.Scalar(dtype.Float32, 0.5))
				} else {
					gelu = b.Mul(b.Mul(h, b.Scalar(dtype.Float32, 0.5)), a)
				}
				y := b.MatMul(gelu, "w2")
				loss := b.ReduceSum(b.Mul(y, y), false)
				if b.Err != nil {
					t.Fatal(b.Err)
				}
				if sink {
					if n := g.SinkScales(); n != 1 {
						t.Errorf("rounded %v, torch form %v: %d scales moved, want 1", rounded, torchForm, n)
					}
				}
				grads, err := autodiff.GradientsWith(g, loss, []string{"x", "w1", "w2"}, "grad/", autodiff.Options{})
				if err != nil {
					t.Fatal(err)
				}
				g.Outputs = []string{loss, grads["x"], grads["w1"], grads["w2"]}
				return g
			}
			feed := map[string]*ort.Value{}
			r := rand.New(rand.NewPCG(9, 10))
			for _, in := range []struct {
				name  string
				shape []int64
			}{{"x", []int64{2, 8, 4}}, {"w1", []int64{4, 16}}, {"w2", []int64{16, 4}}} {
				name, shape := in.name, in.shape
				vals := make([]float32, dtype.Numel(shape))
				for i := range vals {
					vals[i] = float32(r.NormFloat64())
				}
				v, err := ort.NewTensor(shape, vals)
				if err != nil {
					t.Fatal(err)
				}
				defer v.Close()
				feed[name] = v
			}
			unfused := ort.Options{DisabledOptimizers: []string{"MatMulScaleFusion"}}
			sameBits(t, fmt.Sprintf("rounded %v, torch form %v", rounded, torchForm),
				runOutputsWith(t, build(false), feed, unfused), runOutputsWith(t, build(true), feed, unfused))
		}
	}
}

// sameBits fails t unless every output of got has want's bits: the graph
// as written (want) against the one with its scales moved.
func sameBits(t *testing.T, what string, want, got [][]float64) {
	t.Helper()
	for k := range want {
		for i := range want[k] {
			if math.Float64bits(want[k][i]) != math.Float64bits(got[k][i]) {
				t.Fatalf("%s: output %d [%d] is %g with the scale moved, %g as written", what, k, i, got[k][i], want[k][i])
			}
		}
	}
}
