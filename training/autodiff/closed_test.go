package autodiff_test

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// onnxOps are the operators of the ai.onnx domain up to opset 21.
var onnxOps = []string{
	"Abs", "Acos", "Acosh", "Add", "AffineGrid", "And", "ArgMax", "ArgMin", "Asin", "Asinh", "Atan", "Atanh",
	"AveragePool", "BatchNormalization", "Bernoulli", "BitShift", "BitwiseAnd", "BitwiseNot", "BitwiseOr", "BitwiseXor",
	"BlackmanWindow", "Cast", "CastLike", "Ceil", "Celu", "CenterCropPad", "Clip", "Col2Im", "Compress", "Concat",
	"ConcatFromSequence", "Constant", "ConstantOfShape", "Conv", "ConvInteger", "ConvTranspose", "Cos", "Cosh", "CumSum",
	"DFT", "DeformConv", "DepthToSpace", "DequantizeLinear", "Det", "Div", "Dropout", "DynamicQuantizeLinear", "Einsum",
	"Elu", "Equal", "Erf", "Exp", "Expand", "EyeLike", "Flatten", "Floor", "GRU", "Gather", "GatherElements", "GatherND",
	"Gelu", "Gemm", "GlobalAveragePool", "GlobalLpPool", "GlobalMaxPool", "Greater", "GreaterOrEqual", "GridSample",
	"GroupNormalization", "HammingWindow", "HannWindow", "HardSigmoid", "HardSwish", "Hardmax", "Identity", "If",
	"ImageDecoder", "InstanceNormalization", "IsInf", "IsNaN", "LRN", "LSTM", "LayerNormalization", "LeakyRelu", "Less",
	"LessOrEqual", "Log", "LogSoftmax", "Loop", "LpNormalization", "LpPool", "MatMul", "MatMulInteger", "Max", "MaxPool",
	"MaxRoiPool", "MaxUnpool", "Mean", "MeanVarianceNormalization", "MelWeightMatrix", "Min", "Mish", "Mod", "Mul",
	"Multinomial", "Neg", "NegativeLogLikelihoodLoss", "NonMaxSuppression", "NonZero", "Not", "OneHot", "Optional",
	"OptionalGetElement", "OptionalHasElement", "Or", "PRelu", "Pad", "Pow", "QLinearConv", "QLinearMatMul",
	"QuantizeLinear", "RNN", "RandomNormal", "RandomNormalLike", "RandomUniform", "RandomUniformLike", "Range",
	"Reciprocal", "ReduceL1", "ReduceL2", "ReduceLogSum", "ReduceLogSumExp", "ReduceMax", "ReduceMean", "ReduceMin",
	"ReduceProd", "ReduceSum", "ReduceSumSquare", "RegexFullMatch", "Relu", "Reshape", "Resize", "ReverseSequence",
	"RoiAlign", "Round", "STFT", "Scan", "Scatter", "ScatterElements", "ScatterND", "Selu", "SequenceAt",
	"SequenceConstruct", "SequenceEmpty", "SequenceErase", "SequenceInsert", "SequenceLength", "SequenceMap", "Shape",
	"Shrink", "Sigmoid", "Sign", "Sin", "Sinh", "Size", "Slice", "Softmax", "SoftmaxCrossEntropyLoss", "Softplus",
	"Softsign", "SpaceToDepth", "Split", "SplitToSequence", "Sqrt", "Squeeze", "StringConcat", "StringNormalizer",
	"StringSplit", "Sub", "Sum", "Tan", "Tanh", "TfIdfVectorizer", "ThresholdedRelu", "Tile", "TopK", "Transpose",
	"Trilu", "Unique", "Unsqueeze", "Upsample", "Where", "Xor",
}

