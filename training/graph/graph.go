// Package graph is ortrain's in-memory ONNX graph: nodes in topological order,
// initializers apart from inputs, the opset, and the static type and shape
// facts gradient rules need; plus a builder vocabulary that emits nodes, and
// reading and writing ONNX files with external data.
//
// Shape facts come from ortrain's own inference (infer.go) over the ops it
// differentiates, seeded by the graph inputs' declared types. Inference was
// chosen over the other two options because it keeps symbolic dimensions
// symbolic (a probe through ONNX Runtime runs on concrete inputs and so fixes
// every dimension, and needs example data for every input), and because it
// runs as nodes are emitted, so losses and gradients built on top of the model
// get facts too; value_info in the file is used where inference knows nothing.
// A dimension that is not known statically is -1. Rules are written to need
// only ranks and the dimensions that are static in the models ortrain trains
// (channels, kernel and spatial sizes); the batch dimension may stay symbolic.
// To add an op's shape rule, register it in inferRules (infer.go); rules run
// on nodes from files, so they check what they index instead of recovering
// (TestInferMalformed and FuzzInfer run every rule on malformed nodes).
package graph

import (
	"fmt"
	"maps"
	"slices"
	"strconv"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
)

// MSDomain is the domain of ONNX Runtime's contrib ops (FusedMatMul, Gelu).
const MSDomain = "com.microsoft"

// Opset bounds: the ai.onnx versions ortrain reads, and the lowest it writes.
const (
	MinOpset  = 13 // ReduceSum's axes became an input here
	MaxOpset  = 21
	EmitOpset = 17
)

// Info is what is statically known about a value: its element type and, when
// Known, its rank and dimensions (-1 where a dimension is not fixed).
type Info struct {
	DType dtype.DType
	Known bool
	Shape []int64
}

// Rank returns the rank, or -1 if it is not known.
func (i Info) Rank() int {
	if !i.Known {
		return -1
	}
	return len(i.Shape)
}

// Static reports whether every dimension is known.
func (i Info) Static() bool {
	return i.Known && !slices.Contains(i.Shape, -1)
}

// Float reports whether the type carries gradients.
func (i Info) Float() bool {
	switch i.DType {
	case dtype.Float32, dtype.Float64, dtype.Float16, dtype.BFloat16:
		return true
	}
	return false
}

func (i Info) String() string {
	if !i.Known {
		return i.DType.String() + "[?]"
	}
	s := i.DType.String() + "["
	for k, d := range i.Shape {
		if k > 0 {
			s += ","
		}
		if d < 0 {
			s += "?"
		} else {
			s += strconv.FormatInt(d, 10)
		}
	}
	return s + "]"
}

// Node is one operator application.
type Node struct {
	Op, Domain, Name string
	Inputs, Outputs  []string // "" marks an omitted optional input or output
	Attrs            []*onnxpb.AttributeProto
}

// Input returns input i, or "" if the node has fewer inputs.
func (n *Node) Input(i int) string {
	if i < len(n.Inputs) {
		return n.Inputs[i]
	}
	return ""
}

// Output returns output i, or "" if the node has fewer outputs.
func (n *Node) Output(i int) string {
	if i < len(n.Outputs) {
		return n.Outputs[i]
	}
	return ""
}

// Attr returns the named attribute or nil.
func (n *Node) Attr(name string) *onnxpb.AttributeProto {
	for _, a := range n.Attrs {
		if a.GetName() == name {
			return a
		}
	}
	return nil
}

// Int returns an integer attribute, or def when absent.
func (n *Node) Int(name string, def int64) int64 {
	if a := n.Attr(name); a != nil {
		return a.GetI()
	}
	return def
}

// Float returns a float attribute, or def when absent.
func (n *Node) Float(name string, def float64) float64 {
	if a := n.Attr(name); a != nil {
		return float64(a.GetF())
	}
	return def
}

// Ints returns an integer-list attribute, or nil when absent.
func (n *Node) Ints(name string) []int64 {
	if a := n.Attr(name); a != nil {
		return a.GetInts()
	}
	return nil
}

// String returns a string attribute, or def when absent.
func (n *Node) String(name, def string) string {
	if a := n.Attr(name); a != nil {
		return string(a.GetS())
	}
	return def
}

// DelAttr removes an attribute if present.
func (n *Node) DelAttr(name string) {
	n.Attrs = slices.DeleteFunc(n.Attrs, func(a *onnxpb.AttributeProto) bool { return a.GetName() == name })
}

