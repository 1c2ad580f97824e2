package plan

import (
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// TestScalesFoldIntoMatMul: a Mul or Div by a constant scalar of a
// MatMul's product read by it alone, or of an operand only the MatMul
// reads, is priced as ONNX Runtime runs it after MatMulScaleFusion: no
// kernel; a scale of a product something else reads too, and a scale by a
// tensor, are kernels.
func TestScalesFoldIntoMatMul(t *testing.T) {
	g := graph.New("scales", graph.EmitOpset)
	for _, in := range []string{"q", "k"} {
		g.AddInput(in, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{64, 64}})
	}
	b := graph.NewBuilder(g, "")
	half := b.Scalar(dtype.Float32, 0.5)
	after := b.Mul(b.MatMul("q", "k"), half)                                        // folded
	before := b.MatMul(b.Op("Div", []string{"q", b.Scalar(dtype.Float32, 8)}), "k") // folded
	shared := b.MatMul("q", "k")
	kept := b.Add(b.Mul(shared, half), shared) // read twice: a kernel
	byTensor := b.Mul(b.MatMul("q", "k"), "k") // not a scalar: a kernel
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.Outputs = []string{after, before, kept, byTensor}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	kernels := map[string]int{}
	for _, c := range costGraph(g, gpu, StepOptions{}) {
		if c.where != elided {
			kernels[c.op]++
		}
	}
	if kernels["Mul"] != 2 || kernels["Div"] != 0 || kernels["MatMul"] != 4 {
		t.Errorf("kernels %v; want 4 MatMul, 2 Mul (the shared product's and the tensor's scale), no Div", kernels)
	}
}

// TestBiasSoftmaxInPlan: a float32 attention's mask Add read by its
// Softmax alone is priced as ONNX Runtime runs it after BiasSoftmaxFusion,
// within the Softmax (which then reads the mask too); a bfloat16 one, and
// one whose sum something else reads as well, are kernels of their own.
func TestBiasSoftmaxInPlan(t *testing.T) {
	g := graph.New("bias", graph.EmitOpset)
	for _, in := range []struct {
		name  string
		dt    dtype.DType
		shape []int64
	}{
		{"s32", dtype.Float32, []int64{2, 3, 64, 64}}, {"m32", dtype.Float32, []int64{64, 64}},
		{"sbf", dtype.BFloat16, []int64{2, 3, 64, 64}}, {"mbf", dtype.BFloat16, []int64{64, 64}},
	} {
		g.AddInput(in.name, graph.Info{DType: in.dt, Known: true, Shape: in.shape})
	}
	b := graph.NewBuilder(g, "")
	softmax := func(x string) string { return b.Op("Softmax", []string{x}, graph.AInt("axis", -1)) }
	shared := b.Add("s32", "m32")
	g.Outputs = []string{softmax(b.Add("s32", "m32")), softmax(b.Add("sbf", "mbf")), softmax(shared), b.Mul(shared, shared)}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	adds := 0
	var fusedBytes, plainBytes float64
	for i, c := range costGraph(g, gpu, StepOptions{}) {
		if c.op == "Add" && c.where != elided {
			adds++
		}
		if c.op == "Softmax" && g.Nodes[i].Outputs[0] == g.Outputs[0] {
			fusedBytes = c.bytes
		}
		if c.op == "Softmax" && g.Nodes[i].Outputs[0] == g.Outputs[2] {
			plainBytes = c.bytes
		}
	}
	if adds != 2 {
		t.Errorf("%d Add kernels, want 2 (the bfloat16 mask's and the shared sum's)", adds)
	}
	if want := plainBytes + 64*64*4; fusedBytes != want {
		t.Errorf("the fused Softmax moves %.0f bytes, want %.0f (its own and the mask's)", fusedBytes, want)
	}
}

