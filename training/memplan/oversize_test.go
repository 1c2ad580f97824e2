package memplan_test

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/memplan"
)

// TestOversize: rows [batch, 8] projected onto 2^16 columns make a
// [batch, 2^16] product and its log-softmax, over 2^31 − 1 elements from a
// batch of 32768 (2^31) and under it at 32767; so are the zeros-like buffer
// and the scatter into it, whose shapes inference leaves unknown. Shapes
// only: nothing is allocated. The gathered [batch, 1] column stays under.
func TestOversize(t *testing.T) {
	const cols = 1 << 16
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 8}})
	g.AddInput("idx", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{-1, 1}})
	g.Dims["x"], g.Dims["idx"] = []string{"batch", ""}, []string{"batch", ""}
	g.AddInitializer(graph.Float32s("w", []int64{8, cols}, make([]float32, 8*cols)))
	b := graph.NewBuilder(g, "")
	logits := b.MatMul("x", "w")
	logp := b.Op("LogSoftmax", []string{logits}, graph.AInt("axis", -1))
	picked := b.Op("GatherElements", []string{logp, "idx"}, graph.AInt("axis", 1))
	back := b.Op("ScatterElements", []string{b.ZerosLike(logp), "idx", picked}, graph.AInt("axis", 1))
	g.Outputs = []string{b.ReduceSum(picked, false), b.ReduceSum(back, false)}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	at := func(batch int64) []memplan.Large {
		cg, err := memplan.Concrete(g, map[string]int64{"batch": batch})
		if err != nil {
			t.Fatal(err)
		}
		return memplan.Oversize(cg, memplan.CUDAMaxElements)
	}
	over := at(32768)
	var ops []string
	for _, l := range over {
		ops = append(ops, l.Op)
		if l.Elements != 32768*cols || !slices.Equal(l.Shape, []int64{32768, cols}) {
			t.Errorf("%s (%s): %v, %d elements; want [32768 %d], %d", l.Name, l.Op, l.Shape, l.Elements, cols, 32768*cols)
		}
	}
	if want := []string{"MatMul", "LogSoftmax", "ConstantOfShape", "ScatterElements"}; !slices.Equal(ops, want) {
		t.Errorf("over the limit at batch 32768: %v, want %v", ops, want)
	}
	if over := at(32767); len(over) != 0 {
		t.Errorf("at batch 32767 (2^31 − 2^16 elements): %+v, want none", over)
	}
}