// Describe names the node for error messages: "Conv node conv1".
func (n *Node) Describe() string {
	name := n.Name
	if name == "" && len(n.Outputs) > 0 {
		name = "producing " + n.Outputs[0]
	}
	op := n.Op
	if n.Domain != "" && n.Domain != "ai.onnx" {
		op = n.Domain + "." + op
	}
	return fmt.Sprintf("%s node %q", op, name)
}

// Clone returns a deep copy of the node.
func (n *Node) Clone() *Node {
	c := &Node{Op: n.Op, Domain: n.Domain, Name: n.Name, Inputs: slices.Clone(n.Inputs), Outputs: slices.Clone(n.Outputs)}
	for _, a := range n.Attrs {
		c.Attrs = append(c.Attrs, proto.Clone(a).(*onnxpb.AttributeProto))
	}
	return c
}

// Graph is an ONNX graph being read, transformed or built.
type Graph struct {
	Name  string
	Opset int64 // the ai.onnx opset version
	// Domains holds the other operator set imports (com.microsoft...).
	Domains map[string]int64
	Nodes   []*Node
	Inputs  []string // graph inputs, excluding initializers
	Outputs []string
	// Initializers are constant tensors by name; Init keeps their order.
	Initializers map[string]*onnxpb.TensorProto
	InitOrder    []string
	// Infos holds the type and shape facts known for values.
	Infos map[string]Info
	// Metadata is the model file's metadata_props (the exporter's notes,
	// such as which initializers are PyTorch buffers).
	Metadata map[string]string
	// Dims holds symbolic dimension names of graph inputs and outputs, and
	// of intermediate values whose dimensions ortrain names for ONNX
	// Runtime's planner (written as value_info), per value, "" where a
	// dimension has none; kept so written graphs keep them.
	Dims map[string][]string

	names    map[string]bool // every value and node name in use
	seq      int
	shapeOf  map[string]string   // outputs of whole-tensor Shape nodes -> their input
	partial  map[string][]int64  // shape vectors FoldShapes knows in part (unknownElem or symbols for the rest)
	dimRoots map[string][]dimRef // unknown dimensions FoldShapes traced to earlier ones (dimroots.go)
	// dimUnions holds, for an unknown dimension an element-wise op
	// broadcast from inputs of different roots, those roots (dimroots.go)
	dimUnions map[dimRef][]dimRef
	dimSyms   []dimRef // the dimensions partial values' symbols stand for
	// shapeLike holds values known to have an earlier value's shape (a
	// gradient, its value's: SameShape), which TraceDims follows
	shapeLike map[string]string
}

// New returns an empty graph at the given opset.
func New(name string, opset int64) *Graph {
	return &Graph{Name: name, Opset: opset, Domains: map[string]int64{}, Initializers: map[string]*onnxpb.TensorProto{}, Infos: map[string]Info{}, Dims: map[string][]string{}, names: map[string]bool{}}
}

// Info returns the facts known about a value; unknown values have Known false.
func (g *Graph) Info(name string) Info {
	return g.Infos[name]
}

// Reserve marks a name as used so fresh names avoid it.
func (g *Graph) Reserve(name string) {
	g.names[name] = true
}

// Fresh returns a new unique name starting with base.
func (g *Graph) Fresh(base string) string {
	if !g.names[base] {
		g.names[base] = true
		return base
	}
	for {
		g.seq++
		s := base + "_" + strconv.Itoa(g.seq)
		if !g.names[s] {
			g.names[s] = true
			return s
		}
	}
}

// AddInput declares a graph input with its facts.
func (g *Graph) AddInput(name string, info Info) {
	g.Reserve(name)
	g.Inputs = append(g.Inputs, name)
	g.Infos[name] = info
}

// AddInitializer adds a constant tensor, replacing one of the same name.
func (g *Graph) AddInitializer(t *onnxpb.TensorProto) {
	name := t.GetName()
	g.Reserve(name)
	if _, ok := g.Initializers[name]; !ok {
		g.InitOrder = append(g.InitOrder, name)
	}
	g.Initializers[name] = t
	dims := slices.Clone(t.GetDims())
	if dims == nil {
		dims = []int64{}
	}
	g.Infos[name] = Info{DType: dtype.DType(t.GetDataType()), Known: true, Shape: dims}
}

// RemoveInitializer drops a constant tensor (to make it an input instead).
func (g *Graph) RemoveInitializer(name string) {
	delete(g.Initializers, name)
	g.InitOrder = slices.DeleteFunc(g.InitOrder, func(s string) bool { return s == name })
}

