package autodiff_test

import (
	"math"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// The log-likelihood of targets, GatherElements over a LogSoftmax along
// the same axis (logsoftmaxgather.go), checked by finite differences: one
// index a row, several with repeats, and along the first axis.
func init() {
	ruleCases = append(ruleCases,
		fdCase{name: "LogSoftmax/into-GatherElements-one", dtype: f64, ins: ins(normal, s(2, 3, 5)), build: func(b *graph.Builder, x []string) string {
			return b.Op("GatherElements", []string{b.Op("LogSoftmax", []string{x[0]}, ai("axis", -1)), idx(b, s(2, 3, 1), 4, 0, 2, 2, 1, 3)}, ai("axis", 2))
		}},
		fdCase{name: "LogSoftmax/into-GatherElements-repeats", dtype: f64, ins: ins(normal, s(3, 4)), build: func(b *graph.Builder, x []string) string {
			return b.Op("GatherElements", []string{b.Op("LogSoftmax", []string{x[0]}, ai("axis", 1)), idx(b, s(3, 2), 1, 1, 0, 3, 2, 0)}, ai("axis", 1))
		}},
		fdCase{name: "LogSoftmax/into-GatherElements-axis0", dtype: f32, ins: ins(normal, s(4, 3)), build: func(b *graph.Builder, x []string) string {
			return b.Op("GatherElements", []string{b.Op("LogSoftmax", []string{x[0]}, ai("axis", 0)), idx(b, s(2, 3), 3, 0, 1, 1, 2, 3)}, ai("axis", 0))
		}},
	)
}

// TestLogSoftmaxGatherOnePass: a language model's target log-likelihoods
// get their logits' gradient from one ScatterElements with reduction add
// onto -softmax·g, with no zeros to scatter into and no sum over the
// vocabulary; a LogSoftmax read twice keeps the rules one by one.
func TestLogSoftmaxGatherOnePass(t *testing.T) {
	build := func(extraReader bool) map[string]int {
		g := graph.New("lm", graph.EmitOpset)
		g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 50}})
		g.AddInput("h", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 6, 8}})
		g.AddInput("target", graph.Info{DType: dtype.Int64, Known: true, Shape: []int64{2, 6, 1}})
		b := graph.NewBuilder(g, "fwd/")
		logp := b.Op("LogSoftmax", []string{b.MatMul("h", "w")}, graph.AInt("axis", -1))
		loss := b.ReduceSum(b.Op("GatherElements", []string{logp, "target"}, graph.AInt("axis", 2)), false)
		if extraReader {
			loss = b.Add(loss, b.ReduceSum(logp, false))
		}
		if _, err := autodiff.GradientsWith(g, loss, []string{"w"}, "grad/", autodiff.Options{}); err != nil {
			t.Fatal(err)
		}
		ops := map[string]int{}
		for _, n := range g.Nodes {
			if strings.HasPrefix(n.Name, "grad/") {
				ops[n.Op]++
			}
		}
		return ops
	}
	if ops := build(false); ops["ScatterElements"] != 1 || ops["ConstantOfShape"] != 0 || ops["Sub"] != 0 || ops["ReduceSum"] != 0 {
		t.Errorf("backward ops %v: want one ScatterElements, no zeros, no sum, no Sub", ops)
	}
	if ops := build(true); ops["Sub"] == 0 {
		t.Errorf("LogSoftmax read twice: backward ops %v, want the LogSoftmax rule's Sub", ops)
	}
}

