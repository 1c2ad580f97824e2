package autodiff_test

import (
	"errors"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// TestUnrollRecurrentRefuses: what an unrolled recurrence cannot express
// (a sequence length not fixed, clipped or non-default activations) is refused as bad input naming the node. The unrolled recurrences themselves are checked against
// PyTorch autograd in models/pytorch (a bidirectional 2-layer LSTM, a GRU,
// a tanh RNN).
func TestUnrollRecurrentRefuses(t *testing.T) {
	for _, c := range []struct {
		name  string
		seq   int64
		attrs []*graph.Attr
		want  string
	}{
		{"sequence length free", -1, nil, "fixed sequence length"},
		{"clip", 5, []*graph.Attr{graph.AFloat("clip", 3)}, "clip"},
		{"activations", 5, []*graph.Attr{{Name: proto.String("activations"), Type: onnxpb.AttributeProto_STRINGS.Enum(),
			Strings: [][]byte{[]byte("Sigmoid"), []byte("Relu"), []byte("Tanh")}}}, "Relu"},
	} {
		t.Run(c.name, func(t *testing.T) {
			g := graph.New("t", graph.EmitOpset)
			g.AddInput("x", graph.Info{DType: f32, Known: true, Shape: []int64{c.seq, -1, 3}})
			g.AddInput("w", graph.Info{DType: f32, Known: true, Shape: []int64{1, 8, 3}})
			g.AddInput("r", graph.Info{DType: f32, Known: true, Shape: []int64{1, 8, 2}})
			in := []string{"x", "w", "r", "", ""}
			g.AddNode(&graph.Node{Op: "LSTM", Name: "enc/lstm", Inputs: in, Outputs: []string{"y"},
				Attrs: append([]*graph.Attr{graph.AInt("hidden_size", 2)}, c.attrs...)})
			err := autodiff.UnrollRecurrent(g)
			var bi interface{ BadInput() bool }
			if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
				t.Fatalf("err = %v, want a bad-input error", err)
			}
			for _, w := range []string{"enc/lstm", c.want} {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}