// TestEmulatedMaskFlattens: a bfloat16 mask Add a Softmax reads, typed
// float32 in a graph built emulated (so left unflattened there, as a
// float32 one would be for BiasSoftmaxFusion), is priced as the device's
// build runs it: flattened onto the per-channel kernel, bfloat16's class;
// in float32 it is no kernel (fused), and an Add no Softmax reads stays on
// the general kernel.
func TestEmulatedMaskFlattens(t *testing.T) {
	g := graph.New("mask", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 64, 64}})
	g.AddInput("m", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{64, 64}})
	b := graph.NewBuilder(g, "")
	round := func(v string) string {
		return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(dtype.BFloat16)))}, graph.AInt("to", int64(dtype.Float32)))
	}
	scores := round(b.MatMul(round("x"), round("x")))
	mask := round("m")
	masked := b.Add(scores, mask)
	other := b.Add(scores, mask)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.Outputs = []string{b.Op("Softmax", []string{masked}, graph.AInt("axis", -1)), b.Mul(other, other)}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	producers := g.Producers()
	for _, c := range []struct {
		low             dtype.DType
		masked, another string // classes; "" where no kernel
	}{
		{dtype.BFloat16, classElemBF16, classElemBroadcast},
		{0, "", classElemBroadcast},
	} {
		costs := costGraph(g, gpu, StepOptions{TF32: true, low: c.low, data: map[string]bool{"x": true}})
		class := map[*graph.Node]string{}
		for i, n := range g.Nodes {
			if costs[i].where == onGPU {
				class[n] = costs[i].class
			}
		}
		if got := class[producers[masked]]; got != c.masked {
			t.Errorf("low %v: the mask Add a Softmax reads priced as %q, want %q", c.low, got, c.masked)
		}
		if got := class[producers[other]]; got != c.another {
			t.Errorf("low %v: the mask Add a Mul reads priced as %q, want %q", c.low, got, c.another)
		}
	}
}

// TestTypeClasses: the kernels the profiles found running at rates of
// their own by type get their own classes: an element-wise op or Cast
// touching bfloat16, a 3-D Conv and a long-K MatMul in float16; float32
// and float16 element-wise ops, and a short-K float16 MatMul, keep theirs.
func TestTypeClasses(t *testing.T) {
	g := graph.New("types", graph.EmitOpset)
	for _, in := range []struct {
		name  string
		dt    dtype.DType
		shape []int64
	}{
		{"a32", dtype.Float32, []int64{64, 64}}, {"a16", dtype.Float16, []int64{64, 64}}, {"abf", dtype.BFloat16, []int64{64, 64}},
		{"vol", dtype.Float16, []int64{1, 8, 4, 8, 8}}, {"w", dtype.Float16, []int64{8, 8, 3, 3, 3}},
		{"long", dtype.Float16, []int64{8, 1 << 16}}, {"longT", dtype.Float16, []int64{1 << 16, 8}},
	} {
		g.AddInput(in.name, graph.Info{DType: in.dt, Known: true, Shape: in.shape})
	}
	b := graph.NewBuilder(g, "")
	outs := map[string]string{
		"add32": b.Add("a32", "a32"), "add16": b.Add("a16", "a16"), "addbf": b.Add("abf", "abf"),
		"castbf": b.Op("Cast", []string{"a32"}, graph.AInt("to", int64(dtype.BFloat16))),
		"conv16": b.Op("Conv", []string{"vol", "w"}, graph.AInts("pads", []int64{1, 1, 1, 1, 1, 1})),
		"long16": b.MatMul("long", "longT"), "short16": b.MatMul("a16", "a16"),
	}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	for _, v := range outs {
		g.Outputs = append(g.Outputs, v)
	}
	want := map[string]string{"add32": classElem, "add16": classElem, "addbf": classElemBF16, "castbf": classCastBF16,
		"conv16": classConvVolume16, "long16": classGEMMLongK16, "short16": classGEMM}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	producers := g.Producers()
	got := map[*graph.Node]string{}
	costs := costGraph(g, gpu, StepOptions{})
	for i, n := range g.Nodes {
		got[n] = costs[i].class
	}
	for name, v := range outs {
		if c := got[producers[v]]; c != want[name] {
			t.Errorf("%s: class %q, want %q", name, c, want[name])
		}
	}
}

