package precision

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestProbeCPU: ONNX Runtime's CPU provider has float32 kernels for a
// MatMul and a Relu (a session says so, asked once per question), and the
// probe never claims a float16 or bfloat16 kernel on it: ONNX Runtime
// would run such nodes in float32 and drop the rounding.
func TestProbeCPU(t *testing.T) {
	orttest.Init(t)
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3}})
	g.AddInput("w", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{3, 4}})
	b := graph.NewBuilder(g, "")
	b.Relu(b.MatMul("x", "w"))
	p := NewProbe(ort.Options{}, g.Opset)
	mm, relu := g.Nodes[0], g.Nodes[1]
	for _, c := range []struct {
		n    *graph.Node
		dt   ort.DType
		want bool
	}{{mm, ort.Float32, true}, {relu, ort.Float32, true}, {mm, ort.Float32, true}, {mm, ort.BFloat16, false}, {mm, ort.Float16, false}, {relu, ort.Float16, false}} {
		if got := p.Has(g, c.n, c.dt); got != c.want {
			t.Errorf("%s in %s: kernel %v, want %v (%v)", c.n.Op, c.dt, got, c.want, p.Missing)
		}
	}
	if len(p.seen) != 2 {
		t.Errorf("%d sessions for 2 questions", len(p.seen))
	}
}

// mlp: x → MatMul → +bias → Relu → LayerNorm → MatMul → Softmax, and a
// residual Add of the input with the first layer's output.
func mlp(t *testing.T) *graph.Graph {
	g := graph.New("t", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 5, 4}})
	for name, shape := range map[string][]int64{"w1": {4, 4}, "b1": {4}, "ls": {4}, "lb": {4}, "w2": {4, 3}} {
		g.AddInput(name, graph.Info{DType: ort.Float32, Known: true, Shape: shape})
	}
	b := graph.NewBuilder(g, "")
	h := b.Relu(b.Add(b.MatMul("x", "w1"), "b1"))
	r := b.Add("x", h)
	y := b.Op("Softmax", []string{b.MatMul(b.LayerNorm(r, "ls", "lb", -1, 1e-5), "w2")}, graph.AInt("axis", -1))
	g.Outputs = []string{y}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	return g
}

var weights = map[string]bool{"w1": true, "b1": true, "ls": true, "lb": true, "w2": true}

// TestAutocastClasses: matrix products and what follows them in low
// precision, the residual Add (float32 input + low branch) promoted to
// float32, LayerNorm and Softmax in float32, weights still float32
// inputs, the output float32.
func TestAutocastClasses(t *testing.T) {
	g := mlp(t)
	rep, err := Autocast(g, Options{Low: ort.BFloat16, Weights: weights})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]ort.DType{ // per op, in graph order
		"MatMul": {ort.BFloat16, ort.BFloat16}, "Relu": {ort.BFloat16}, "Add": {ort.BFloat16, ort.Float32},
		"LayerNormalization": {ort.Float32}, "Softmax": {ort.Float32},
	}
	got := map[string][]ort.DType{}
	for _, n := range g.Nodes {
		if n.Op != "Cast" {
			got[n.Op] = append(got[n.Op], g.Info(n.Outputs[0]).DType)
		}
	}
	for op, w := range want {
		if fmt := got[op]; len(fmt) != len(w) || fmt[0] != w[0] || fmt[len(fmt)-1] != w[len(w)-1] {
			t.Errorf("%s runs in %v, want %v", op, got[op], w)
		}
	}
	for w := range weights {
		if g.Info(w).DType != ort.Float32 {
			t.Errorf("weight %s became %s", w, g.Info(w).DType)
		}
	}
	if dt := g.Info(g.Outputs[0]).DType; dt != ort.Float32 {
		t.Errorf("output in %s", dt)
	}
	if rep.Low != 4 || rep.FP32 != 3 {
		t.Errorf("report %+v, want 4 low and 3 float32 nodes", rep)
	}

	// Without a bfloat16 Relu kernel the Relu stays float32, and says so.
	g = mlp(t)
	noRelu := func(n *graph.Node, dt ort.DType) bool { return n.Op != "Relu" }
	if rep, err = Autocast(g, Options{Low: ort.BFloat16, Weights: weights, Kernels: noRelu}); err != nil {
		t.Fatal(err)
	}
	for _, n := range g.Nodes {
		if n.Op == "Relu" && g.Info(n.Outputs[0]).DType != ort.Float32 {
			t.Errorf("Relu without a kernel runs in %s", g.Info(n.Outputs[0]).DType)
		}
	}
	if !slices.Equal(rep.NoKernel, []string{"Relu"}) {
		t.Errorf("no kernel for %v, want [Relu]", rep.NoKernel)
	}
}

