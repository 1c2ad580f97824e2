// Package memplan predicts the memory a graph's intermediate values need
// when ONNX Runtime runs it, and says which values make up the peak.
//
// It replays a run: nodes execute in ONNX Runtime's default order (the
// reverse depth-first order of its GraphViewer, reproduced in Order); each
// output is allocated when its node runs and freed after the last node that
// reads it; ops that return a view of their input (Reshape and its kin)
// allocate nothing, and element-wise ops may write over an input that dies
// with them, as ONNX Runtime's planner lets them. The peak is the largest
// sum of live values while a node runs, its inputs and outputs both held.
//
// What it leaves out, and `ortrain bench` (training/bench) measures: kernel
// workspaces (im2col on the CPU, cuDNN's on the GPU), allocator rounding and
// fragmentation, and rewrites ONNX Runtime applies when it loads the graph.
package memplan

import (
	"fmt"
	"slices"
	"sort"

	"github.com/ortrain/ortrain/training/graph"
)

// Value is one intermediate value held at the peak.
type Value struct {
	Name  string
	Op    string // the op producing it
	Node  string // the node producing it
	Bytes int64
}

// Report is the outcome of a replay.
type Report struct {
	// Peak is the most bytes of intermediate values live at once; graph
	// inputs and outputs are not counted (the caller owns them).
	Peak int64
	// PeakNode is the node running when the peak was reached.
	PeakNode string
	// PeakAt is that node's position in Order.
	PeakAt int
	// Live lists the values live at the peak, largest first.
	Live []Value
	// Order is the execution order replayed.
	Order []*graph.Node
	// Unsized lists values whose size could not be inferred (counted as 0).
	Unsized []string
	// Inputs is the bytes of the graph inputs not excluded: the batch, for
	// a training graph.
	Inputs int64
}

