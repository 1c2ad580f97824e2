package ort

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
)

// TestShapeArithmeticIsNoFallback: of the nodes ONNX Runtime puts on the
// CPU in a CUDA session, the element count of x computed from its Shape
// (Shape, Gather, ReduceProd, Cast) is the CUDA provider's own placement
// and passes; a node that reads data (the Div over x, the Erf) is a
// fallback and is named.
func TestShapeArithmeticIsNoFallback(t *testing.T) {
	node := func(op, name string, in []string, out string) *onnxpb.NodeProto {
		return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: in, Output: []string{out}}
	}
	m := &onnxpb.ModelProto{Graph: &onnxpb.GraphProto{
		Initializer: []*onnxpb.TensorProto{{Name: proto.String("axes")}},
		Node: []*onnxpb.NodeProto{
			node("Shape", "shape", []string{"x"}, "s"),
			node("Gather", "gather", []string{"s", "axes"}, "dims"),
			node("ReduceProd", "prod", []string{"dims"}, "n"),
			node("Cast", "cast", []string{"n"}, "nf"),
			node("Div", "div", []string{"x", "nf"}, "y"),
			node("Erf", "erf", []string{"y"}, "z"),
		},
	}}
	model, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	var nodes []NodeAssignment
	for _, n := range m.Graph.Node {
		nodes = append(nodes, NodeAssignment{Provider: "CPUExecutionProvider", Op: n.GetOpType(), Name: n.GetName()})
	}
	nodes[4].Provider = "CUDAExecutionProvider" // the Div has its kernel
	got, err := fallbackNodes(model, nodes)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Name != "erf" {
		t.Errorf("fallback nodes %v, want only the Erf", got)
	}
}