// TestEmulatedConvGradientsRunLow: in a bf16-mixed build a convolution
// has no bfloat16 kernel on the device, so it reads the float32 copy of
// its rounded input and runs in float32 with TF32 there; a GEMM over
// windows of that copy (its weight gradient's) runs on the tensor cores in
// bfloat16, as precision.ExactLowProducts writes it for the device, and so
// does a GEMM over another rounded value.
func TestEmulatedConvGradientsRunLow(t *testing.T) {
	g := graph.New("emulated", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 8, 4, 8, 8}})
	g.AddInput("y", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{64, 64}})
	g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 8, 3, 3, 3}})
	b := graph.NewBuilder(g, "")
	round := func(v string) string {
		return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(dtype.BFloat16)))}, graph.AInt("to", int64(dtype.Float32)))
	}
	xr, yr, wr := round("x"), round("y"), round("w")
	conv := b.Op("Conv", []string{xr, wr}, graph.AInts("pads", []int64{1, 1, 1, 1, 1, 1}))
	window := b.Reshape(b.Slice(xr, []int64{0}, []int64{2}, []int64{2}, nil), b.Ints(32, 32)) // a weight gradient's window of the input
	wgrad := b.MatMul(window, window)
	dense := b.MatMul(yr, yr)
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	g.Outputs = []string{conv, b.Reshape(wgrad, b.Ints(-1)), dense}
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	producers := g.Producers()
	rates := map[*graph.Node]float64{}
	costs := costGraph(g, gpu, StepOptions{TF32: true, low: dtype.BFloat16, data: map[string]bool{"x": true, "y": true}})
	for i, n := range g.Nodes {
		rates[n] = costs[i].rate
	}
	if r := rates[producers[wgrad]]; r != gpu.Tensor16 {
		t.Errorf("the weight gradient's GEMM at %.3g FLOP/s; want the tensor cores' %.3g", r, gpu.Tensor16)
	}
	if r := rates[producers[dense]]; r != gpu.Tensor16 {
		t.Errorf("the dense GEMM at %.3g FLOP/s; want the tensor cores' %.3g", r, gpu.Tensor16)
	}
	if r := rates[producers[conv]]; r != gpu.TF32 {
		t.Errorf("the convolution at %.3g FLOP/s; want TF32's %.3g", r, gpu.TF32)
	}
}

// TestBackwardOpsOnLowValuesRunLow: an op autocast keeps in float32
// (Exp) that autodiff wrote over low values (a GELU's gradient, named
// under artifacts.GradientPrefix) runs in the low type on the device; the
// same op in the forward runs in float32, over autocast's float32 copy or
// over a value an element-wise op computed (a GroupNorm's mean of a
// residual sum, which autocast casts up on the device).
func TestBackwardOpsOnLowValuesRunLow(t *testing.T) {
	g := graph.New("low", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{64, 64}})
	fwd := graph.NewBuilder(g, "")
	low := fwd.Op("Cast", []string{"x"}, graph.AInt("to", int64(dtype.BFloat16)))
	up := fwd.Op("Cast", []string{low}, graph.AInt("to", int64(dtype.Float32))) // autocast's copy for a float32 op
	doubled := fwd.Mul(up, fwd.Scalar(dtype.Float32, 2))
	forward := fwd.Exp(up)
	forwardComputed := fwd.Exp(doubled)
	backward := graph.NewBuilder(g, artifacts.GradientPrefix).Exp(doubled)
	if fwd.Err != nil {
		t.Fatal(fwd.Err)
	}
	g.Outputs = []string{forward, forwardComputed, backward}
	lowVal, _ := lowTyping(g, map[string]bool{"x": true}, dtype.BFloat16)
	if lowVal[forward] || lowVal[forwardComputed] {
		t.Errorf("a forward Exp is typed low (of the float32 copy: %v; of a computed low value: %v)", lowVal[forward], lowVal[forwardComputed])
	}
	if !lowVal[backward] {
		t.Errorf("the backward's Exp over a low value is typed float32")
	}
}

