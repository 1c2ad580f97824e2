package graph

import (
	"fmt"
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// CUDAOpset is the newest ai.onnx opset whose ops ONNX Runtime's CUDA
// provider runs as the graphs use them. ONNX Runtime matches an
// open-ended kernel registration to a node only at the op version it was
// registered for, and its CUDA provider registers Equal at 13 and
// ConstantOfShape at 9 only: at opset 19 an Equal node is Equal-19, at 20
// a ConstantOfShape is ConstantOfShape-20, and both would run on the CPU
// (Pad-19 too in releases before 2026). At opset 18 they are Equal-13,
// ConstantOfShape-9 and Pad-18, which it registers (read in ONNX
// Runtime's kernel registrations and its OperatorKernels.md, not run on
// a GPU here).
const CUDAOpset = 18

// Downgrade writes g, at opset 19 to 21, at opset to (18 or later) where
// every node means the same there: the versions 19 to 21 added types
// (float8, int4, strings, bfloat16 for some ops), attributes and modes, a
// few ops, and changed DFT's inputs, GridSample's modes and
// GroupNormalization's scale. Nodes that use none of it are the same
// node at the lower version; GridSample's modes get their old names and
// the opset-20 Gelu becomes ONNX Runtime's own (com.microsoft, the same
// function). It refuses, changing nothing, a graph that uses what the
// lower version lacks, naming the node.
func (g *Graph) Downgrade(to int64) error {
	if g.Opset <= to {
		return nil
	}
	if to < 18 || g.Opset > 21 {
		return fmt.Errorf("graph: writing opset %d as %d is not supported", g.Opset, to)
	}
	for _, n := range g.Nodes {
		if n.Domain == "" {
			if why := g.newerThan(n, to); why != "" {
				return fmt.Errorf("graph: %s %s, which opset %d lacks", n.Describe(), why, to)
			}
		}
	}
	for _, n := range g.Nodes {
		switch {
		case n.Domain != "":
		case n.Op == "GridSample":
			if m, ok := gridSampleModes16[n.String("mode", "linear")]; ok {
				n.DelAttr("mode")
				n.Attrs = append(n.Attrs, AString("mode", m))
			}
		case n.Op == "Gelu" && to < 20:
			n.Domain, n.Attrs = MSDomain, nil
			g.Domains[MSDomain] = 1
		}
	}
	g.Opset = to
	return nil
}

// gridSampleModes16 are GridSample's modes by their names before opset 20.
var gridSampleModes16 = map[string]string{"linear": "bilinear", "cubic": "bicubic"}

// ONNX's element types that dtype does not name: string, and the first
// of those added after opset 18 (float8 from 19, int4 from 21, float4).
const (
	onnxString       dtype.DType = 8
	firstTypeAfter18 dtype.DType = 17
)

// newOps19to21 are the ai.onnx ops versions 19 to 21 introduced.
var newOps19to21 = map[string]int64{"DeformConv": 19, "AffineGrid": 20, "ImageDecoder": 20, "RegexFullMatch": 20,
	"StringConcat": 20, "StringSplit": 20, "Gelu": 20}

// newerThan says what of n's a graph at opset to would lack ("" for
// nothing): an op or version that changed what it computes, or a type,
// attribute or mode added after to.
func (g *Graph) newerThan(n *Node, to int64) string {
	if v, ok := newOps19to21[n.Op]; ok && v > to {
		if n.Op == "Gelu" && n.String("approximate", "none") == "none" {
			return "" // com.microsoft's Gelu
		}
		return fmt.Sprintf("is an op of opset %d", v)
	}
	for _, v := range append(append([]string{}, n.Inputs...), n.Outputs...) {
		switch dt := g.Info(v).DType; {
		case v == "":
		case dt == onnxString && n.Op == "Equal" && to < 19:
			return "compares strings (opset 19)"
		case dt >= firstTypeAfter18:
			return fmt.Sprintf("has a value of ONNX type %d (float8, int4 or float4, after opset 18)", int(dt))
		}
	}
	switch {
	case n.Op == "DFT" && g.Opset >= 20 && to < 20:
		return "takes its length and axis as inputs (opset 20)"
	case n.Op == "GroupNormalization" && g.Opset >= 21 && to < 21:
		return "scales each channel (opset 21), not each group"
	case (n.Op == "Cast" || n.Op == "CastLike") && n.Attr("saturate") != nil && to < 19:
		return "has the saturate attribute (opset 19)"
	case n.Op == "Pad" && n.String("mode", "constant") == "wrap" && to < 19:
		return "pads in wrap mode (opset 19)"
	case n.Op == "Resize" && n.String("coordinate_transformation_mode", "half_pixel") == "half_pixel_symmetric" && to < 19:
		return "maps coordinates half_pixel_symmetric (opset 19)"
	case n.Op == "AveragePool" && n.Attr("dilations") != nil && to < 19:
		return "has dilations (opset 19)"
	case n.Op == "GridSample" && to < 20 && g.Info(n.Input(0)).Known && g.Info(n.Input(0)).Rank() != 4:
		return "samples a volume (opset 20)"
	case (n.Op == "ReduceMax" || n.Op == "ReduceMin") && g.Info(n.Input(0)).DType == dtype.Bool && to < 20:
		return "reduces booleans (opset 20)"
	case (n.Op == "QuantizeLinear" || n.Op == "DequantizeLinear") && (n.Attr("block_size") != nil || n.Attr("output_dtype") != nil) && to < 21:
		return "quantises by blocks or to a chosen type (opset 21)"
	case n.Op == "ConstantOfShape" && to < 20:
		if a := n.Attr("value"); a != nil && a.GetT() != nil {
			if dt := dtype.DType(a.GetT().GetDataType()); dt == dtype.BFloat16 {
				return "fills bfloat16 (opset 20)"
			}
		}
	}
	return ""
}

// StandardGelus writes each ONNX Runtime Gelu (com.microsoft, which
// autodiff.FuseGelus puts in training graphs) in standard ONNX: the Gelu
// op where the graph's opset has it (20), else the elementary ops PyTorch
// exports, for a file other runtimes read. It returns the number
// rewritten.
func (g *Graph) StandardGelus() int {
	var out []*Node
	rewritten := 0
	for _, n := range g.Nodes {
		if n.Domain != MSDomain || n.Op != "Gelu" {
			out = append(out, n)
			continue
		}
		rewritten++
		if g.Opset >= 20 {
			n.Domain = ""
			out = append(out, n)
			continue
		}
		b := NewBuilder(g, n.Name+"/")
		mark := len(g.Nodes)
		b.Gelu(n.Input(0))
		chain := g.Nodes[mark:]
		chain[len(chain)-1].Outputs[0] = n.Outputs[0] // the last product writes the Gelu's output
		out = append(out, chain...)
	}
	g.Nodes = out
	if !slices.ContainsFunc(g.Nodes, func(n *Node) bool { return n.Domain == MSDomain }) {
		delete(g.Domains, MSDomain)
	}
	return rewritten
}
