package ortimport

import (
	"fmt"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// UnsupportedOpError is a training-only op the import cannot lower.
type UnsupportedOpError struct{ Op, Node string }

func (e *UnsupportedOpError) Error() string {
	return fmt.Sprintf("ortimport: op com.microsoft.%s (node %q) has no lowering to standard ops; rebuild the artifacts with `ortrain artifacts build` from the forward model", e.Op, e.Node)
}

// BadInput marks the error as the user's to fix (exit code 2).
func (e *UnsupportedOpError) BadInput() bool { return true }

// viaRule lowers a *Grad op by running autodiff's rule for its forward op
// on a stand-in forward node: fwd is that op, ins and outs its inputs and
// outputs as the rule reads them (value names from the *Grad node, or
// placeholders given facts), dy the incoming gradients.
func viaRule(b *graph.Builder, fwd string, attrs []*graph.Attr, ins, outs, dy []string, need []bool) ([]string, error) {
	n := &graph.Node{Op: fwd, Name: b.G.Fresh(b.Prefix + fwd), Inputs: ins, Outputs: outs, Attrs: attrs}
	return autodiff.Backward(b, n, dy, need)
}

// placeholder names a value that exists only as facts for a rule to read.
func placeholder(b *graph.Builder, base string, info graph.Info) string {
	v := b.G.Fresh(b.Prefix + base)
	b.G.Infos[v] = info
	return v
}

// lower emits standard ops computing n's outputs under their own names.
// Accumulators and optimizers are handled by the caller.
func lower(b *graph.Builder, n *graph.Node, producers map[string]*graph.Node) error {
	in := n.Input
	info := b.Info
	needOuts := make([]bool, 0, len(n.Outputs))
	for _, o := range n.Outputs {
		needOuts = append(needOuts, o != "")
	}
	bind := func(vals []string, outs []string) error {
		if b.Err != nil {
			return b.Err
		}
		for i, o := range outs {
			if o == "" {
				continue
			}
			if i >= len(vals) || vals[i] == "" {
				return fmt.Errorf("ortimport: lowering %s gave no value for output %s", n.Describe(), o)
			}
			b.OpInto(o, "Identity", []string{vals[i]})
		}
		return b.Err
	}
	fake := func(like string) string { return placeholder(b, "fwd", info(like)) }
	var dx []string
	var err error
	switch n.Op {
	case "ReluGrad", "SigmoidGrad", "TanhGrad":
		fwd := n.Op[:len(n.Op)-4]
		dx, err = viaRule(b, fwd, nil, []string{in(1)}, []string{in(1)}, []string{in(0)}, []bool{true})
	case "GeluGrad", "FastGeluGrad":
		var attrs []*graph.Attr
		if n.Op == "FastGeluGrad" {
			attrs = append(attrs, graph.AString("approximate", "tanh"))
		}
		dx, err = viaRule(b, "Gelu", attrs, []string{in(1)}, []string{fake(in(0))}, []string{in(0)}, []bool{true})
	case "SoftmaxGrad_13", "LogSoftmaxGrad_13", "SoftmaxGrad", "LogSoftmaxGrad":
		fwd := "Softmax"
		if n.Op[:3] == "Log" {
			fwd = "LogSoftmax"
		}
		dx, err = viaRule(b, fwd, []*graph.Attr{graph.AInt("axis", n.Int("axis", -1))}, []string{in(1)}, []string{in(1)}, []string{in(0)}, []bool{true})
	case "ConvGrad":
		// (dY, X, W) -> (dX, dW, dB)
		dx, err = viaRule(b, "Conv", n.Attrs, []string{in(1), in(2), "bias"}, []string{fake(in(0))}, []string{in(0)}, needOuts)
	case "GatherGrad":
		// (shape of X, indices, dY) -> dX
		zero, _ := graph.Floats("", info(in(2)).DType, []int64{1}, []float64{0})
		data := b.Op("ConstantOfShape", []string{in(0)}, graph.ATensor("value", zero))
		dx, err = viaRule(b, "Gather", []*graph.Attr{graph.AInt("axis", n.Int("axis", 0))}, []string{data, in(1)}, []string{fake(in(2))}, []string{in(2)}, []bool{true, false})
	case "LayerNormalizationGrad", "SimplifiedLayerNormalizationGrad":
		if n.Op != "LayerNormalizationGrad" {
			return &UnsupportedOpError{n.Op, n.Name}
		}
		// (dY, X, scale, mean, inv_std) -> (dX, dscale, dbias)
		attrs := []*graph.Attr{graph.AInt("axis", n.Int("axis", -1)), graph.AFloat("epsilon", n.Float("epsilon", 1e-5))}
		dx, err = viaRule(b, "LayerNormalization", attrs, []string{in(1), in(2), "bias"}, []string{fake(in(0))}, []string{in(0)}, needOuts)
	case "MaxPoolGrad":
		// (dY, Indices) -> dX; X is the input of the MaxPool that made Indices.
		pool := producers[in(1)]
		if pool == nil || pool.Op != "MaxPool" {
			return &UnsupportedOpError{n.Op, n.Name}
		}
		dx, err = viaRule(b, "MaxPool", n.Attrs, []string{pool.Input(0)}, []string{fake(in(0)), in(1)}, []string{in(0)}, []bool{true})
	case "AveragePoolGrad":
		// dY -> dX; X's shape only from the output's declared facts.
		if !info(n.Output(0)).Static() {
			return fmt.Errorf("ortimport: %s: the shape of its output is not declared, so the pool's input size is unknown", n.Describe())
		}
		dx, err = viaRule(b, "AveragePool", n.Attrs, []string{fake(n.Output(0))}, []string{fake(in(0))}, []string{in(0)}, []bool{true})
	case "DropoutGrad":
		// (dY, mask, ratio, training_mode) -> dX
		train := in(3)
		if train == "" {
			train = b.Const(graph.Raw("", ort.Bool, nil, []byte{1}))
		}
		dx, err = viaRule(b, "Dropout", nil, []string{fake(in(0)), in(2), train}, []string{fake(in(0)), in(1)}, []string{in(0), ""}, []bool{true, false, false})
	case "BatchNormalizationGrad":
		dx = batchNormGrad(b, n)
	case "BatchNormInternal":
		dx = batchNormInternal(b, n)
	case "SoftmaxCrossEntropyLossInternal":
		dx = sceInternal(b, n)
	case "SoftmaxCrossEntropyLossInternalGrad":
		dx = sceInternalGrad(b, n)
	case "ConcatTraining":
		dx = []string{b.Concat(n.Int("axis", 0), n.Inputs...)}
		if n.Output(1) != "" {
			dx = append(dx, lengths(b, n))
		}
	case "SplitTraining":
		dx = b.OpN("Split", []string{in(0), in(1)}, len(n.Outputs), graph.AInt("axis", n.Int("axis", 0)))
	case "ReduceSumTraining":
		dx = []string{b.Op("ReduceSum", n.Inputs, n.Attrs...)}
	case "ZeroGradient":
		dx = []string{b.ZerosLike(in(0))}
	case "Scale":
		s := b.Cast(in(1), info(in(0)).DType)
		if n.Int("scale_down", 0) == 1 {
			dx = []string{b.Div(in(0), s)}
		} else {
			dx = []string{b.Mul(in(0), s)}
		}
	default:
		return &UnsupportedOpError{n.Op, n.Name}
	}
	if err != nil {
		return err
	}
	return bind(dx, n.Outputs)
}

// lengths is ConcatTraining's per_input_length: each input's extent along
// the axis, int64.
func lengths(b *graph.Builder, n *graph.Node) string {
	ax := n.Int("axis", 0)
	var parts []string
	for _, in := range n.Inputs {
		s := b.Info(in)
		if a := ax + int64(s.Rank())*int64(boolInt(ax < 0)); s.Known && s.Shape[a] >= 0 {
			parts = append(parts, b.Ints(s.Shape[a]))
			continue
		}
		parts = append(parts, b.Op("Gather", []string{b.Shape(in), b.Ints(ax)}, graph.AInt("axis", 0)))
	}
	return b.Concat(0, parts...)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// bnAxes are BatchNormalization's reduction axes (batch and spatial) and
// an unsqueeze of a per-channel vector to broadcast against X.
func bnAxes(b *graph.Builder, x string) ([]int64, func(string) string) {
	axes := []int64{0}
	for i := 2; i < b.Info(x).Rank(); i++ {
		axes = append(axes, int64(i))
	}
	return axes, func(v string) string { return b.Unsqueeze(v, axes...) }
}

// batchNormGrad: (dY, X, scale, saved_mean, saved_inv_std) -> (dX, dscale,
// dbias), the training-mode gradient with the batch's statistics.
func batchNormGrad(b *graph.Builder, n *graph.Node) []string {
	dy, x := n.Input(0), n.Input(1)
	axes, u := bnAxes(b, x)
	invstd := u(n.Input(4))
	xhat := b.Mul(b.Sub(x, u(n.Input(3))), invstd)
	gh := b.Mul(dy, u(n.Input(2)))
	centred := b.Sub(gh, b.ReduceMean(gh, true, axes...))
	dx := b.Mul(invstd, b.Sub(centred, b.Mul(xhat, b.ReduceMean(b.Mul(gh, xhat), true, axes...))))
	return []string{dx, b.ReduceSum(b.Mul(dy, xhat), false, axes...), b.ReduceSum(dy, false, axes...)}
}

// batchNormInternal: training-mode BatchNormalization returning Y, the
// updated running mean and variance, and the saved mean and inverse
// standard deviation its gradient reads. ONNX Runtime updates the running
// variance with the biased batch variance, as ONNX's BatchNormalization
// defines it.
func batchNormInternal(b *graph.Builder, n *graph.Node) []string {
	x := n.Input(0)
	dt := b.Info(x).DType
	axes, u := bnAxes(b, x)
	mean := b.ReduceMean(x, true, axes...)
	d := b.Sub(x, mean)
	v := b.ReduceMean(b.Mul(d, d), true, axes...)
	invstd := b.Div(b.Scalar(dt, 1), b.Sqrt(b.Add(v, b.Scalar(dt, n.Float("epsilon", 1e-5)))))
	y := b.Add(b.Mul(b.Mul(d, invstd), u(n.Input(1))), u(n.Input(2)))
	mom := n.Float("momentum", 0.9)
	flat := func(s string) string { return b.Reshape(s, b.Ints(-1)) }
	run := func(old, batch string) string {
		return b.Add(b.Mul(old, b.Scalar(dt, mom)), b.Mul(flat(batch), b.Scalar(dt, 1-mom)))
	}
	return []string{y, run(n.Input(3), mean), run(n.Input(4), v), flat(mean), flat(invstd)}
}

// sceInternal: (logits [N, C, ...], labels, weight?, ignore_index?) ->
// (loss, log_prob), the standard SoftmaxCrossEntropyLoss op (ONNX opset 13)
// with the ignore_index input turned back into its attribute.
func sceInternal(b *graph.Builder, n *graph.Node) []string {
	attrs := []*graph.Attr{graph.AString("reduction", n.String("reduction", "mean"))}
	if ii, ok := b.G.ConstInts(n.Input(3)); ok && n.Input(3) != "" {
		attrs = append(attrs, graph.AInt("ignore_index", ii[0]))
	} else if n.Input(3) != "" {
		return []string{b.Fail("SoftmaxCrossEntropyLossInternal with a computed ignore_index")}
	}
	ins := []string{n.Input(0), n.Input(1)}
	if n.Input(2) != "" {
		ins = append(ins, n.Input(2))
	}
	return b.OpN("SoftmaxCrossEntropyLoss", ins, 2, attrs...)
}

// sceInternalGrad: (dY, log_prob, labels, weight?, ignore_index?) ->
// dlogits = (softmax - onehot(label))·w[label]·dY / normaliser, where the
// normaliser is the summed weight of the counted entries for "mean", 1
// otherwise, and ignored entries get 0.
func sceInternalGrad(b *graph.Builder, n *graph.Node) []string {
	dy, logp, label := n.Input(0), n.Input(1), n.Input(2)
	li := b.Info(logp)
	if li.Rank() < 2 || li.Shape[1] < 0 {
		return []string{b.Fail("SoftmaxCrossEntropyLossInternalGrad needs static classes, log_prob is %v", li)}
	}
	dt, c := li.DType, li.Shape[1]
	vals := b.Const(graph.Int64s("", []int64{2}, []int64{0, 1}))
	lab := label
	var keep string // 1 where the entry counts
	if ii, ok := b.G.ConstInts(n.Input(4)); ok && n.Input(4) != "" {
		ign := b.Const(graph.Int64s("", nil, ii))
		keepB := b.Not(b.Equal(label, ign))
		keep = b.Cast(keepB, dt)
		lab = b.Where(keepB, label, b.Const(graph.Int64s("", nil, []int64{0})))
	}
	onehot := b.Cast(b.Op("OneHot", []string{lab, b.Const(graph.Int64s("", nil, []int64{c})), vals}, graph.AInt("axis", 1)), dt)
	w := b.ScalarLike(logp, 1)
	if n.Input(3) != "" {
		w = b.Gather(n.Input(3), lab, 0) // per entry
	}
	if keep != "" {
		w = b.Mul(w, keep)
	}
	we := b.Mul(b.ScalarLike(logp, 1), w)
	if b.Info(we).Rank() > 0 {
		we = b.Unsqueeze(we, 1)
	}
	g := b.Mul(b.Sub(b.Exp(logp), onehot), we)
	switch n.String("reduction", "mean") {
	case "mean":
		norm := b.ReduceSum(b.ExpandLike(w, label), false) // the counted weight
		g = b.Mul(g, b.Div(dy, norm))
	case "sum":
		g = b.Mul(g, dy)
	default: // none: dY per entry
		g = b.Mul(g, b.Unsqueeze(dy, 1))
	}
	return []string{g}
}