// AddNode appends a node, naming it if unnamed, and infers its outputs' facts.
func (g *Graph) AddNode(n *Node) *Node {
	if n.Name == "" {
		n.Name = g.Fresh(n.Op)
	} else {
		g.Reserve(n.Name)
	}
	for _, o := range n.Outputs {
		if o != "" {
			g.Reserve(o)
		}
	}
	g.Nodes = append(g.Nodes, n)
	g.infer(n)
	return n
}

// CountOp is the number of g's nodes of op type op.
func (g *Graph) CountOp(op string) int {
	n := 0
	for _, node := range g.Nodes {
		if node.Op == op {
			n++
		}
	}
	return n
}

// OutputSet is the set of g's outputs.
func (g *Graph) OutputSet() map[string]bool {
	set := make(map[string]bool, len(g.Outputs))
	for _, o := range g.Outputs {
		set[o] = true
	}
	return set
}

// Producers maps each value to the node producing it.
func (g *Graph) Producers() map[string]*Node {
	p := map[string]*Node{}
	for _, n := range g.Nodes {
		for _, o := range n.Outputs {
			if o != "" {
				p[o] = n
			}
		}
	}
	return p
}

// Consumers maps each value to the nodes reading it, in graph order.
func (g *Graph) Consumers() map[string][]*Node {
	c := map[string][]*Node{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			if in != "" {
				c[in] = append(c[in], n)
			}
		}
	}
	return c
}

// RenameLeaf gives name to the value old, which node n writes and no node
// reads: its type and shape facts go with it.
func (g *Graph) RenameLeaf(n *Node, old, name string) {
	for i, o := range n.Outputs {
		if o == old {
			n.Outputs[i] = name
		}
	}
	g.names[name] = true
	moveKey(g.Infos, old, name)
	moveKey(g.Dims, old, name)
	moveKey(g.shapeLike, old, name)
	moveKey(g.dimRoots, old, name)
}

// moveKey files m's entry for old under name.
func moveKey[V any](m map[string]V, old, name string) {
	if v, ok := m[old]; ok {
		m[name] = v
		delete(m, old)
	}
}

// Sort orders the nodes topologically, keeping the existing order where it
// already is one, and fails on a cycle or a value nothing produces (a
// *SortError naming the nodes).
func (g *Graph) Sort() error {
	avail := map[string]bool{"": true}
	for _, in := range g.Inputs {
		avail[in] = true
	}
	for name := range g.Initializers {
		avail[name] = true
	}
	done := make([]bool, len(g.Nodes))
	out := make([]*Node, 0, len(g.Nodes))
	for len(out) < len(g.Nodes) {
		progress := false
		for i, n := range g.Nodes {
			if done[i] {
				continue
			}
			ready := true
			for _, in := range n.Inputs {
				if !avail[in] {
					ready = false
					break
				}
			}
			if !ready {
				continue
			}
			done[i] = true
			progress = true
			out = append(out, n)
			for _, o := range n.Outputs {
				avail[o] = true
			}
		}
		if !progress {
			return stuck(g.Nodes, done, avail)
		}
	}
	g.Nodes = out
	return nil
}

// Prune removes nodes whose outputs no graph output needs, and initializers
// nothing reads.
func (g *Graph) Prune() {
	need := map[string]bool{}
	for _, o := range g.Outputs {
		need[o] = true
	}
	keep := make([]bool, len(g.Nodes))
	for i := len(g.Nodes) - 1; i >= 0; i-- {
		n := g.Nodes[i]
		for _, o := range n.Outputs {
			if need[o] {
				keep[i] = true
			}
		}
		if keep[i] {
			for _, in := range n.Inputs {
				need[in] = true
			}
		}
	}
	var nodes []*Node
	for i, n := range g.Nodes {
		if keep[i] {
			nodes = append(nodes, n)
		}
	}
	g.Nodes = nodes
	for _, name := range slices.Clone(g.InitOrder) {
		if !need[name] {
			g.RemoveInitializer(name)
		}
	}
}

// RunFirst moves the nodes producing the given values to the end of the
// node list, the first value's node last, when no other node reads what
// they make. ONNX Runtime's default execution order walks the graph
// depth-first from such leaf nodes, the one latest in the file first, so
// they run before the other leaves, in the order given: a training graph's
// loss and statistics updates are then computed with the forward pass
// rather than after the whole backward pass, which would keep the values
// they read alive to the end.
func (g *Graph) RunFirst(values []string) {
	read := map[string]bool{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			read[in] = true
		}
	}
	var moved []*Node
	values = slices.Clone(values)
	for i := len(values) - 1; i > 0; i-- { // a value named twice runs at its first place
		if slices.Contains(values[:i], values[i]) {
			values = slices.Delete(values, i, i+1)
		}
	}
	for i := len(values) - 1; i >= 0; i-- {
		k := slices.IndexFunc(g.Nodes, func(n *Node) bool { return slices.Contains(n.Outputs, values[i]) })
		if k < 0 || slices.Contains(moved, g.Nodes[k]) || slices.ContainsFunc(g.Nodes[k].Outputs, func(o string) bool { return read[o] }) {
			continue
		}
		moved = append(moved, g.Nodes[k])
	}
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *Node) bool { return slices.Contains(moved, n) })
	g.Nodes = append(g.Nodes, moved...)
}

