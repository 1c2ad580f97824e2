package steptest

import (
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/precision"
)

// CUDALikeKernels stands in for a GPU's kernel probe on a machine without
// one: every op runs in the low type but Conv, ConvTranspose and
// BatchNormalization in bfloat16, which ONNX Runtime's CUDA provider
// lacks. The graphs built with it are typed as a GPU build types them
// (products in the low type, no emulating Casts), which the CPU's own
// builds never are.
type CUDALikeKernels struct{}

func (CUDALikeKernels) Kernels(*graph.Graph) precision.Kernels {
	return func(n *graph.Node, dt dtype.DType) bool {
		return dt != dtype.BFloat16 || n.Op != "Conv" && n.Op != "ConvTranspose" && n.Op != "BatchNormalization"
	}
}

// sameTypeOps read all their float operands in one type (ONNX's T), with
// the operands that must match (nil: all): ONNX Runtime refuses a session
// otherwise.
var sameTypeOps = map[string][]int{
	"Add": {0, 1}, "Sub": {0, 1}, "Mul": {0, 1}, "Div": {0, 1}, "MatMul": {0, 1}, "Gemm": {0, 1, 2},
	"Where": {1, 2}, "Max": nil, "Min": nil, "Sum": nil, "Mean": nil, "Concat": nil,
	"Conv": {0, 1, 2}, "ConvTranspose": {0, 1, 2}, "LayerNormalization": {0, 1, 2},
	"BatchNormalization": {0, 1, 2, 3, 4}, // one T in the CUDA provider's kernels
}

// CheckOperandTypes reports each node of the artifact set in dir that
// reads operands of two types where its op needs one, which a GPU session
// would refuse to load and a CPU build, all float32, cannot show. It
// returns how many operands are of type low (none: the build was not
// typed).
func CheckOperandTypes(tb testing.TB, dir string, low dtype.DType) (lows int) {
	tb.Helper()
	for _, f := range []string{artifacts.TrainingFile, artifacts.OptimizerFile, artifacts.EvalFile} {
		g, err := graph.Load(filepath.Join(dir, f))
		if err != nil {
			tb.Fatal(err)
		}
		for _, n := range g.Nodes {
			idx, ok := sameTypeOps[n.Op]
			if !ok || n.Domain != "" {
				continue
			}
			if idx == nil {
				for i := range n.Inputs {
					idx = append(idx, i)
				}
			}
			var first dtype.DType
			for _, i := range idx {
				if i >= len(n.Inputs) || n.Inputs[i] == "" {
					continue
				}
				dt := g.Info(n.Inputs[i]).DType
				if dt == 0 {
					continue // not inferred from the file: nothing to compare
				}
				if dt == low {
					lows++
				}
				if first == 0 {
					first = dt
				} else if dt != first {
					tb.Errorf("%s: %s reads %v and %v", f, n.Describe(), first, dt)
				}
			}
		}
	}
	return lows
}
