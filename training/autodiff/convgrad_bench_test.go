package autodiff_test

import (
	"math/rand/v2"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// BenchmarkConvWeightGrad3D times a 3×3×3 convolution over a volume
// (a VQ-GAN encoder layer's shape, smaller) and its weight gradient on
// ONNX Runtime's CPU provider: one GEMM per kernel offset (the offsets
// form's), or the gemm form's slabs with three or nine offsets gathered
// from each. On this 2-core machine all three took 170–250 ms a run, their
// order changing from run to run; the whole bench VQ-GAN's kernel time
// was 5 % more with slabs (their transposes), so the CPU keeps one GEMM
// per offset.
func BenchmarkConvWeightGrad3D(b *testing.B) {
	orttest.Init(b)
	x := []int64{1, 32, 32, 64, 64}
	w := []int64{32, 32, 3, 3, 3}
	for _, form := range []struct {
		name  string
		conv  autodiff.ConvForm
		slabs int64
	}{{"per-offset", autodiff.ConvFormOffsets, 3}, {"slabs-3", autodiff.ConvFormGEMM, 3}, {"slabs-9", autodiff.ConvFormGEMM, 9}} {
		b.Run(form.name, func(b *testing.B) {
			defer autodiff.SetMaxGatherSlabs(autodiff.SetMaxGatherSlabs(form.slabs))
			g := graph.New("bench", graph.EmitOpset)
			g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: x})
			g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: w})
			bl := graph.NewBuilder(g, "fwd/")
			y := bl.Op("Conv", []string{"x", "w"}, graph.AInts("pads", []int64{1, 1, 1, 1, 1, 1}))
			grads, err := autodiff.GradientsWith(g, bl.ReduceSum(bl.Mul(y, y), false), []string{"w"}, "grad/", autodiff.Options{ConvForm: form.conv})
			if err != nil {
				b.Fatal(err)
			}
			g.Outputs = []string{grads["w"]}
			g.Prune()
			m, err := g.Marshal()
			if err != nil {
				b.Fatal(err)
			}
			sess, err := ort.NewSessionFromBytes(m, ort.Options{})
			if err != nil {
				b.Fatal(err)
			}
			defer sess.Close()
			r := rand.New(rand.NewPCG(1, 2))
			feed := map[string]*ort.Value{}
			for name, shape := range map[string][]int64{"x": x, "w": w} {
				n := int64(1)
				for _, d := range shape {
					n *= d
				}
				vals := make([]float32, n)
				for i := range vals {
					vals[i] = float32(r.NormFloat64())
				}
				v, err := ort.NewTensor(shape, vals)
				if err != nil {
					b.Fatal(err)
				}
				defer v.Close()
				feed[name] = v
			}
			b.ResetTimer()
			for range b.N {
				outs, err := sess.Run(feed)
				if err != nil {
					b.Fatal(err)
				}
				for _, o := range outs {
					o.Close()
				}
			}
			b.ReportMetric(float64(len(g.Nodes)), "nodes")
		})
	}
}