// TestLogSoftmaxGatherFlattenedRows: logits and targets each flattened to
// rows of a batch not known before the run, as a language model's loss
// writes them; the rows cannot be shown equal from the shapes, so the sum
// is reshaped to the logits' rows (a run-time check), and the weight's
// gradient is Hᵀ·(onehot − softmax) as computed here in float64. Fewer
// target rows than logits rows (which GatherElements allows, the other
// rows getting no gradient) fail the run rather than broadcast the sums.
func TestLogSoftmaxGatherFlattenedRows(t *testing.T) {
	orttest.Init(t)
	const batch, seq, hid, vocab = 2, 3, 4, 7
	g := graph.New("lm", graph.EmitOpset)
	g.AddInput("h", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, seq, hid}})
	g.AddInput("target", graph.Info{DType: dtype.Int64, Known: true, Shape: []int64{-1, seq}})
	g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{hid, vocab}})
	g.Dims["h"], g.Dims["target"] = []string{"", "", ""}, []string{"", ""} // no names: nothing ties the batches
	b := graph.NewBuilder(g, "fwd/")
	logits := b.MatMul(b.Reshape("h", b.Ints(-1, hid)), "w")
	logp := b.Op("LogSoftmax", []string{logits}, graph.AInt("axis", -1))
	loss := b.ReduceSum(b.Op("GatherElements", []string{logp, b.Reshape("target", b.Ints(-1, 1))}, graph.AInt("axis", 1)), false)
	grads, err := autodiff.GradientsWith(g, loss, []string{"w"}, "grad/", autodiff.Options{})
	if err != nil {
		t.Fatal(err)
	}
	reshaped := false
	for _, n := range g.Nodes {
		if n.Op == "Sub" && strings.HasPrefix(n.Name, "grad/") {
			t.Fatalf("the rules one by one (%s): the pattern did not apply", n.Describe())
		}
		reshaped = reshaped || n.Op == "Reshape" && strings.HasPrefix(n.Name, "grad/")
	}
	if !reshaped {
		t.Fatal("no run-time reshape of the sum")
	}
	g.Outputs = []string{grads["w"]}
	hv := make([]float32, batch*seq*hid)
	for i := range hv {
		hv[i] = float32(math.Sin(float64(i)*0.7)) * 1.5
	}
	wv := make([]float32, hid*vocab)
	for i := range wv {
		wv[i] = float32(math.Cos(float64(i) * 0.3))
	}
	tv := []int64{3, 0, 6, 6, 2, 1}
	h, _ := ort.NewTensor([]int64{batch, seq, hid}, hv)
	tg, _ := ort.NewTensor([]int64{batch, seq}, tv)
	w, _ := ort.NewTensor([]int64{hid, vocab}, wv)
	defer h.Close()
	defer tg.Close()
	defer w.Close()
	got := orttest.RunFloat32(t, g, map[string]*ort.Value{"h": h, "target": tg, "w": w}, grads["w"])[0]
	want := make([]float64, hid*vocab)
	for r := range batch * seq {
		z := make([]float64, vocab)
		m := math.Inf(-1)
		for v := range vocab {
			for k := range hid {
				z[v] += float64(hv[r*hid+k]) * float64(wv[k*vocab+v])
			}
			m = max(m, z[v])
		}
		sum := 0.0
		for v := range z {
			z[v] = math.Exp(z[v] - m)
			sum += z[v]
		}
		for v := range vocab {
			d := -z[v] / sum
			if int64(v) == tv[r] {
				d++
			}
			for k := range hid {
				want[k*vocab+v] += float64(hv[r*hid+k]) * d
			}
		}
	}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-5*(1+math.Abs(want[i])) {
			t.Fatalf("dW[%d] = %g, want %g", i, got[i], want[i])
		}
	}
	// Fewer target rows than logits rows, which GatherElements takes: the
	// run fails (ONNX Runtime names the Mul after the reshape) instead of
	// broadcasting the sums.
	t3, _ := ort.NewTensor([]int64{1, seq}, tv[:seq])
	defer t3.Close()
	model, err := g.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	s, err := ort.NewSessionFromBytes(model, ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if outs, err := s.Run(map[string]*ort.Value{"h": h, "target": t3, "w": w}, grads["w"]); err == nil {
		for _, o := range outs {
			o.Close()
		}
		t.Error("logits of 6 rows and targets of 3 ran")
	}
}
