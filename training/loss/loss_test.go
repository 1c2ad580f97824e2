package loss_test

import (
	"errors"
	"math"
	"strings"
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

// TestParse: a built-in loss, optionally on a named output (KIND:OUTPUT),
// or the model's own loss as output:NAME; FlagFor turns model.loss into
// the same forms, so that a bare output name and output:NAME are one.
func TestParse(t *testing.T) {
	for s, want := range map[string]loss.Spec{
		"mse":                          {Kind: loss.MSE},
		"cross_entropy":                {Kind: loss.CrossEntropy},
		"cross_entropy:logits":         {Kind: loss.CrossEntropy, Output: "logits"},
		"bce_with_logits:onnx::Gemm_5": {Kind: loss.BCEWithLogits, Output: "onnx::Gemm_5"},
		"output:total_loss":            {Kind: loss.Output, Output: "total_loss"},
		"output:onnx::Add_3":           {Kind: loss.Output, Output: "onnx::Add_3"},
	} {
		if got, err := loss.Parse(s); err != nil || got != want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", s, got, err, want)
		}
	}
	for _, s := range []string{"", "hinge", "mse:", "output:", "total_loss", "hinge:logits"} {
		if _, err := loss.Parse(s); err == nil {
			t.Errorf("Parse(%q) accepted", s)
		}
	}
	for in, want := range map[string]string{
		"mse":                  "mse",
		"cross_entropy:logits": "cross_entropy:logits",
		"loss":                 "output:loss",
		"total_loss":           "output:total_loss",
		"output:total_loss":    "output:total_loss",
		"onnx::Add_3":          "output:onnx::Add_3",
	} {
		if got := loss.FlagFor(in); got != want {
			t.Errorf("FlagFor(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestLossMessages: a built-in loss that cannot apply says which output it
// read (the first, unless named) and how to choose another; cross-entropy
// over one class is refused, pointing at bce_with_logits.
func TestLossMessages(t *testing.T) {
	model := func(shapes ...[]int64) *graph.Graph {
		g := graph.New("m", graph.EmitOpset)
		b := graph.NewBuilder(g, "")
		for i, s := range shapes {
			x := string(rune('a' + i))
			g.AddInput(x, graph.Info{DType: ort.Float32, Known: true, Shape: s})
			out := []string{"features", "logits", "third"}[i]
			b.OpInto(out, "Relu", []string{x})
			g.Outputs = append(g.Outputs, out)
		}
		return g
	}
	for _, c := range []struct {
		name, spec string
		g          *graph.Graph
		want       []string
	}{
		{"first output of several", "cross_entropy", model([]int64{-1}, []int64{-1, 3}),
			[]string{`first output "features"`, "cross_entropy:OUTPUT", "features, logits"}},
		{"named output", "cross_entropy:features", model([]int64{-1}, []int64{-1, 3}), []string{`output "features"`}},
		{"one class", "cross_entropy", model([]int64{-1, 1}), []string{"1 class", "bce_with_logits"}},
		{"one class, soft targets", "cross_entropy", model([]int64{-1, 1}), []string{"1 class", "bce_with_logits"}},
		{"sequence logits", "cross_entropy", model([]int64{-1, -1, 50}), []string{"Transpose"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			spec, err := loss.Parse(c.spec)
			if err != nil {
				t.Fatal(err)
			}
			spec.SoftTargets = strings.Contains(c.name, "soft")
			_, err = loss.Add(c.g, spec)
			var bi interface{ BadInput() bool }
			if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
				t.Fatalf("err = %v, want a bad-input error", err)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%q does not mention %q", err, w)
				}
			}
		})
	}
	g := model([]int64{-1}, []int64{-1, 3})
	spec, _ := loss.Parse("cross_entropy:logits")
	if _, err := loss.Add(g, spec); err != nil {
		t.Errorf("cross_entropy:logits: %v", err)
	}
	if c := loss.Classes(g, spec); c != 3 {
		t.Errorf("cross_entropy:logits scores %d classes, want 3", c)
	}
}
