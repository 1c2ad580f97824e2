package doctor

import (
	"fmt"
	"maps"
	"slices"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// diagnose runs every op of the training graph, then of the optimizer
// graph, alone: on the device and on the CPU, fed the values the CPU's
// whole graph computed at the given step. It returns the first op that
// fails or differs, listing the others, or nil when each agrees alone.
// Each op runs fed the CPU's inputs, so one broken op does not make every
// op after it look broken too.
func (c *check) diagnose(opts Options, ref *run, step int) *OpError {
	var found *OpError
	more := 0
	for _, part := range []struct {
		name string
		g    *graph.Graph
		feed map[string]tensor
	}{{"training", c.train, ref.trainFeeds[step]}, {"optimizer", c.opt, ref.optFeeds[step]}} {
		values, err := allValues(part.g, part.feed)
		if err != nil {
			// The CPU ran these graphs whole; an error here is this
			// package's, and the whole-graph finding stands.
			continue
		}
		for _, n := range part.g.Nodes {
			e := isolate(opts, part.name, part.g, n, values)
			switch {
			case e == nil:
			case found == nil:
				found = e
			case len(found.Also) < 5:
				found.Also = append(found.Also, fmt.Sprintf("%s (node %s)", e.Op, e.Node))
			default:
				more++
			}
		}
	}
	if more > 0 {
		found.Also = append(found.Also, fmt.Sprintf("and %d more", more))
	}
	return found
}

// allValues runs g on the CPU with every value it computes as an output and
// returns them with the feed.
func allValues(g *graph.Graph, feed map[string]tensor) (map[string]tensor, error) {
	all := g.Clone()
	all.Outputs = nil
	for _, n := range all.Nodes {
		for _, o := range n.Outputs {
			if o != "" && !slices.Contains(all.Outputs, o) {
				all.Outputs = append(all.Outputs, o)
				// Type only: ONNX Runtime infers the shapes itself.
				all.Infos[o] = graph.Info{DType: all.Info(o).DType}
			}
		}
	}
	s, err := session(all, ort.Options{}, nil)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	values, err := hostRun(s, feed)
	if err != nil {
		return nil, err
	}
	maps.Copy(values, feed)
	return values, nil
}

// isolate runs node n of g as a graph of its own on the device and on the
// CPU: its inputs graph inputs fed from values, except the initializers it
// reads, which stay initializers (a constant Slice start is not the same
// kernel path as one fed at run time).
func isolate(opts Options, part string, g *graph.Graph, n *graph.Node, values map[string]tensor) *OpError {
	one := graph.New(n.Name, g.Opset)
	maps.Copy(one.Domains, g.Domains)
	feed := map[string]tensor{}
	for _, in := range n.Inputs {
		if in == "" || slices.Contains(one.Inputs, in) || one.Initializers[in] != nil {
			continue
		}
		if t, ok := g.Initializers[in]; ok {
			one.AddInitializer(proto.Clone(t).(*onnxpb.TensorProto))
			continue
		}
		v, ok := values[in]
		if !ok {
			return nil // not computed on the CPU either: nothing to compare
		}
		one.AddInput(in, graph.Info{DType: v.dt, Known: true, Shape: v.shape})
		feed[in] = v
	}
	node := &graph.Node{Op: n.Op, Domain: n.Domain, Name: n.Name, Inputs: slices.Clone(n.Inputs), Outputs: slices.Clone(n.Outputs)}
	for _, a := range n.Attrs {
		node.Attrs = append(node.Attrs, proto.Clone(a).(*onnxpb.AttributeProto))
	}
	one.Nodes = append(one.Nodes, node)
	for _, o := range n.Outputs {
		if v, ok := values[o]; o != "" && ok {
			one.Outputs = append(one.Outputs, o)
			one.Infos[o] = graph.Info{DType: v.dt}
		}
	}
	if len(one.Outputs) == 0 {
		return nil
	}
	cpu, err := session(one, ort.Options{}, nil)
	if err != nil {
		return nil // the CPU cannot run it alone either: no verdict on the device
	}
	defer cpu.Close()
	want, err := hostRun(cpu, feed)
	if err != nil {
		return nil
	}
	fail := &OpError{Device: opts.Device, Op: n.Op, Node: n.Name, Graph: part, Tolerance: opts.Tolerance}
	so := opts.Session
	so.Device = opts.Device
	opts.Trace(fmt.Sprintf("%s (node %s) of the %s graph", n.Op, n.Name, part))
	dev, err := session(one, so, opts.Perturb)
	if err != nil {
		fail.Err = err
		return fail
	}
	defer dev.Close()
	outs, err := deviceRun(dev, feed, map[string]*ort.Value{})
	if err != nil {
		fail.Err = err
		return fail
	}
	defer closeAll(outs)
	for _, o := range one.Outputs {
		got, err := download(dev, outs[o])
		if err != nil {
			fail.Err = err
			return fail
		}
		if d := diff(got, want[o]); !(d <= opts.Tolerance) {
			fail.Output, fail.Diff = o, d
			return fail
		}
	}
	return nil
}