// views are ops whose output shares its input's buffer in ONNX Runtime.
var views = map[string]bool{"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true}

// inPlace are element-wise ops whose CPU and CUDA kernels let ONNX
// Runtime's planner put the output in the buffer of input 0 when that
// input dies at the node and has the output's size.
var inPlace = map[string]bool{
	"Relu": true, "Neg": true, "Exp": true, "Log": true, "Sqrt": true, "Sigmoid": true, "Tanh": true, "Abs": true,
	"Add": true, "Sub": true, "Mul": true, "Div": true,
}

// Concrete returns a copy of g whose symbolic input dimensions take the
// values in dims (by the dimension's name, e.g. "batch"; the name "" stands
// for dimensions the graph leaves unnamed), with every value's facts
// inferred again.
func Concrete(g *graph.Graph, dims map[string]int64) (*graph.Graph, error) {
	c := g.Clone()
	for _, in := range c.Inputs {
		info := c.Info(in)
		if !info.Known {
			continue
		}
		sym := c.Dims[in]
		for k, d := range info.Shape {
			if d >= 0 {
				continue
			}
			name := ""
			if k < len(sym) {
				name = sym[k]
			}
			v, ok := dims[name]
			if !ok {
				return nil, fmt.Errorf("memplan: input %s has dimension %d without a value (symbolic name %q)", in, k, name)
			}
			info.Shape[k] = v
		}
		c.Infos[in] = info
	}
	c.Reinfer()
	return c, nil
}

// buffer is a block of memory holding one value and the views of it.
type buffer struct {
	bytes   int64
	readers int // reads still to come, over every value it holds
	value   Value
	counted bool
}

// Replay runs g's nodes in ONNX Runtime's order and tracks live bytes.
// g should be concrete (see Concrete). Values named in exclude (state the
// caller binds: parameters, accumulators and their outputs) are not
// counted.
func Replay(g *graph.Graph, exclude map[string]bool) *Report {
	order := Order(g)
	r := &Report{Order: order}
	size := func(v string) int64 {
		info := g.Info(v)
		if !info.Static() || info.DType.Size() == 0 {
			return -1
		}
		n := int64(info.DType.Size())
		for _, d := range info.Shape {
			n *= d
		}
		return n
	}
	outputs := map[string]bool{}
	for _, o := range g.Outputs {
		outputs[o] = true
	}
	for _, in := range g.Inputs {
		if !exclude[in] {
			r.Inputs += max(size(in), 0)
		}
	}
	reads := map[string]int{}
	for _, n := range order {
		for _, in := range n.Inputs {
			if in != "" {
				reads[in]++
			}
		}
	}
	buf := map[string]*buffer{}
	live := map[*buffer]bool{}
	var cur int64
	unsized := map[string]bool{}
	for i, n := range order {
		var fresh []*buffer
		for k, o := range n.Outputs {
			if o == "" {
				continue
			}
			if k == 0 && views[n.Op] && buf[n.Input(0)] != nil {
				b := buf[n.Input(0)]
				b.readers += reads[o]
				buf[o] = b
				continue
			}
			s := size(o)
			if s < 0 {
				unsized[o] = true
				s = 0
			}
			counted := !outputs[o] && !exclude[o]
			if b := buf[n.Input(0)]; k == 0 && counted && inPlace[n.Op] && b != nil && b.counted && b.readers == 1 && b.bytes == s {
				b.readers += reads[o]
				b.value = Value{Name: o, Op: n.Op, Node: n.Name, Bytes: s}
				buf[o] = b
				continue
			}
			b := &buffer{bytes: s, readers: reads[o], value: Value{Name: o, Op: n.Op, Node: n.Name, Bytes: s}, counted: counted}
			buf[o] = b
			fresh = append(fresh, b)
			if counted {
				cur += s
				live[b] = true
			}
		}
		if cur > r.Peak {
			r.Peak, r.PeakNode, r.PeakAt = cur, n.Name, i
			r.Live = r.Live[:0]
			for b := range live {
				r.Live = append(r.Live, b.value)
			}
		}
		for _, in := range n.Inputs {
			b := buf[in]
			if in == "" || b == nil {
				continue
			}
			if b.readers--; b.readers == 0 && live[b] {
				delete(live, b)
				cur -= b.bytes
			}
		}
		for _, b := range fresh { // an output nothing reads
			if b.readers == 0 && live[b] {
				delete(live, b)
				cur -= b.bytes
			}
		}
	}
	sort.Slice(r.Live, func(i, j int) bool {
		if r.Live[i].Bytes != r.Live[j].Bytes {
			return r.Live[i].Bytes > r.Live[j].Bytes
		}
		return r.Live[i].Name < r.Live[j].Name
	})
	for v := range unsized {
		r.Unsized = append(r.Unsized, v)
	}
	slices.Sort(r.Unsized)
	return r
}

// Order returns g's nodes in the order ONNX Runtime's sequential executor
// runs them by default: a depth-first walk from the leaf nodes (those whose
// outputs no node reads), the last leaf first, entering a node's producers
// highest index first, and emitting each node once all its producers have
// been emitted. A node's index is its position in g.Nodes, as ONNX Runtime
// numbers nodes in the order of the file.
func Order(g *graph.Graph) []*graph.Node {
	idx := map[*graph.Node]int{}
	prod := map[string]int{}
	for i, n := range g.Nodes {
		idx[n] = i
		for _, o := range n.Outputs {
			if o != "" {
				prod[o] = i
			}
		}
	}
	inputs := make([][]int, len(g.Nodes)) // producer nodes, ascending
	consumed := make([]bool, len(g.Nodes))
	for i, n := range g.Nodes {
		seen := map[int]bool{}
		for _, in := range n.Inputs {
			if p, ok := prod[in]; ok && in != "" && !seen[p] {
				seen[p] = true
				inputs[i] = append(inputs[i], p)
				consumed[p] = true
			}
		}
		slices.Sort(inputs[i])
	}
	type entry struct {
		node  int
		leave bool
	}
	var stack []entry
	for i := range g.Nodes {
		if !consumed[i] {
			stack = append(stack, entry{i, false})
		}
	}
	visited := make([]bool, len(g.Nodes))
	order := make([]*graph.Node, 0, len(g.Nodes))
	for len(stack) > 0 {
		e := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if e.leave {
			order = append(order, g.Nodes[e.node])
			continue
		}
		if visited[e.node] {
			continue
		}
		visited[e.node] = true
		stack = append(stack, entry{e.node, true})
		for _, p := range inputs[e.node] {
			if !visited[p] {
				stack = append(stack, entry{p, false})
			}
		}
	}
	return order
}
