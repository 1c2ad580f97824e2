// Package memplan predicts the memory a graph's intermediate values need
// when ONNX Runtime runs it, and says which values make up the peak.
//
// It replays a run: nodes execute in ONNX Runtime's default order (the
// reverse depth-first order of its GraphViewer, reproduced in Order), and
// buffers are planned as ONNX Runtime's allocation planner plans them for
// sequential execution (see Replay): views share their input's buffer;
// among values whose shapes the planner knows, a few activation kernels
// write over an input that dies with them and other outputs take a dead
// buffer of the same shape, which stays allocated until its last value
// dies; every other value gets its own buffer, freed when it dies. The
// peak is the largest sum of buffers held while a node runs, its inputs
// and outputs both held.
//
// What it leaves out, and a probe step measures (`ortrain plan --memory
// --probe`, the training loop's memory/step_peak_bytes): kernel scratch
// (im2col on the CPU, cuDNN's workspaces on the GPU), the allocator's
// rounding and ONNX Runtime's other graph rewrites.
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
	// Trace is the bytes held while each node of Order runs.
	Trace []int64
	// Unsized lists values whose size could not be inferred (counted as 0).
	Unsized []string
	// Inputs is the bytes of the graph inputs not excluded: the batch, for
	// a training graph.
	Inputs int64
}

// views are ops whose output shares its input's buffer in ONNX Runtime.
var views = map[string]bool{"Reshape": true, "Squeeze": true, "Unsqueeze": true, "Flatten": true, "Identity": true}

// IsView reports whether op's output shares its input's buffer in ONNX
// Runtime (where the planner can).
func IsView(op string) bool { return views[op] }

// inPlace are the ops whose CPU kernels let ONNX Runtime's planner put the
// output in the buffer of input 0 when that input dies at the node and has
// the output's size: measured on ONNX Runtime 1.30 (a chain of each op
// allocates one buffer fewer than a chain of Add, Exp or Mul, which do
// not; TestInPlaceOpsMatchONNXRuntime).
var inPlace = map[string]bool{
	"Relu": true, "Sigmoid": true, "Tanh": true, "Softmax": true, "LeakyRelu": true, "Clip": true,
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
	c.ResolveShapeValues()
	return c, nil
}

// buffer is a block of memory holding one value at a time, with the views
// of it; ONNX Runtime's planner may hand it to a later value of the same
// shape once the earlier one has died.
type buffer struct {
	bytes   int64
	key     string // element size and shape: what a reuse must match
	readers int    // reads still to come of the value it holds now
	counted bool
	planned bool // its first value's shape is one the planner compares
	// first and last are the positions in the order from which and up to
	// which the block is held: from its first value's node to the death of
	// its last value. Between two values it stays allocated.
	first, last int
	held        []heldValue // the values it holds, in order
}

type heldValue struct {
	from  int
	value Value
}

// holding returns the value b holds while the node at position i runs.
func (b *buffer) holding(i int) Value {
	v := b.held[0].value
	for _, h := range b.held {
		if h.from <= i {
			v = h.value
		}
	}
	return v
}