// TestAutocastEmulatedOnCPU: on the CPU provider (no bfloat16 MatMul) the
// autocast graph runs, its MatMuls emulated; its output differs from the
// float32 graph's by bfloat16 rounding: not at all would mean nothing was
// rounded, more than a few percent that something else changed.
func TestAutocastEmulatedOnCPU(t *testing.T) {
	orttest.Init(t)
	plain := mlp(t)
	g := mlp(t)
	p := NewProbe(ort.Options{}, g.Opset)
	rep, err := Autocast(g, Options{Low: ort.BFloat16, Weights: weights, Kernels: p.Kernels(g)})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Emulated != 2 {
		t.Errorf("report %+v, want the 2 MatMuls emulated", rep)
	}
	feed := map[string]*ort.Value{}
	r := rand.New(rand.NewPCG(1, 2))
	for _, in := range plain.Inputs {
		info := plain.Info(in)
		v := make([]float32, ort.Numel(info.Shape))
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		val, err := ort.NewTensor(info.Shape, v)
		if err != nil {
			t.Fatal(err)
		}
		defer val.Close()
		feed[in] = val
	}
	run := func(g *graph.Graph) []float32 { return runOnCPU(t, g, feed)[0] }
	want, got := run(plain), run(g)
	worst := 0.0
	for i := range want {
		worst = max(worst, math.Abs(float64(got[i]-want[i])))
	}
	if worst == 0 || worst > 0.05 {
		t.Errorf("largest difference from float32 %g, want bfloat16 rounding (0 < d ≤ 0.05)", worst)
	}
	t.Logf("largest difference %g", worst)
}

// TestLossScalerFloorAndCap: backing off from 1 reaches the floor
// (float16's smallest subnormal, 2^-24) after 25 overflows, not before;
// growth stops short of float32's infinity.
func TestLossScalerFloorAndCap(t *testing.T) {
	s := NewLossScaler(1, 1)
	for i := 1; i <= 25; i++ {
		if s.Update(false) || s.AtFloor() != (i == 25) {
			t.Fatalf("overflow %d: scale %g, at floor %v", i, s.Scale, s.AtFloor())
		}
	}
	s = NewLossScaler(0x1p127, 1)
	for range 3 {
		if !s.Update(true) || math.IsInf(float64(float32(s.Scale)), 0) {
			t.Fatalf("growth from 2^127: scale %g", s.Scale)
		}
	}
}

// TestParseNamesTheFlag: a precision artifacts build does not know is
// refused naming --precision, with the lower-case spelling where that is
// one it knows.
func TestParseNamesTheFlag(t *testing.T) {
	for name, want := range map[string]string{"int8": `--precision "int8" is not one of fp32, bf16, fp16`, "FP16": "in lower case: --precision fp16"} {
		if _, _, err := Parse(name); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Parse(%q) = %v, want %q", name, err, want)
		}
	}
}

// TestAutocastBatchNormKeepsInputType: a BatchNorm after a low-precision
// Conv computes in float32 and hands its output back in the low type, as
// PyTorch's autocast runs batch_norm (in its input's type, cuDNN computing
// in float32): the ReLU after it runs low. After a float32 input, or in
// bfloat16 (see outputsInputType), it stays float32.
func TestAutocastBatchNormKeepsInputType(t *testing.T) {
	build := func(conv bool) *graph.Graph {
		g := graph.New("t", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3, 4, 4}})
		for name, shape := range map[string][]int64{"w": {3, 3, 1, 1}, "s": {3}, "b": {3}, "m": {3}, "v": {3}} {
			g.AddInput(name, graph.Info{DType: ort.Float32, Known: true, Shape: shape})
		}
		b := graph.NewBuilder(g, "")
		h := "x"
		if conv {
			h = b.Op("Conv", []string{"x", "w"})
		}
		g.Outputs = []string{b.Relu(b.Op("BatchNormalization", []string{h, "s", "b", "m", "v"}))}
		return g
	}
	ws := map[string]bool{"w": true, "s": true, "b": true, "m": true, "v": true}
	for _, c := range []struct {
		conv bool
		low  ort.DType
	}{{true, ort.Float16}, {false, ort.Float16}, {true, ort.BFloat16}} {
		conv := c.conv
		g := build(conv)
		if _, err := Autocast(g, Options{Low: c.low, Weights: ws}); err != nil {
			t.Fatal(err)
		}
		want := ort.Float32
		if conv && c.low == ort.Float16 {
			want = ort.Float16
		}
		for _, n := range g.Nodes {
			switch n.Op {
			case "BatchNormalization":
				if dt := g.Info(n.Inputs[0]).DType; dt != ort.Float32 {
					t.Errorf("conv %v: BatchNorm reads %s, want float32", conv, dt)
				}
			case "Relu":
				if dt := g.Info(n.Outputs[0]).DType; dt != want {
					t.Errorf("conv %v, %s: Relu after BatchNorm runs in %s, want %s", conv, c.low, dt, want)
				}
			}
		}
	}
}
