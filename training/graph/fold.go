package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// FoldShapes replaces the integer shape arithmetic that exporters emit
// (Shape of a tensor, then Gather, Unsqueeze, Concat, Slice and + - × ÷ on
// the result) by Constant nodes, where every element of the result is
// known. Gradient rules that need constant sizes or slice bounds (an
// attention's q/k/v split, a reshape to heads) then see them, and no Shape
// node keeps an activation alive. Results with unknown elements (the
// batch size) are kept as partial values, which Reshape, Expand and
// ConstantOfShape read for the sizes they do know. It returns how many
// nodes were folded.
func (g *Graph) FoldShapes() int {
	known := map[string]intConst{}
	get := func(name string) (intConst, bool) {
		if k, ok := known[name]; ok {
			return k, true
		}
		t, ok := g.Const(name)
		if !ok {
			return intConst{}, false
		}
		k := intConst{dims: slices.Clone(t.Dims)}
		switch dtype.DType(t.GetDataType()) {
		case dtype.Int64:
			v, err := IntData(t)
			if err != nil {
				return intConst{}, false
			}
			k.v = v
		case dtype.Bool:
			raw, err := RawBytes(t)
			if err != nil {
				return intConst{}, false
			}
			for _, b := range raw {
				k.v = append(k.v, int64(b))
			}
			k.bool = true
		default:
			return intConst{}, false
		}
		known[name] = k
		return k, true
	}
	folded := 0
	for i, n := range g.Nodes {
		// One pass infers and folds: sizes a fold makes known reach the
		// Shape nodes after it.
		g.infer(n)
		g.traceDims(n)
		if n.Domain != "" || len(n.Outputs) != 1 {
			continue
		}
		if c, ok := foldFloatConcat(g, n); ok {
			g.Nodes[i] = c
			g.infer(c)
			folded++
			continue
		}
		var in []intConst
		ok := true
		for j, name := range n.Inputs {
			if name == "" || n.Op == "Shape" && j == 0 {
				continue
			}
			k, found := get(name)
			if !found {
				ok = false
				break
			}
			in = append(in, k)
		}
		if !ok {
			continue
		}
		out, done := foldOp(g, n, in)
		if !done {
			continue
		}
		known[n.Outputs[0]] = out
		if !out.complete() {
			if len(out.dims) == 1 {
				if g.partial == nil {
					g.partial = map[string][]int64{}
				}
				g.partial[n.Outputs[0]] = out.v
			}
			continue
		}
		t := Int64s("", out.dims, out.v)
		if out.bool {
			raw := make([]byte, len(out.v))
			for k, x := range out.v {
				raw[k] = byte(x)
			}
			t = Raw("", dtype.Bool, out.dims, raw)
		}
		c := &Node{Op: "Constant", Name: n.Name, Outputs: n.Outputs, Attrs: []*Attr{ATensor("value", t)}}
		g.Nodes[i] = c
		g.infer(c)
		folded++
	}
	return folded
}

