package graph

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort/onnxpb"
)

// Inline copies src into g as a subgraph: src's graph inputs read the g
// values inputs maps them to, every other name of src (its nodes, values
// and initializers) gets prefix, and the copied nodes' outputs are
// inferred in g. It returns the g names of src's outputs. src must use
// g's opset and no domain but the ortrain markers', and have no subgraphs
// (If, Loop): their ops would mean something else here.
func (g *Graph) Inline(src *Graph, prefix string, inputs map[string]string) ([]string, error) {
	// Everything is checked before g changes: an error leaves it as it was.
	if src.Opset != g.Opset {
		return nil, fmt.Errorf("graph: %s is at opset %d, the model at %d: export it at opset %d", src.Name, src.Opset, g.Opset, g.Opset)
	}
	for _, in := range src.Inputs {
		v, ok := inputs[in]
		if !ok {
			return nil, fmt.Errorf("graph: input %q of %s is not fed (inputs %v)", in, src.Name, slices.Sorted(maps.Keys(inputs)))
		}
		if _, known := g.Infos[v]; !known {
			return nil, fmt.Errorf("graph: input %q of %s is fed %q, which the model has no value of", in, src.Name, v)
		}
	}
	clash := func(name string) error {
		if _, taken := g.Infos[prefix+name]; taken || g.names[prefix+name] {
			return fmt.Errorf("graph: inlining %s: %s is already a name in the model", src.Name, prefix+name)
		}
		return nil
	}
	for _, name := range src.InitOrder {
		if err := clash(name); err != nil {
			return nil, err
		}
	}
	for _, n := range src.Nodes {
		if n.Domain != "" && n.Domain != StopGradientDomain {
			return nil, fmt.Errorf("graph: %s: node %s is in domain %q, which ortrain does not inline", src.Name, n.Name, n.Domain)
		}
		for _, a := range n.Attrs {
			if a.GetG() != nil || len(a.GetGraphs()) > 0 {
				return nil, fmt.Errorf("graph: %s: node %s (%s) holds a subgraph, which ortrain does not inline", src.Name, n.Name, n.Op)
			}
		}
		for _, o := range n.Outputs {
			if _, fed := inputs[o]; o != "" && !fed {
				if err := clash(o); err != nil {
					return nil, err
				}
			}
		}
	}
	rename := func(name string) string {
		if name == "" {
			return ""
		}
		if v, ok := inputs[name]; ok {
			return v
		}
		return prefix + name
	}
	for _, name := range src.InitOrder {
		t := proto.Clone(src.Initializers[name]).(*onnxpb.TensorProto)
		t.Name = proto.String(prefix + name)
		g.AddInitializer(t)
	}
	for _, n := range src.Nodes {
		c := &Node{Op: n.Op, Domain: n.Domain, Name: g.Fresh(prefix + n.Op)}
		for _, a := range n.Attrs {
			c.Attrs = append(c.Attrs, proto.Clone(a).(*onnxpb.AttributeProto))
		}
		for _, in := range n.Inputs {
			c.Inputs = append(c.Inputs, rename(in))
		}
		for _, o := range n.Outputs {
			c.Outputs = append(c.Outputs, rename(o))
		}
		g.AddNode(c)
	}
	if v, ok := src.Domains[StopGradientDomain]; ok {
		g.Domains[StopGradientDomain] = v
	}
	var outs []string
	for _, o := range src.Outputs {
		outs = append(outs, rename(o))
	}
	return outs, nil
}
