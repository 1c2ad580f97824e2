package loss_test

import (
	"errors"
	"math"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/loss"
)

// TestLossValues runs each loss on ONNX Runtime and compares it with the
// formula computed here in float64 (tolerance 1e-5: float32 rounding of a
// handful of terms).
func TestLossValues(t *testing.T) {
	pred := []float32{0.5, -1, 2, 0.25, -0.5, 1.5} // [2,3]
	tgt := []float32{1, 0, 1, 0, 0.5, 1}
	labels := []int64{2, 0}
	logsumexp := func(r []float32) float64 {
		s := 0.0
		for _, v := range r {
			s += math.Exp(float64(v))
		}
		return math.Log(s)
	}
	var mse, l1, bce float64
	for i := range pred {
		d := float64(pred[i] - tgt[i])
		mse += d * d / 6
		l1 += math.Abs(d) / 6
		x, y := float64(pred[i]), float64(tgt[i])
		bce += (math.Log(1+math.Exp(-x)) + (1-y)*x) / 6
	}
	ce := func(s float64) float64 {
		total := 0.0
		for n := 0; n < 2; n++ {
			row := pred[3*n : 3*n+3]
			lse := logsumexp(row)
			for c := 0; c < 3; c++ {
				w := s / 3
				if int64(c) == labels[n] {
					w += 1 - s
				}
				total -= w * (float64(row[c]) - lse)
			}
		}
		return total / 2
	}
	cases := []struct {
		spec loss.Spec
		want float64
	}{
		{loss.Spec{Kind: loss.MSE}, mse},
		{loss.Spec{Kind: loss.L1}, l1},
		{loss.Spec{Kind: loss.BCEWithLogits}, bce},
		{loss.Spec{Kind: loss.CrossEntropy}, ce(0)},
		{loss.Spec{Kind: loss.CrossEntropy, LabelSmoothing: 0.1}, ce(0.1)},
		// Class probabilities (MixUp/CutMix): one-hot rows give the index
		// loss; a mixed row weighs both classes' log-probabilities.
		{loss.Spec{Kind: loss.CrossEntropy, SoftTargets: true}, ce(0)},
		{loss.Spec{Kind: loss.CrossEntropy, SoftTargets: true, LabelSmoothing: 0.1}, ce(0.1)},
	}
	orttest.Init(t)
	for _, c := range cases {
		g := graph.New("m", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
		g.Outputs = []string{graph.NewBuilder(g, "").Identity("x")}
		if _, err := loss.Add(g, c.spec); err != nil {
			t.Fatal(err)
		}
		g.Outputs = []string{loss.Name}
		m, _ := g.Marshal()
		s, err := ort.NewSessionFromBytes(m, ort.Options{})
		if err != nil {
			t.Fatal(err)
		}
		x, _ := ort.NewTensor([]int64{2, 3}, pred)
		var target *ort.Value
		switch {
		case c.spec.SoftTargets:
			onehot := make([]float32, 6)
			for n, l := range labels {
				onehot[3*n+int(l)] = 1
			}
			target, _ = ort.NewTensor([]int64{2, 3}, onehot)
		case c.spec.Kind == loss.CrossEntropy:
			target, _ = ort.NewTensor([]int64{2}, labels)
		default:
			target, _ = ort.NewTensor([]int64{2, 3}, tgt)
		}
		out, err := s.Run(map[string]*ort.Value{"x": x, loss.Target: target})
		if err != nil {
			t.Fatal(err)
		}
		if got := float64(ort.Data[float32](out[0])[0]); math.Abs(got-c.want) > 1e-5 {
			t.Errorf("%+v: loss %g, want %g", c.spec, got, c.want)
		}
		out[0].Close()
		x.Close()
		target.Close()
		s.Close()
	}
}

func TestLossErrors(t *testing.T) {
	type badInput interface{ BadInput() bool }
	for _, c := range []struct {
		name string
		spec string
	}{{"unknown kind", "hinge"}, {"non-scalar output", "output:y"}, {"missing output", "output:nope"}} {
		t.Run(c.name, func(t *testing.T) {
			g := graph.New("m", graph.EmitOpset)
			g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
			b := graph.NewBuilder(g, "")
			b.OpInto("y", "Relu", []string{"x"})
			g.Outputs = []string{"y"}
			spec, err := loss.Parse(c.spec)
			if err == nil {
				_, err = loss.Add(g, spec)
			}
			var bi badInput
			if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
				t.Fatalf("err = %v, want a bad-input error", err)
			}
		})
	}
}