// TestBatchNormGradRunsLow: a BatchNorm backward's element-wise part as a
// CPU build writes it (the gradient a float32 Relu computed over the
// rounded input, as ortrain's CPU builds run Relu), replayed in float16:
// w, g - w and dX are low values on the device, as precision.LowBatchNorms
// builds them there, and the Cast after dX is no kernel; in bfloat16
// (no such BatchNorm kernel) all stay float32.
func TestBatchNormGradRunsLow(t *testing.T) {
	for _, low := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		g := graph.New("bngrad", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 4, 6, 6}})
		for _, p := range []string{"gamma", "zero", "mean", "var", "s"} {
			g.AddInput(p, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4}})
		}
		b := graph.NewBuilder(g, artifacts.GradientPrefix)
		round := func(v string) string {
			return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(low)))}, graph.AInt("to", int64(dtype.Float32)))
		}
		x32 := round("x")
		g32 := b.Relu(x32)
		w := b.Op("BatchNormalization", []string{x32, "s", "s", "mean", "var"})
		diff := b.Sub(g32, w)
		dx := b.Op("BatchNormalization", []string{diff, "gamma", "zero", "zero", "var"})
		cast := b.Op("Cast", []string{dx}, graph.AInt("to", int64(low)))
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		g.Outputs = []string{b.Op("Cast", []string{cast}, graph.AInt("to", int64(dtype.Float32))), b.ReduceSum(b.Mul(g32, x32), false)}
		lowVal, elide := lowTyping(g, map[string]bool{"x": true}, low)
		want := low == dtype.Float16
		for _, v := range []string{w, diff, dx} {
			if lowVal[v] != want {
				t.Errorf("%v: %s typed low %v, want %v", low, v, lowVal[v], want)
			}
		}
		for _, n := range g.Nodes {
			if n.Op == "Cast" && n.Output(0) == cast && elide[n] != want {
				t.Errorf("%v: the Cast of dX elided %v, want %v", low, elide[n], want)
			}
		}
	}
}

// TestLowParamCasts: a float16 BatchNorm replayed from a graph built for a
// CPU costs the Casts the device's build adds for its per-channel inputs:
// one each for the computed mean and variance, one Concat, Cast and Split
// for the graph's scale and shift; a graph built with the kernels, whose
// BatchNorm reads float16 already, none.
func TestLowParamCasts(t *testing.T) {
	g := graph.New("bn", graph.EmitOpset)
	g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 4, 6, 6}})
	for _, p := range []string{"gamma", "beta", "m", "v"} {
		g.AddInput(p, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4}})
	}
	b := graph.NewBuilder(g, "")
	x16 := b.Op("Cast", []string{"x"}, graph.AInt("to", int64(dtype.Float16)))
	y := b.Op("BatchNormalization", []string{b.Op("Cast", []string{x16}, graph.AInt("to", int64(dtype.Float32))), "gamma", "beta", b.Neg("m"), b.Abs("v")})
	g.Outputs = []string{b.Relu(b.Op("Cast", []string{y}, graph.AInt("to", int64(dtype.Float16))))}
	if b.Err != nil {
		t.Fatal(b.Err)
	}
	lowVal, _ := lowTyping(g, map[string]bool{"x": true}, dtype.Float16)
	ops := map[string]int{}
	for _, c := range lowParamCasts(g, lowVal, dtype.Float16, GPUs["h200"]) {
		ops[c.op]++
		if c.seconds <= 0 {
			t.Errorf("%s priced at %g s", c.op, c.seconds)
		}
	}
	if ops["Cast"] != 3 || ops["Concat"] != 1 || ops["Split"] != 1 || len(ops) != 3 {
		t.Errorf("added %v; want 3 Casts (mean, variance, the graph's vectors together), a Concat and a Split", ops)
	}
	typed := graph.New("typed", graph.EmitOpset)
	typed.AddInput("x", graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{8, 4, 6, 6}})
	for _, p := range []string{"gamma", "beta", "m", "v"} {
		typed.AddInput(p, graph.Info{DType: dtype.Float16, Known: true, Shape: []int64{4}})
	}
	tb := graph.NewBuilder(typed, "")
	typed.Outputs = []string{tb.Relu(tb.Op("BatchNormalization", []string{"x", "gamma", "beta", "m", "v"}))}
	lowVal, _ = lowTyping(typed, map[string]bool{"x": true}, dtype.Float16)
	if extra := lowParamCasts(typed, lowVal, dtype.Float16, GPUs["h200"]); len(extra) != 0 {
		t.Errorf("a typed graph's BatchNorm adds %d kernels", len(extra))
	}
}

