// Package precision rewrites a forward graph for mixed-precision training,
// with PyTorch's autocast as the reference users know.
//
// Op classes (Class): matrix products (MatMul, Gemm, Conv, ConvTranspose,
// Einsum) run in the low precision; numerically fragile ops (exp and log,
// powers, softmax, normalisations, reductions, losses) run in float32
// (in float16, BatchNorm hands its output back in its input's type,
// outputsInputType);
// element-wise and shape ops follow their inputs, in the low precision
// when every activation they read is low and in float32 when one is
// float32, as PyTorch promotes `bf16 + fp32` to fp32 (a residual stream
// that starts in float32 stays there). A weight or constant read by a
// low-precision op is cast to it, as autocast casts a Linear's bias.
// Unknown ops run in float32.
//
// The weights stay float32 graph inputs (master weights): the low copy is
// a Cast inside the graph, so the optimizer and the gradients stay
// float32, and autodiff's Cast rule brings each gradient back to float32.
// Graph outputs are cast back to float32.
//
// On the finished graphs, LowBatchNorms and LowSoftmaxes give a BatchNorm
// or a Softmax the low type where the device's kernel keeps its float32
// arithmetic inside and its output goes on in the low type anyway.
//
// Where the device has no low-precision kernel for an op (Kernels), the op
// runs in float32 between Casts: a matrix product then rounds its inputs
// and its output to the low precision and computes in float32, which is
// what the low-precision kernel would do up to the accumulation order
// (Report.Emulated counts them); another op just stays in float32.
package precision

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// Class is how an op's float inputs are typed.
type Class int

const (
	// Follow ops run in the type of the activations they read.
	Follow Class = iota
	// Low ops run in the low precision.
	Low
	// FP32 ops run in float32.
	FP32
)

var lowOps = map[string]bool{"MatMul": true, "Gemm": true, "Conv": true, "ConvTranspose": true, "Einsum": true}

var fp32Ops = map[string]bool{
	"Exp": true, "Log": true, "Pow": true, "Reciprocal": true, "Softplus": true, "Softsign": true,
	"Acos": true, "Asin": true, "Atan": true, "Acosh": true, "Asinh": true, "Atanh": true, "Cosh": true, "Sinh": true, "Tan": true,
	"Softmax": true, "LogSoftmax": true,
	"BatchNormalization": true, "LayerNormalization": true, "GroupNormalization": true, "InstanceNormalization": true,
	"LpNormalization": true, "MeanVarianceNormalization": true, "LRN": true,
	"ReduceSum": true, "ReduceMean": true, "ReduceProd": true, "ReduceL1": true, "ReduceL2": true, "ReduceLogSum": true,
	"ReduceLogSumExp": true, "ReduceSumSquare": true, "ReduceMax": true, "ReduceMin": true, "CumSum": true,
	"SoftmaxCrossEntropyLoss": true, "NegativeLogLikelihoodLoss": true,
}

var followOps = map[string]bool{
	"Add": true, "Sub": true, "Mul": true, "Div": true, "Neg": true, "Abs": true, "Sqrt": true, "Sign": true,
	"Relu": true, "LeakyRelu": true, "Elu": true, "Selu": true, "Celu": true, "PRelu": true, "Sigmoid": true,
	"HardSigmoid": true, "HardSwish": true, "Tanh": true, "Erf": true, "Gelu": true, "Sin": true, "Cos": true,
	"Max": true, "Min": true, "Clip": true, "Where": true, "Floor": true, "Ceil": true, "Round": true,
	"Equal": true, "Less": true, "LessOrEqual": true, "Greater": true, "GreaterOrEqual": true,
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Transpose": true,
	"Slice": true, "Concat": true, "Split": true, "Gather": true, "GatherElements": true, "GatherND": true,
	"Expand": true, "Pad": true, "Tile": true, "DepthToSpace": true, "SpaceToDepth": true,
	"MaxPool": true, "AveragePool": true, "GlobalAveragePool": true, "GlobalMaxPool": true, "Resize": true,
	"Dropout": true, "ScatterND": true, "ScatterElements": true, "Trilu": true,
}