// Replay runs g's nodes in ONNX Runtime's order and tracks the bytes held.
// g should be concrete (see Concrete). Values named in exclude (state the
// caller binds: parameters, accumulators and their outputs) are not
// counted.
//
// It plans buffers as ONNX Runtime's allocation planner does for
// sequential execution: an output goes into the buffer of an input that
// dies at its node where the kernel allows it (inPlace), else into the
// buffer of the value freed most recently with the same element size and
// shape, else into a new buffer. A buffer handed on stays allocated between
// its values and is released when its last value dies. The planner
// compares shapes as ONNX Runtime infers them: only values in sized take
// part (nil: every value); the others (those that grow with an unnamed
// batch dimension) get a buffer of their own, freed when they die.
func Replay(g *graph.Graph, exclude, sized map[string]bool) *Report {
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
	key := func(v string) string {
		info := g.Info(v)
		return fmt.Sprint(info.DType.Size(), info.Shape)
	}
	outputs := g.OutputSet()
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
	fused := fusedTransposes(g, order)
	knows := func(v string) bool { return sized == nil || sized[v] } // the planner can match v's shape
	buf := map[string]*buffer{}
	var all, free []*buffer // free: released values' buffers, the latest last
	unsized := map[string]bool{}
	release := func(b *buffer, i int) {
		b.last = i
		if b.counted && b.planned {
			free = append(free, b)
		}
	}
	for i, n := range order {
		for k, o := range n.Outputs {
			if o == "" {
				continue
			}
			if k == 0 && (views[n.Op] || fused[o]) {
				if b := buf[n.Input(0)]; b != nil {
					b.readers += reads[o]
					buf[o] = b
					continue
				}
				if fused[o] { // of a graph input: nothing to share or count
					continue
				}
			}
			s := size(o)
			if s < 0 {
				unsized[o] = true
				s = 0
			}
			v := Value{Name: o, Op: n.Op, Node: n.Name, Bytes: s}
			counted := !outputs[o] && !exclude[o]
			plans := knows(o)
			if b := buf[n.Input(0)]; k == 0 && counted && plans && knows(n.Input(0)) && inPlace[n.Op] && b != nil && b.counted && b.readers == 1 && b.bytes == s {
				b.readers += reads[o]
				b.held = append(b.held, heldValue{i, v})
				buf[o] = b
				continue
			}
			var b *buffer
			if counted && s > 0 && plans {
				k := key(o)
				for j := len(free) - 1; j >= 0; j-- {
					if free[j].key == k {
						b = free[j]
						free = slices.Delete(free, j, j+1)
						break
					}
				}
			}
			if b == nil {
				b = &buffer{bytes: s, key: key(o), counted: counted, planned: plans, first: i}
				all = append(all, b)
			}
			b.readers = reads[o]
			b.held = append(b.held, heldValue{i, v})
			b.last = len(order)
			buf[o] = b
			if b.readers == 0 { // an output nothing reads
				release(b, i)
			}
		}
		for _, in := range n.Inputs {
			b := buf[in]
			if in == "" || b == nil || b.readers == 0 {
				continue
			}
			if b.readers--; b.readers == 0 {
				release(b, i)
			}
		}
	}
	// Account: a buffer is held from its first node through its last.
	delta := make([]int64, len(order)+1)
	for _, b := range all {
		if b.counted {
			delta[b.first] += b.bytes
			delta[min(b.last, len(order)-1)+1] -= b.bytes
		}
	}
	var cur int64
	r.Trace = make([]int64, len(order))
	for i := range order {
		cur += delta[i]
		r.Trace[i] = cur
		if cur > r.Peak {
			r.Peak, r.PeakNode, r.PeakAt = cur, order[i].Name, i
		}
	}
	if len(order) > 0 {
		for _, b := range all {
			if b.counted && b.first <= r.PeakAt && r.PeakAt <= b.last {
				r.Live = append(r.Live, b.holding(r.PeakAt))
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

// fusedTransposes are the Transpose outputs ONNX Runtime folds into the
// MatMul reading them (its MatmulTransposeFusion): a swap of the last two
// axes read by that MatMul alone. They take no memory.
func fusedTransposes(g *graph.Graph, order []*graph.Node) map[string]bool {
	readers := map[string][]*graph.Node{}
	for _, n := range order {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], n)
		}
	}
	outputs := g.OutputSet()
	fused := map[string]bool{}
	for _, n := range order {
		if n.Op != "Transpose" || len(n.Outputs) == 0 || outputs[n.Outputs[0]] {
			continue
		}
		rs := readers[n.Outputs[0]]
		if len(rs) != 1 || rs[0].Op != "MatMul" {
			continue
		}
		perm := n.Ints("perm")
		swap := len(perm) >= 2
		for i, p := range perm {
			want := int64(i)
			switch i {
			case len(perm) - 2:
				want = int64(len(perm) - 1)
			case len(perm) - 1:
				want = int64(len(perm) - 2)
			}
			swap = swap && p == want
		}
		if swap {
			fused[n.Outputs[0]] = true
		}
	}
	return fused
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
