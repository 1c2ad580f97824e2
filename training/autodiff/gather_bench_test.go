package autodiff_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// BenchmarkGatherGrad compares three ways to sum the rows of dY into a
// (vocabulary × width) gradient at token indices, the backward of an
// embedding or codebook Gather, on ONNX Runtime 1.30's CPU provider.
//
// Measured on 2 cores of an AMD EPYC (go test -bench GatherGrad
// -benchtime 20x), per run:
//
//	                               ScatterND  ScatterElements  OneHot+MatMul
//	embedding 2048 tok, 8192×256    1.6 ms        7.6 ms           95 ms
//	codebook  8192 pos,  512×64     0.22 ms       3.5 ms          7.8 ms
//
// so the Gather rule uses ScatterND (reduction add). ScatterElements needs
// the indices expanded to dY's shape; the one-hot product costs
// tokens·vocabulary·width multiply-adds. On CUDA, MatMul is far faster and
// ScatterND's duplicate indices serialise on atomics, so the order there is
// not known until measured.
func BenchmarkGatherGrad(b *testing.B) {
	orttest.Init(b)
	for _, sz := range []struct {
		name        string
		n, vocab, w int64
	}{{"embedding", 2048, 8192, 256}, {"codebook", 8192, 512, 64}} {
		for _, kind := range []string{"ScatterND", "ScatterElements", "OneHotMatMul"} {
			b.Run(fmt.Sprintf("%s/%s", sz.name, kind), func(b *testing.B) {
				g := graph.New("bench", graph.EmitOpset)
				g.AddInput("idx", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{sz.n}})
				g.AddInput("dy", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{sz.n, sz.w}})
				bl := graph.NewBuilder(g, "")
				zero, _ := graph.Floats("", ort.Float32, []int64{1}, []float64{0})
				zeros := bl.Op("ConstantOfShape", []string{bl.Ints(sz.vocab, sz.w)}, graph.ATensor("value", zero))
				var out string
				switch kind {
				case "ScatterND":
					out = bl.Op("ScatterND", []string{zeros, bl.Reshape("idx", bl.Ints(-1, 1)), "dy"}, graph.AString("reduction", "add"))
				case "ScatterElements":
					wide := bl.Op("Expand", []string{bl.Reshape("idx", bl.Ints(-1, 1)), bl.Ints(sz.n, sz.w)})
					out = bl.Op("ScatterElements", []string{zeros, wide, "dy"}, graph.AInt("axis", 0), graph.AString("reduction", "add"))
				case "OneHotMatMul":
					vals := bl.Const(graph.Float32s("", []int64{2}, []float32{0, 1}))
					oh := bl.Op("OneHot", []string{"idx", bl.Const(graph.Int64s("", nil, []int64{sz.vocab})), vals}, graph.AInt("axis", 0))
					out = bl.MatMul(oh, "dy")
				}
				g.Outputs = []string{out}
				m, _ := g.Marshal()
				sess, err := ort.NewSessionFromBytes(m, ort.Options{})
				if err != nil {
					b.Fatal(err)
				}
				defer sess.Close()
				r := rand.New(rand.NewPCG(1, 2))
				ids := make([]int64, sz.n)
				for i := range ids {
					ids[i] = r.Int64N(sz.vocab)
				}
				dy := make([]float32, sz.n*sz.w)
				iv, _ := ort.NewTensor([]int64{sz.n}, ids)
				dv, _ := ort.NewTensor([]int64{sz.n, sz.w}, dy)
				defer iv.Close()
				defer dv.Close()
				b.ResetTimer()
				for range b.N {
					outs, err := sess.Run(map[string]*ort.Value{"idx": iv, "dy": dv})
					if err != nil {
						b.Fatal(err)
					}
					outs[0].Close()
				}
			})
		}
	}
}
