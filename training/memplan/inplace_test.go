package memplan

import (
	"slices"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestInPlaceOpsMatchONNXRuntime runs a chain of four nodes of each op in
// ONNX Runtime and counts its allocator's allocations: a kernel that
// writes over its dying input needs two (the first node's output and the
// graph output), one that does not needs more (three where the third node
// takes the first one's dead buffer). inPlace must list exactly the first kind.
func TestInPlaceOpsMatchONNXRuntime(t *testing.T) {
	orttest.Init(t)
	const n = 1 << 16
	ops := []string{"Add", "Sub", "Mul", "Div", "Exp", "Log", "Neg", "Sqrt", "Abs", "Erf"}
	for op := range inPlace {
		ops = append(ops, op)
	}
	slices.Sort(ops)
	for _, op := range ops {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{n}})
		b := graph.NewBuilder(g, "")
		one := b.Scalar(ort.Float32, 1)
		v := "x"
		for range 4 {
			switch op {
			case "Add", "Sub", "Mul", "Div":
				v = b.Op(op, []string{v, one})
			default:
				v = b.Op(op, []string{v})
			}
		}
		g.Outputs = []string{v}
		model, err := g.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		if err := ort.NewCPUArena(); err != nil { // counts of this session alone
			t.Fatal(err)
		}
		s, err := ort.NewSessionFromBytes(model, ort.Options{Device: ort.CPU, DisableMemPattern: true})
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		x, _ := ort.NewEmpty(ort.Float32, []int64{n})
		out, err := s.Run(map[string]*ort.Value{"x": x})
		x.Close()
		if err != nil {
			t.Fatalf("%s: %v", op, err)
		}
		out[0].Close()
		st, ok, err := s.AllocatorStats()
		s.Close()
		if err != nil || !ok {
			t.Fatalf("%s: allocator statistics: %v (ok %v)", op, err, ok)
		}
		if writesOver := st.NumAllocs == 2; writesOver != inPlace[op] {
			t.Errorf("%s: %d allocations for a chain of 4 (in place: 2); inPlace[%s] = %v", op, st.NumAllocs, op, inPlace[op])
		}
	}
}