// Clone returns a deep copy of the graph.
func (g *Graph) Clone() *Graph {
	c := New(g.Name, g.Opset)
	for k, v := range g.Domains {
		c.Domains[k] = v
	}
	for _, n := range g.Nodes {
		c.Nodes = append(c.Nodes, n.Clone())
	}
	c.Inputs = slices.Clone(g.Inputs)
	c.Outputs = slices.Clone(g.Outputs)
	c.Metadata = maps.Clone(g.Metadata)
	for k, v := range g.Initializers {
		c.Initializers[k] = v // tensors are not mutated in place
	}
	c.InitOrder = slices.Clone(g.InitOrder)
	for k, v := range g.Infos {
		c.Infos[k] = Info{DType: v.DType, Known: v.Known, Shape: slices.Clone(v.Shape)}
	}
	for k, v := range g.Dims {
		c.Dims[k] = slices.Clone(v)
	}
	for k := range g.names {
		c.names[k] = true
	}
	c.seq = g.seq
	if g.partial != nil {
		c.partial = maps.Clone(g.partial)
	}
	if g.dimUnions != nil {
		c.dimUnions = maps.Clone(g.dimUnions)
	}
	if g.dimRoots != nil {
		c.dimRoots = maps.Clone(g.dimRoots)
	}
	if g.shapeLike != nil {
		c.shapeLike = maps.Clone(g.shapeLike)
	}
	c.dimSyms = slices.Clone(g.dimSyms)
	if g.shapeOf != nil {
		c.shapeOf = maps.Clone(g.shapeOf)
	}
	return c
}

// Const returns the tensor behind a value when it is constant: an
// initializer or the output of a Constant node.
func (g *Graph) Const(name string) (*onnxpb.TensorProto, bool) {
	if t, ok := g.Initializers[name]; ok {
		return t, true
	}
	for _, n := range g.Nodes {
		if n.Op == "Constant" && n.Output(0) == name {
			if a := n.Attr("value"); a != nil && a.GetT() != nil {
				return a.GetT(), true
			}
			if a := n.Attr("value_ints"); a != nil {
				return Int64s("", []int64{int64(len(a.GetInts()))}, a.GetInts()), true
			}
			if a := n.Attr("value_int"); a != nil {
				return Int64s("", nil, []int64{a.GetI()}), true
			}
			if a := n.Attr("value_float"); a != nil {
				return Float32s("", nil, []float32{a.GetF()}), true
			}
		}
	}
	return nil, false
}

// ConstInts returns the elements of a constant integer tensor.
func (g *Graph) ConstInts(name string) ([]int64, bool) {
	t, ok := g.Const(name)
	if !ok {
		return nil, false
	}
	v, err := IntData(t)
	return v, err == nil
}

// shapeVector returns a shape operand's elements: a constant's, or a
// partial value's with -1 where an element is not known; partial says
// which. Rules that take a target shape read it.
func (g *Graph) shapeVector(name string) (v []int64, partial, ok bool) {
	if v, ok := g.ConstInts(name); ok {
		return v, false, true
	}
	p, ok := g.partial[name]
	return p, ok, ok
}

// AddOutput gives n one more output named from base, and infers the facts
// of all its outputs again. Gradient rules use it to ask a forward node for
// something it can compute on the way (MaxPool's Indices).
func (g *Graph) AddOutput(n *Node, base string) string {
	name := g.Fresh(base)
	n.Outputs = append(n.Outputs, name)
	g.infer(n)
	return name
}

// InferNode recomputes the facts of n's outputs from its inputs', after a
// pass changed them (an input's type, say).
func (g *Graph) InferNode(n *Node) { g.infer(n) }

// Reinfer recomputes the facts of every node's outputs in order, after a
// pass changed nodes in place.
func (g *Graph) Reinfer() {
	for _, n := range g.Nodes {
		g.infer(n)
	}
}

// Errorf formats an error prefixed with the package name.
func Errorf(format string, args ...any) error {
	return fmt.Errorf("graph: "+format, args...)
}