// TestNoSilentZeros: every ONNX op is in exactly one of three sets: it has
// a rule (checked by finite differences elsewhere), it is
// non-differentiable by nature (listed with a reason), or it is
// unsupported, and then a model in which a parameter reaches the loss
// through it is refused with the node named; never a gradient that is
// silently zero. Each op is tried fed by the parameter in each input slot
// (as far as it has inputs), with outputs whose type inference does not
// know.
func TestNoSilentZeros(t *testing.T) {
	nd := autodiff.NonDifferentiable()
	for _, op := range onnxOps {
		_, isND := nd[op]
		if autodiff.Has(op) && isND {
			t.Errorf("%s has a rule and is listed non-differentiable", op)
		}
		if autodiff.Has(op) || isND {
			if isND && nd[op] == "" {
				t.Errorf("%s is non-differentiable without a reason", op)
			}
			continue
		}
		for slot := range 3 {
			g := graph.New("t", graph.EmitOpset)
			g.AddInput("p", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{2, 3}})
			inputs := make([]string, slot+1)
			for i := range inputs {
				inputs[i] = "p"
			}
			g.AddNode(&graph.Node{Op: op, Name: "the_" + op, Inputs: inputs, Outputs: []string{"out"}})
			b := graph.NewBuilder(g, "")
			loss := b.ReduceSum(b.Reshape(b.Cast("out", ort.Float32), b.Ints(-1)), false)
			_, err := autodiff.Gradients(g, loss, []string{"p"}, "grad/")
			var nr *autodiff.NoRuleError
			if info := g.Info("out"); info.DType != 0 && !info.Float() {
				continue // an integer or bool output carries no gradient
			}
			if !errors.As(err, &nr) || nr.Node != "the_"+op || nr.Op != op {
				t.Errorf("%s fed in slot %d: %v, want a refusal naming node the_%s", op, slot, err, op)
			}
		}
	}
}

var update = flag.Bool("update", false, "rewrite OPS.md from the registry")

// TestOpTable: OPS.md is generated from the registry (the rules, the
// non-differentiable table with its reasons, the finite-difference cases,
// and the ONNX operator list above); `go test ./training/autodiff -run
// OpTable -update` rewrites it, and the test fails when it is stale.
func TestOpTable(t *testing.T) {
	cases := map[string][]string{}
	for _, c := range ruleCases {
		op := opName(c.name)
		cases[op] = append(cases[op], fmt.Sprintf("%s (%s)", c.name, c.dtype))
	}
	nd := autodiff.NonDifferentiable()
	all := slices.Clone(onnxOps)
	for _, op := range autodiff.Ops() {
		if !slices.Contains(all, op) {
			all = append(all, op)
		}
	}
	slices.Sort(all)
	var b strings.Builder
	b.WriteString("# Gradient support by op\n\nGenerated by `go test ./training/autodiff -run OpTable -update` from the rule\n" +
		"registry; do not edit. Every op is in one of three sets: it has a rule, checked\n" +
		"against central finite differences by the cases named (tolerances in\n" +
		"`fd_test.go`); it is non-differentiable by nature; or it is unsupported, and\n" +
		"`ortrain artifacts build` refuses a model in which a trained parameter reaches\n" +
		"the loss through it (exit 2, the node named). Ops outside the default domain\n" +
		"(com.microsoft...) are unsupported unless listed. RNN, GRU and LSTM are\n" +
		"unrolled into elementary ops before differentiation (`UnrollRecurrent`; the\n" +
		"sequence length must be fixed, padded sequences (sequence_lens) are masked),\n" +
		"checked against PyTorch autograd in `models/pytorch` and as named below.\n\n" +
		"| op | status | checked by |\n| --- | --- | --- |\n")
	for _, op := range all {
		switch {
		case autodiff.Has(op):
			fmt.Fprintf(&b, "| %s | rule | %s |\n", op, strings.Join(append(cases[op], exactChecks[op]...), ", "))
		case autodiff.Unrolled(op):
			fmt.Fprintf(&b, "| %s | unrolled | %s |\n", op, strings.Join(append([]string{"PyTorch autograd (TestTorchvisionZooMatchesAutograd)"}, exactChecks[op]...), ", "))
		case nd[op] != "":
			fmt.Fprintf(&b, "| %s | non-differentiable | %s |\n", op, nd[op])
		default:
			fmt.Fprintf(&b, "| %s | unsupported | refused with the node named (TestNoSilentZeros) |\n", op)
		}
	}
	const path = "OPS.md"
	if *update {
		if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != b.String() {
		t.Errorf("%s is stale or missing (%v): run go test ./training/autodiff -run OpTable -update", path, err)
	}
}