// outputsInputType are float32 ops whose output autocast leaves in the
// type of their input: PyTorch's autocast lists batch_norm neither among
// the low-precision ops nor among the float32 ones, and cuDNN runs it on a
// float16 or bfloat16 input in float32 with an output of the input's type.
// So a BatchNorm after a low-precision Conv computes in float32 here too,
// and its output is rounded back to the low type, in which the ReLU and
// residual Add after it run (and are kept for the backward). In float16
// only: ONNX Runtime's CUDA comparison kernels (Greater, which a ReLU's
// gradient reads) have no bfloat16 one, so in bfloat16 the output stays
// float32, as before. Where the device has a float16 BatchNorm kernel, the
// finished graphs' BatchNorms read and write float16 themselves
// (LowBatchNorms).
var outputsInputType = map[string]bool{"BatchNormalization": true, graph.BatchNormTrainingOp: true}

// ClassOf returns n's class.
func ClassOf(n *graph.Node) Class {
	switch {
	case n.Domain == graph.StopGradientDomain && n.Op == graph.StopGradientOp,
		n.Domain == graph.MSDomain && n.Op == "Gelu": // autodiff.FuseGelus's, element-wise as the chain it replaced
		return Follow
	case n.Domain != "":
		return FP32
	case lowOps[n.Op]:
		return Low
	case followOps[n.Op]:
		return Follow
	}
	return FP32
}

// typed returns the indices of n's inputs that share its float type T;
// the others (Dropout's ratio, Resize's scales, Pow's exponent) keep
// theirs.
func typed(n *graph.Node) []int {
	switch n.Op {
	case "Dropout", "Resize", "Pow":
		return []int{0}
	case "Where":
		return []int{1, 2}
	}
	idx := make([]int, len(n.Inputs))
	for i := range idx {
		idx[i] = i
	}
	return idx
}

// Kernels reports whether the device has a kernel for n with its typed
// float inputs in dt.
type Kernels func(n *graph.Node, dt dtype.DType) bool

// Options configure Autocast.
type Options struct {
	Low dtype.DType // dtype.BFloat16 or dtype.Float16
	// Weights are the graph inputs that hold weights (parameters, frozen
	// parameters, buffers); the other inputs are the batch.
	Weights map[string]bool
	// Kernels says what the device runs; nil means every op has kernels.
	Kernels Kernels
}

// Report counts the nodes with float inputs by the precision they run in.
type Report struct {
	Low, FP32 int
	// Emulated are matrix products without a low-precision kernel, run in
	// float32 on rounded inputs.
	Emulated int
	// NoKernel lists the ops (not matrix products) that stay in float32
	// for want of a low-precision kernel (op names, sorted, once each).
	NoKernel []string
}

// String is one line for a run's log.
func (r Report) String() string {
	s := fmt.Sprintf("%d nodes in low precision, %d in float32", r.Low, r.FP32)
	if r.Emulated > 0 {
		s += fmt.Sprintf(", %d matrix products emulated (float32 kernels on rounded values)", r.Emulated)
	}
	if len(r.NoKernel) > 0 {
		s += "; no low-precision kernel on this device for " + strings.Join(r.NoKernel, ", ")
	}
	return s
}

