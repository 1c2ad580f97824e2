package autodiff_test

import (
	"math"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestDropoutTrainingReusesMask: random masks defeat finite differences,
// so one run checks that the backward drops exactly what the forward
// dropped: where y = 0 the gradient is 0, elsewhere it is proj/(1-ratio)
// and y = x/(1-ratio). The mask output is added to the model's node.
func TestDropoutTrainingReusesMask(t *testing.T) {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: f32, Known: true, Shape: []int64{8, 64}})
	g.AddInput("proj", graph.Info{DType: f32, Known: true, Shape: []int64{8, 64}})
	b := graph.NewBuilder(g, "")
	y := b.Op("Dropout", []string{"x", b.Scalar(f32, 0.25), boolConst(b, nil, true)})
	loss := b.ReduceSum(b.Mul(y, "proj"), false)
	grads, err := autodiff.Gradients(g, loss, []string{"x"}, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	g.Outputs = []string{y, grads["x"]}
	g.Prune()
	m, _ := g.Marshal()
	orttest.Init(t)
	sess, err := ort.NewSessionFromBytes(m, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	xs, ps := make([]float64, 512), make([]float64, 512)
	for i := range xs {
		xs[i], ps[i] = 1+float64(i%7), float64(i%5)-2.5 // never 0
	}
	xv, pv := tensor(t, f32, []int64{8, 64}, xs), tensor(t, f32, []int64{8, 64}, ps)
	defer xv.Close()
	defer pv.Close()
	outs, err := sess.Run(map[string]*ort.Value{"x": xv, "proj": pv})
	if err != nil {
		t.Fatal(err)
	}
	yv, gv := values(outs[0]), values(outs[1])
	outs[0].Close()
	outs[1].Close()
	dropped := 0
	for i := range xs {
		if yv[i] == 0 {
			dropped++
			if gv[i] != 0 {
				t.Fatalf("element %d dropped in the forward but has gradient %g", i, gv[i])
			}
			continue
		}
		if math.Abs(yv[i]-xs[i]/0.75) > 1e-5 || math.Abs(gv[i]-ps[i]/0.75) > 1e-5 {
			t.Fatalf("element %d kept: y %g (x %g), grad %g (proj %g), want both scaled by 1/0.75", i, yv[i], xs[i], gv[i], ps[i])
		}
	}
	// 512 draws at p = 0.25: 128 ± 10 expected; far outside means no dropout.
	if dropped < 64 || dropped > 192 {
		t.Errorf("%d of 512 dropped at ratio 0.25", dropped)
	}
}
