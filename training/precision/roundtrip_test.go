package precision

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// roundTripGraph is what emulated float16 writes around a ReLU between
// two products, with the pairs DropExactRoundTrips must tell apart:
//
//   - h = round(x·w): the product's output rounded (inexact: kept);
//   - r = Relu(h) rounded again for the next product (exact: dropped);
//   - s = Where(r > 0, r, 0) rounded (exact, Where of exact values and a
//     zero: dropped);
//   - a = h + r rounded (a sum of exact values is not exact: kept);
//   - r rounded again at the end for a reader far away, after r's last
//     other reader (a recomputed copy: kept, r is not held longer).
func roundTripGraph(t *testing.T, low dtype.DType) *graph.Graph {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3, 4}})
	g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4, 4}})
	b := graph.NewBuilder(g, "")
	round := func(v string) string { return b.Cast(b.Cast(v, low), dtype.Float32) }
	h := round(b.MatMul(round("x"), round("w")))
	r := b.Relu(h)
	y := b.MatMul(round(r), round("w"))
	zero := b.Const(graph.Float32s("", nil, []float32{0}))
	s := round(b.Op("Where", []string{b.Op("Greater", []string{r, zero}), r, zero}))
	a := round(b.Add(h, r))
	lowR := b.Cast(r, low)
	far := b.Mul(b.Mul(y, s), a)
	out := b.Add(far, b.Cast(lowR, dtype.Float32))
	g.Outputs = []string{out}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	return g
}

// TestDropExactRoundTrips: in both low types, the pairs over exactly held
// values go and the others stay (see roundTripGraph), and the graph's
// outputs are bit for bit the same on ONNX Runtime's CPU provider.
func TestDropExactRoundTrips(t *testing.T) {
	orttest.Init(t)
	for _, low := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		t.Run(low.String(), func(t *testing.T) {
			before, g := roundTripGraph(t, low), roundTripGraph(t, low)
			if n := DropExactRoundTrips(g); n != 2 {
				t.Errorf("dropped %d pairs, want 2 (Relu's and Where's)", n)
			}
			g.Prune()
			casts := func(g *graph.Graph) int {
				n := 0
				for _, nd := range g.Nodes {
					if nd.Op == "Cast" {
						n++
					}
				}
				return n
			}
			if b, a := casts(before), casts(g); b-a != 4 {
				t.Errorf("%d Casts before, %d after; want 4 fewer", b, a)
			}
			r := rand.New(rand.NewPCG(3, 4))
			feed := map[string]*ort.Value{}
			for _, in := range before.Inputs {
				info := before.Info(in)
				v := make([]float32, ort.Numel(info.Shape))
				for i := range v {
					v[i] = float32(r.NormFloat64() * 3)
				}
				val, err := ort.NewTensor(info.Shape, v)
				if err != nil {
					t.Fatal(err)
				}
				defer val.Close()
				feed[in] = val
			}
			want, got := runOnCPU(t, before, feed), runOnCPU(t, g, feed)
			for k := range want {
				for i := range want[k] {
					if math.Float32bits(want[k][i]) != math.Float32bits(got[k][i]) {
						t.Fatalf("output %d [%d]: %g, was %g", k, i, got[k][i], want[k][i])
					}
				}
			}
		})
	}
}

// runOnCPU runs g on ONNX Runtime's CPU provider and returns its float32
// outputs.
func runOnCPU(t *testing.T, g *graph.Graph, feed map[string]*ort.Value) [][]float32 {
	t.Helper()
	return orttest.RunFloat32(t, g, feed, g.Outputs...)
}