// TestRowSumsRunLow: a BatchNorm backward's dβ and dγ as row means
// (autodiff's batchNormRowMeans), replayed from a graph built for a CPU,
// run as the 16-mixed device build has them: the LayerNormalization over
// g and the one over g·x̂/8 read float16, the product and x̂/8 are
// float16, and g's float32 copy is never made. In bf16-mixed the product
// stays float32 (no bfloat16 BatchNorm for x̂).
func TestRowSumsRunLow(t *testing.T) {
	for _, low := range []dtype.DType{dtype.Float16, dtype.BFloat16} {
		g := graph.New("rowsums", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 4, 24, 24}})
		g.AddInput("ones", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{24, 24}})
		for _, p := range []string{"eighth", "zero", "mean", "var"} {
			g.AddInput(p, graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4}})
		}
		b := graph.NewBuilder(g, artifacts.GradientPrefix)
		round := func(v string) string {
			return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(low)))}, graph.AInt("to", int64(dtype.Float32)))
		}
		x32 := round("x")
		g32 := round(b.Relu(x32))
		xhat := b.Op("BatchNormalization", []string{x32, "eighth", "zero", "mean", "var"})
		p := b.Mul(g32, xhat)
		sums := b.OpN("LayerNormalization", []string{g32, "ones"}, 3, graph.AInt("axis", 2))
		products := b.OpN("LayerNormalization", []string{p, "ones"}, 3, graph.AInt("axis", 2))
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		g.Outputs = []string{b.ReduceSum(sums[1], false), b.ReduceSum(products[1], false)}
		lowVal, elide := lowTyping(g, map[string]bool{"x": true}, low)
		want := low == dtype.Float16
		for _, v := range []string{xhat, p, products[0]} {
			if lowVal[v] != want {
				t.Errorf("%v: %s typed low %v, want %v", low, v, lowVal[v], want)
			}
		}
		if !lowVal[sums[0]] {
			t.Errorf("%v: the LayerNormalization over g does not read the low value", low)
		}
		for _, n := range g.Nodes {
			if n.Output(0) == g32 && want && !elide[n] {
				t.Errorf("%v: g's float32 copy elided %v, want %v", low, elide[n], want)
			}
		}
	}
}

// TestSoftmaxCopyForGradient: a Softmax replayed in the low type from a
// graph built for a CPU makes a float32 copy of P for a float32 reader,
// but not for its gradient's product, which reads the low P on the device
// (precision.LowSoftmaxGrads), flattened by cudaform or not.
func TestSoftmaxCopyForGradient(t *testing.T) {
	gpu, err := LookupGPU("h200")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name        string
		grad, extra bool
		copies      float64
	}{{"gradient", true, false, 0}, {"float32 reader", false, true, 1}, {"both", true, true, 1}} {
		g := graph.New("softmax", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 64, 64}})
		g.AddInput("dp", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 64, 64}})
		g.AddInput("r", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{2, 3, 64, 1}})
		b := graph.NewBuilder(g, artifacts.GradientPrefix)
		round := func(v string) string {
			return b.Op("Cast", []string{b.Op("Cast", []string{v}, graph.AInt("to", int64(dtype.BFloat16)))}, graph.AInt("to", int64(dtype.Float32)))
		}
		p := b.Op("Softmax", []string{round(b.MatMul(round("x"), round("x")))}, graph.AInt("axis", -1))
		g.Outputs = []string{b.MatMul(round(p), round("x"))}
		if tc.grad {
			d := b.Reshape(b.Sub(b.Reshape("dp", b.Ints(384, 64)), b.Reshape("r", b.Ints(384, 1))), b.Ints(2, 3, 64, 64))
			g.Outputs = append(g.Outputs, round(b.Mul(p, d)))
		}
		if tc.extra {
			g.Outputs = append(g.Outputs, b.ReduceSum(b.Log(p), false))
		}
		if b.Err != nil {
			t.Fatal(b.Err)
		}
		costs := costGraph(g, gpu, StepOptions{TF32: true, low: dtype.BFloat16, data: map[string]bool{"x": true}})
		for i, n := range g.Nodes {
			if n.Op != "Softmax" {
				continue
			}
			// Its own bytes, bfloat16 in and out, plus 4 + 2 + 2 an
			// element for each copy (written, and read by the Cast
			// and by its reader).
			elems := float64(2 * 3 * 64 * 64)
			if want := elems * (4 + tc.copies*(2+4+2)); costs[i].bytes != want {
				t.Errorf("%s: the Softmax moves %.0f bytes, want %.0f", tc.name, costs[i].bytes, want)
			}
		}
	}
}