// intConst is a small int64 (or bool) tensor computed from constants and
// shapes: its elements (unknownElem where a size it reads is not known)
// and dimensions.
type intConst struct {
	v, dims []int64
	bool    bool
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

func (k intConst) complete() bool { return !slices.ContainsFunc(k.v, isUnknownElem) }

// foldOp computes n on constant int64 inputs (Shape reads its input's
// static shape instead); done is false for anything else.
func foldOp(g *Graph, n *Node, in []intConst) (out intConst, done bool) {
	scalarOrVec := func(k intConst) bool { return len(k.dims) <= 1 }
	if len(in) == 0 && n.Op != "Shape" || n.Op == "Where" && len(in) != 3 {
		return out, false // a malformed node, missing inputs: not ours to fold
	}
	switch n.Op {
	case "Shape":
		x := g.Info(n.Input(0))
		if !x.Known {
			return out, false
		}
		s := slices.Clone(x.Shape)
		for i, d := range s {
			if d < 0 { // known only at run time: the symbol of its dimension
				s[i] = g.symbol(g.root(n.Input(0), i))
			}
		}
		start, end := n.Int("start", 0), n.Int("end", int64(len(s)))
		r := int64(len(s))
		if start < 0 {
			start += r
		}
		if end < 0 {
			end += r
		}
		start, end = min(max(start, 0), r), min(max(end, 0), r)
		if start > end {
			start = end
		}
		s = s[start:end]
		return intConst{v: s, dims: []int64{int64(len(s))}}, true
	case "Identity":
		return in[0], true
	case "Gather":
		if len(in) != 2 || len(in[0].dims) != 1 || !scalarOrVec(in[1]) || n.Int("axis", 0) != 0 {
			return out, false
		}
		var v []int64
		if !in[1].complete() {
			return out, false
		}
		for _, ix := range in[1].v {
			if ix < 0 {
				ix += int64(len(in[0].v))
			}
			if ix < 0 || ix >= int64(len(in[0].v)) {
				return out, false
			}
			v = append(v, in[0].v[ix])
		}
		return intConst{v: v, dims: slices.Clone(in[1].dims)}, true
	case "Unsqueeze":
		// A scalar or vector becoming a vector: [k] or [1, k].
		if len(in[0].dims) == 0 {
			return intConst{v: in[0].v, dims: []int64{1}}, true
		}
		return out, false
	case "Squeeze":
		if len(in[0].dims) == 1 && len(in[0].v) == 1 {
			return intConst{v: in[0].v}, true
		}
		return out, false
	case "Concat":
		var v []int64
		for _, k := range in {
			if len(k.dims) != 1 {
				return out, false
			}
			v = append(v, k.v...)
		}
		return intConst{v: v, dims: []int64{int64(len(v))}}, true
	case "Add", "Sub", "Mul", "Div", "Mod", "Max", "Min", "Equal", "Less", "Greater":
		if len(in) != 2 || !scalarOrVec(in[0]) || !scalarOrVec(in[1]) || in[0].bool || in[1].bool {
			return out, false
		}
		a, b := in[0], in[1]
		size := max(len(a.v), len(b.v))
		if len(a.v) != size && len(a.v) != 1 || len(b.v) != size && len(b.v) != 1 {
			return out, false
		}
		v := make([]int64, size)
		cmp := n.Op == "Equal" || n.Op == "Less" || n.Op == "Greater"
		for k := range v {
			x, y := a.v[min(k, len(a.v)-1)], b.v[min(k, len(b.v)-1)]
			if isUnknownElem(x) || isUnknownElem(y) {
				if cmp {
					return out, false // a comparison of sizes not known
				}
				v[k] = unknownElem
				continue
			}
			switch n.Op {
			case "Add":
				v[k] = x + y
			case "Sub":
				v[k] = x - y
			case "Mul":
				v[k] = x * y
			case "Div":
				if y == 0 {
					return out, false
				}
				v[k] = x / y // ONNX integer division truncates, as Go's
			case "Mod":
				if y == 0 || n.Int("fmod", 0) != 0 {
					return out, false
				}
				v[k] = x % y
				if v[k] != 0 && (v[k] < 0) != (y < 0) {
					v[k] += y // integer Mod takes the divisor's sign, as Python's %
				}
			case "Max":
				v[k] = max(x, y)
			case "Min":
				v[k] = min(x, y)
			case "Equal":
				v[k] = boolInt(x == y)
			case "Less":
				v[k] = boolInt(x < y)
			case "Greater":
				v[k] = boolInt(x > y)
			}
		}
		dims := a.dims
		if len(b.dims) > len(dims) || len(b.v) > len(a.v) {
			dims = b.dims
		}
		return intConst{v: v, dims: slices.Clone(dims), bool: cmp}, true
	case "Where":
		c, a, b := in[0], in[1], in[2]
		if !c.complete() || !c.bool || a.bool || b.bool || len(c.dims) > 1 || len(a.dims) > 1 || len(b.dims) > 1 {
			return out, false
		}
		size := max(len(c.v), len(a.v), len(b.v))
		v := make([]int64, size)
		for k := range v {
			for _, x := range []intConst{c, a, b} {
				if len(x.v) != size && len(x.v) != 1 {
					return out, false
				}
			}
			if c.v[min(k, len(c.v)-1)] != 0 {
				v[k] = a.v[min(k, len(a.v)-1)]
			} else {
				v[k] = b.v[min(k, len(b.v)-1)]
			}
		}
		return intConst{v: v, dims: []int64{int64(size)}}, true
	case "Reshape":
		if len(in) != 2 || len(in[1].dims) != 1 || !in[1].complete() || n.Int("allowzero", 0) != 0 {
			return out, false
		}
		dims := slices.Clone(in[1].v)
		infer, size := -1, int64(1)
		for i, d := range dims {
			switch {
			case d == 0 && i < len(in[0].dims):
				dims[i] = in[0].dims[i]
			case d == -1 && infer < 0:
				infer = i
				continue
			case d < 0:
				return out, false
			}
			size *= dims[i]
		}
		if infer >= 0 {
			if size == 0 || int64(len(in[0].v))%size != 0 {
				return out, false
			}
			dims[infer] = int64(len(in[0].v)) / size
		} else if size != int64(len(in[0].v)) {
			return out, false
		}
		return intConst{v: in[0].v, dims: dims, bool: in[0].bool}, true
	case "ConstantOfShape":
		if len(in) != 1 || len(in[0].dims) != 1 || len(in[0].v) != 1 || in[0].v[0] > 64 || in[0].v[0] < 0 { // an unknown length is negative
			return out, false
		}
		fill := int64(0)
		if a := n.Attr("value"); a != nil && a.GetT() != nil {
			t := a.GetT()
			if dtype.DType(t.GetDataType()) != dtype.Int64 {
				return out, false
			}
			fv, err := IntData(t)
			if err != nil || len(fv) != 1 {
				return out, false
			}
			fill = fv[0]
		} else {
			return out, false // float zeros by default: not integer arithmetic
		}
		v := make([]int64, in[0].v[0])
		for k := range v {
			v[k] = fill
		}
		return intConst{v: v, dims: []int64{in[0].v[0]}}, true
	case "Cast":
		if n.Int("to", 0) == int64(dtype.Int64) {
			return in[0], true
		}
	case "Slice":
		return foldSlice(in)
	case "Transpose":
		if len(in[0].dims) != 2 {
			return out, false
		}
		if p := n.Ints("perm"); p != nil && !slices.Equal(p, []int64{1, 0}) {
			return out, false
		}
		r, c := in[0].dims[0], in[0].dims[1]
		v := make([]int64, 0, len(in[0].v))
		for j := range c {
			for i := range r {
				v = append(v, in[0].v[i*c+j])
			}
		}
		return intConst{v: v, dims: []int64{c, r}, bool: in[0].bool}, true
	}
	return out, false
}

// foldSlice slices a small constant or partial tensor: ONNX Slice with
// constant starts, ends, axes and steps (negative steps included, as
// exporters reverse pad lists with them).
func foldSlice(in []intConst) (intConst, bool) {
	if len(in) < 3 || len(in) > 5 || len(in[0].v) > foldLimit {
		return intConst{}, false
	}
	x := in[0]
	r := len(x.dims)
	starts, ends := in[1].v, in[2].v
	axes := make([]int64, len(starts))
	for i := range axes {
		axes[i] = int64(i)
	}
	steps := slices.Repeat([]int64{1}, len(starts))
	if len(in) > 3 {
		axes = in[3].v
	}
	if len(in) > 4 {
		steps = in[4].v
	}
	if len(ends) != len(starts) || len(axes) != len(starts) || len(steps) != len(starts) {
		return intConst{}, false
	}
	for _, k := range in[1:] {
		if !k.complete() {
			return intConst{}, false
		}
	}
	// The indices each axis keeps.
	keep := make([][]int64, r)
	for a := range keep {
		keep[a] = make([]int64, x.dims[a])
		for i := range keep[a] {
			keep[a][i] = int64(i)
		}
	}
	for i, ax := range axes {
		if ax < 0 {
			ax += int64(r)
		}
		if ax < 0 || ax >= int64(r) || steps[i] == 0 {
			return intConst{}, false
		}
		d := x.dims[ax]
		s, e, step := starts[i], ends[i], steps[i]
		if s < 0 {
			s += d
		}
		if e < 0 {
			e += d
		}
		var idx []int64
		if step > 0 {
			s, e = min(max(s, 0), d), min(max(e, 0), d)
			for k := s; k < e; k += step {
				idx = append(idx, k)
			}
		} else {
			s, e = min(max(s, 0), d-1), min(max(e, -1), d-1)
			for k := s; k > e; k += step {
				idx = append(idx, k)
			}
		}
		keep[ax] = idx
	}
	// Gather the kept elements in row-major order.
	dims := make([]int64, r)
	for a := range keep {
		dims[a] = int64(len(keep[a]))
	}
	var v []int64
	pos := make([]int, r)
	for n := prod(dims); n > 0; n-- {
		off := int64(0)
		for a := range r {
			off = off*x.dims[a] + keep[a][pos[a]]
		}
		v = append(v, x.v[off])
		for a := r - 1; a >= 0; a-- {
			if pos[a]++; pos[a] < len(keep[a]) {
				break
			}
			pos[a] = 0
		}
	}
	return intConst{v: v, dims: dims, bool: x.bool}, true
}

// foldLimit bounds the tensors folding computes on: shape arithmetic is
// small, and a large integer initializer is data, not a shape.
const foldLimit = 4096

// foldFloatConcat folds a Concat of small Constant-node vectors of another
// type than int64 (Resize's scales, exported as [1, 1] then [2, 2]); a
// Concat of initializers (an RNN's two biases) is left alone, they train.
func foldFloatConcat(g *Graph, n *Node) (*Node, bool) {
	if n.Op != "Concat" || len(n.Inputs) == 0 {
		return nil, false
	}
	var raw []byte
	var dt dtype.DType
	for k, name := range n.Inputs {
		if _, param := g.Initializers[name]; param {
			return nil, false // floating initializers are parameters, not constants
		}
		t, ok := g.Const(name)
		if !ok || len(t.GetDims()) != 1 {
			return nil, false
		}
		d := dtype.DType(t.GetDataType())
		if k == 0 {
			dt = d
		}
		if d != dt || d == dtype.Int64 || d == dtype.Bool {
			return nil, false // integers fold with the shape arithmetic
		}
		b, err := RawBytes(t)
		if err != nil || len(raw)+len(b) > foldLimit {
			return nil, false
		}
		raw = append(raw, b...)
	}
	size := int64(dt.Size())
	if size == 0 || int64(len(raw))%size != 0 {
		return nil, false
	}
	t := Raw("", dt, []int64{int64(len(raw)) / size}, raw)
	return &Node{Op: "Constant", Name: n.Name, Outputs: n.Outputs, Attrs: []*Attr{ATensor("value", t)}}, true
}

// ResolveShapeValues records the values of the shape arithmetic that the
// inputs' sizes now determine (after a symbolic batch was given a value)
// as partial values, which Reshape, Expand and ConstantOfShape read, and
// infers every node again. Unlike FoldShapes it replaces no node: the
// graph stays the one that runs. Without it a size that the batch fixes
// only through a Shape node stays unknown, and at batch 1, where
// broadcasting an unknown size against 1 cannot tell which it is, it
// stays unknown downstream too.
func (g *Graph) ResolveShapeValues() {
	f := g.Clone()
	f.FoldShapes()
	if g.partial == nil {
		g.partial = map[string][]int64{}
	}
	// f's partial values first: they include the stale ones g had.
	for k, v := range f.partial {
		g.partial[k] = v
	}
	for i, n := range f.Nodes {
		if i >= len(g.Nodes) || n.Op != "Constant" || g.Nodes[i].Op == "Constant" {
			continue
		}
		if v, ok := f.ConstInts(n.Outputs[0]); ok && len(f.Info(n.Outputs[0]).Shape) == 1 {
			g.partial[n.Outputs[0]] = v
		}
	}
	g.Reinfer()
}
