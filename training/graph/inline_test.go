package graph

import (
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
)

// TestInline: a subgraph copied in twice under two prefixes reads the
// values it is given, keeps its initializers apart, and its outputs have
// their shapes inferred; a subgraph at another opset, an input left unfed
// or a prefix that clashes are errors.
func TestInline(t *testing.T) {
	sub := func(opset int64) *Graph {
		s := New("sub", opset)
		s.AddInput("a", Info{DType: dtype.Float32, Known: true, Shape: []int64{-1, 3}})
		s.AddInitializer(Float32s("w", []int64{3, 2}, []float32{1, 2, 3, 4, 5, 6}))
		b := NewBuilder(s, "")
		s.Outputs = []string{b.Relu(b.MatMul("a", "w"))}
		return s
	}
	g := New("main", EmitOpset)
	g.AddInput("x", Info{DType: dtype.Float32, Known: true, Shape: []int64{4, 3}})
	o1, err := g.Inline(sub(EmitOpset), "p.", map[string]string{"a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	o2, err := g.Inline(sub(EmitOpset), "q.", map[string]string{"a": o1[0] + "_x"})
	if err == nil {
		t.Errorf("a feed that is not a value of the model: no error")
	}
	o2, err = g.Inline(sub(EmitOpset), "q.", map[string]string{"a": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if o1[0] == o2[0] || g.Initializers["p.w"] == nil || g.Initializers["q.w"] == nil {
		t.Errorf("outputs %v %v, initializers %v: the copies are not apart", o1, o2, g.InitOrder)
	}
	if info := g.Info(o1[0]); !info.Known || len(info.Shape) != 2 || info.Shape[0] != 4 || info.Shape[1] != 2 {
		t.Errorf("inlined output %s is %v, want float32[4,2]", o1[0], info)
	}
	for _, tc := range []struct {
		src    *Graph
		prefix string
		feed   map[string]string
		want   string
	}{
		{sub(EmitOpset - 1), "r.", map[string]string{"a": "x"}, "opset"},
		{sub(EmitOpset), "r.", map[string]string{}, "not fed"},
		{sub(EmitOpset), "p.", map[string]string{"a": "x"}, "already a name"},
	} {
		if _, err := g.Inline(tc.src, tc.prefix, tc.feed); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("prefix %s feed %v: err = %v, want %q", tc.prefix, tc.feed, err, tc.want)
		}
	}
}
