package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// linearModel is x [batch, 3] → Gemm with a weight and a bias → y [batch, 2],
// as a ModelProto for the hostile variants below to edit.
func linearModel() *onnxpb.ModelProto {
	g := graph.New("lin", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
	g.AddInitializer(graph.Float32s("fc.weight", []int64{2, 3}, []float32{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}))
	g.AddInitializer(graph.Float32s("fc.bias", []int64{2}, []float32{0.1, -0.1}))
	b := graph.NewBuilder(g, "")
	b.OpInto("y", "Gemm", []string{"x", "fc.weight", "fc.bias"}, graph.AInt("transB", 1))
	g.Outputs = []string{"y"}
	return g.ToModel()
}

// TestArtifactsBuildHostileGraphs: a model file whose graph cannot be
// trained as ONNX defines it — a cycle, a node reading a value nothing
// defines, no inputs, control flow, an op no ONNX domain has — is exit 2
// naming the file and what is wrong, never exit 1 or a message about
// something else (#34).
func TestArtifactsBuildHostileGraphs(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	dir := t.TempDir()
	for _, tc := range []struct {
		name string
		edit func(m *onnxpb.ModelProto)
		say  []string
	}{
		{"cycle", func(m *onnxpb.ModelProto) {
			gp := m.Graph
			gp.Node = append(gp.Node,
				&onnxpb.NodeProto{OpType: proto.String("Add"), Name: proto.String("a"), Input: []string{"y", "c"}, Output: []string{"b"}},
				&onnxpb.NodeProto{OpType: proto.String("Relu"), Name: proto.String("r"), Input: []string{"b"}, Output: []string{"c"}})
			gp.Output[0].Name = proto.String("c")
		}, []string{"cycle", `Add node "a" reads "c" from Relu node "r"`, `Relu node "r" reads "b" from Add node "a"`}},
		{"undefined", func(m *onnxpb.ModelProto) {
			m.Graph.Node[0].Input[0] = "nowhere"
		}, []string{`"nowhere"`, "no node, input or initializer"}},
		{"no inputs", func(m *onnxpb.ModelProto) {
			m.Graph.Input = nil
			m.Graph.Node[0].Input[0] = "fc.bias"
			m.Graph.Node[0].OpType = proto.String("Add")
			m.Graph.Node[0].Input = []string{"fc.bias", "fc.bias"}
			m.Graph.Node[0].Attribute = nil
		}, []string{"has no inputs"}},
		{"if", func(m *onnxpb.ModelProto) {
			then := proto.Clone(m.Graph).(*onnxpb.GraphProto)
			m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{OpType: proto.String("If"), Name: proto.String("branch"), Input: []string{"cond"}, Output: []string{"z"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("then_branch"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: then}, {Name: proto.String("else_branch"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: then}}})
		}, []string{"branch", "If", "control flow"}},
		{"loop", func(m *onnxpb.ModelProto) {
			body := proto.Clone(m.Graph).(*onnxpb.GraphProto)
			m.Graph.Node = append(m.Graph.Node, &onnxpb.NodeProto{OpType: proto.String("Loop"), Name: proto.String("repeat"), Input: []string{"", ""}, Output: []string{"z"},
				Attribute: []*onnxpb.AttributeProto{{Name: proto.String("body"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: body}}})
		}, []string{"repeat", "Loop", "control flow"}},
		{"unknown op", func(m *onnxpb.ModelProto) {
			// As an exporter of a custom op writes it: no type for the
			// output, which nothing infers.
			m.Graph.Node[0].OpType = proto.String("FrobnicateOp")
			m.Graph.Output[0].Type = nil
		}, []string{`FrobnicateOp node "Gemm"`, "not an ONNX operator"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := linearModel()
			tc.edit(m)
			b, err := proto.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, tc.name+".onnx")
			if err := os.WriteFile(p, b, 0o644); err != nil {
				t.Fatal(err)
			}
			out := filepath.Join(dir, tc.name+"-art")
			code, msg := ortrain("artifacts", "build", "--model", p, "--loss", "mse", "--out", out)
			if code != 2 || !strings.Contains(msg, p) {
				t.Errorf("exit %d: %s; want 2 naming %s", code, msg, p)
			}
			for _, s := range tc.say {
				if !strings.Contains(msg, s) {
					t.Errorf("the message does not say %q: %s", s, msg)
				}
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a refused build made %s: %v", out, err)
			}
		})
	}
}
