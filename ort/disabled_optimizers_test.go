package ort_test

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestDisabledOptimizersEach: every name in Options.DisabledOptimizers is
// disabled, not only a list of one. The probe is ONNX Runtime's
// EliminateDropout rule, which deletes a Dropout whose mask nothing reads
// even in training mode: with the rule on, y = 2·Dropout(x/2, 0.5, true) is
// x everywhere; with it off (named alone, or after another name), half the
// elements are dropped and the others doubled.
func TestDisabledOptimizersEach(t *testing.T) {
	orttest.Init(t)
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{16, 16}})
	b := graph.NewBuilder(g, "")
	half := b.Mul("x", b.Scalar(ort.Float32, 0.5)) // a Dropout reading a graph input directly is never removed
	d := b.Op("Dropout", []string{half, b.Scalar(ort.Float32, 0.5), b.Const(graph.Raw("", ort.Bool, nil, []byte{1}))}, graph.AInt("seed", 7))
	g.Outputs = []string{b.Mul(d, b.Scalar(ort.Float32, 2))}
	model, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ones := make([]float32, 256)
	for i := range ones {
		ones[i] = 1
	}
	dropped := func(disabled []string) int {
		s, err := ort.NewSessionFromBytes(model, ort.Options{DisabledOptimizers: disabled})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		x, err := ort.NewTensor([]int64{16, 16}, ones)
		if err != nil {
			t.Fatal(err)
		}
		defer x.Close()
		outs, err := s.Run(map[string]*ort.Value{"x": x})
		if err != nil {
			t.Fatal(err)
		}
		defer outs[0].Close()
		y := ort.Data[float32](outs[0])
		n := 0
		for i, v := range y {
			switch v {
			case 0:
				n++
			case 1, 2:
			default:
				t.Fatalf("disabled %v: y[%d] = %g, want 0, 1 or 2", disabled, i, v)
			}
		}
		return n
	}
	if n := dropped(nil); n != 0 {
		t.Fatalf("with every optimizer on, %d of 256 dropped: ONNX Runtime kept the Dropout, so this test probes nothing", n)
	}
	for _, names := range [][]string{{"EliminateDropout"}, {"CommonSubexpressionElimination", "EliminateDropout"}, {"EliminateDropout", "ConstantFolding"}} {
		// 256 draws at p = 0.5: 128 ± 8 expected.
		if n := dropped(slices.Clone(names)); n < 80 || n > 176 {
			t.Errorf("DisabledOptimizers %q: %d of 256 dropped, want about half (the rule still ran)", names, n)
		}
	}
}