// Autocast rewrites g in place as described in the package comment.
func Autocast(g *graph.Graph, o Options) (Report, error) {
	var rep Report
	if o.Low != dtype.BFloat16 && o.Low != dtype.Float16 {
		return rep, fmt.Errorf("precision: low precision must be bfloat16 or float16, not %s", o.Low)
	}
	has := o.Kernels
	if has == nil {
		has = func(*graph.Node, dtype.DType) bool { return true }
	}
	noKernel := map[string]bool{}
	// activation: values computed from the batch; the rest are weights
	// and constants, cast to whatever reads them.
	activation := map[string]bool{}
	for _, in := range g.Inputs {
		activation[in] = !o.Weights[in]
	}
	typ := func(v string) dtype.DType { return g.Info(v).DType }
	// up maps a float32 value made by an exact Cast of a low one back to
	// it, so that a low reader takes the low value itself.
	up := map[string]string{}
	casts := map[[2]string]string{} // (value, type) → cast
	var out []*graph.Node
	emit := func(n *graph.Node) { out = append(out, n) }
	castTo := func(v string, dt dtype.DType) string {
		if typ(v) == dt {
			return v
		}
		if u, ok := up[v]; ok && typ(u) == dt {
			return u
		}
		key := [2]string{v, dt.String()}
		if c, ok := casts[key]; ok {
			return c
		}
		c := g.Fresh(v + "/" + dt.String())
		n := &graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{v}, Outputs: []string{c}, Attrs: []*onnxpb.AttributeProto{graph.AInt("to", int64(dt))}}
		g.Reserve(c)
		info := g.Info(v)
		info.DType = dt
		g.Infos[c] = info
		emit(n)
		casts[key] = c
		if dt == dtype.Float32 && (typ(v) == o.Low) {
			up[c] = v
		}
		activation[c] = activation[v]
		return c
	}
	// rename gives n's output i a fresh name and returns it, so a Cast can
	// produce the old name in the new type.
	rename := func(n *graph.Node, i int) string {
		fresh := g.Fresh(n.Outputs[i] + "/" + "autocast")
		g.Reserve(fresh)
		n.Outputs[i] = fresh
		return fresh
	}
	// outputLow hands n's float32 output i back in the low type: n writes
	// a fresh float32 value and a Cast gives the old name the low type.
	outputLow := func(n *graph.Node, i int) {
		v := n.Outputs[i]
		if v == "" || typ(v) != dtype.Float32 {
			return
		}
		f := rename(n, i)
		g.Infos[f] = g.Info(v)
		activation[f] = activation[v]
		emit(&graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{f}, Outputs: []string{v}, Attrs: []*onnxpb.AttributeProto{graph.AInt("to", int64(o.Low))}})
		info := g.Info(f)
		info.DType = o.Low
		g.Infos[v] = info
	}
	for _, n := range slices.Clone(g.Nodes) {
		fromData := false
		for _, in := range n.Inputs {
			fromData = fromData || activation[in]
		}
		for _, o := range n.Outputs {
			activation[o] = fromData
		}
		var floats []int
		for _, i := range typed(n) {
			if i < len(n.Inputs) && n.Inputs[i] != "" && (typ(n.Inputs[i]) == dtype.Float32 || typ(n.Inputs[i]) == o.Low) {
				floats = append(floats, i)
			}
		}
		if n.Op == "Cast" || len(floats) == 0 {
			emit(n)
			continue
		}
		target := dtype.Float32
		emulate := false
		// lowOut: the op computes in float32 and rounds its output back
		// to the low type of its activation input (outputsInputType).
		x := n.Input(0)
		lowOut := outputsInputType[n.Op] && (n.Domain == "" || n.Domain == graph.StopGradientDomain) &&
			o.Low == dtype.Float16 && activation[x] && (typ(x) == o.Low || up[x] != "")
		switch ClassOf(n) {
		case Low:
			if has(n, o.Low) {
				target = o.Low
			} else {
				emulate = true
			}
		case Follow:
			low, full := false, false
			for _, i := range floats {
				if v := n.Inputs[i]; activation[v] {
					low = low || typ(v) == o.Low || up[v] != ""
					full = full || typ(v) == dtype.Float32 && up[v] == ""
				}
			}
			if low && !full {
				if has(n, o.Low) {
					target = o.Low
				} else {
					noKernel[n.Op] = true
				}
			}
		}
		for _, i := range floats {
			v := n.Inputs[i]
			if emulate {
				v = castTo(castTo(v, o.Low), dtype.Float32) // rounded to the low precision
			} else {
				v = castTo(v, target)
			}
			n.Inputs[i] = v
		}
		emit(n)
		g.InferNode(n)
		if lowOut {
			outputLow(n, 0)
		}
		switch {
		case emulate:
			rep.Emulated++
			rep.Low++
			for i := range n.Outputs {
				outputLow(n, i)
			}
		case target == o.Low:
			rep.Low++
		default:
			rep.FP32++
		}
	}
	g.Nodes = out
	// Graph outputs leave in float32.
	for _, v := range g.Outputs {
		if typ(v) != o.Low {
			continue
		}
		p := g.Producers()[v]
		if p == nil {
			continue
		}
		i := slices.Index(p.Outputs, v)
		f := rename(p, i)
		g.Infos[f] = g.Info(v)
		n := &graph.Node{Op: "Cast", Name: g.Fresh("autocast/Cast"), Inputs: []string{f}, Outputs: []string{v}, Attrs: []*onnxpb.AttributeProto{graph.AInt("to", int64(dtype.Float32))}}
		g.Nodes = append(g.Nodes, n)
		// Readers inside the graph keep the low value.
		for _, r := range g.Nodes {
			if r == n {
				continue
			}
			for j, in := range r.Inputs {
				if in == v {
					r.Inputs[j] = f
				}
			}
		}
		info := g.Info(f)
		info.DType = dtype.Float32
		g.Infos[v] = info
	}
	g.Reinfer()
	if err := g.Sort(); err != nil {
		return rep, err
	}
	for op := range noKernel {
		rep.NoKernel = append(rep.NoKernel, op)
	}
	slices.Sort(rep.NoKernel)
	return rep, nil
}
