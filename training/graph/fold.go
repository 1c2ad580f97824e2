package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// FoldShapes replaces the integer shape arithmetic that exporters emit
// (Shape of a tensor whose size is known, then Gather, Unsqueeze, Concat,
// Slice and + - × ÷ on the result) by Constant nodes, where every input is
// known. Gradient rules that need constant sizes or slice bounds (an
// attention's q/k/v split, a reshape to heads) then see them, and no Shape
// node keeps an activation alive. It returns how many nodes were folded.
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
		if n.Domain != "" || len(n.Outputs) != 1 {
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
		known[n.Outputs[0]] = out
		folded++
	}
	return folded
}

// intConst is a small constant int64 (or bool) tensor: its elements and
// dimensions.
type intConst struct {
	v, dims []int64
	bool    bool
}

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
		if !x.Static() {
			return out, false
		}
		s := slices.Clone(x.Shape)
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
	case "Add", "Sub", "Mul", "Div", "Equal":
		if len(in) != 2 || !scalarOrVec(in[0]) || !scalarOrVec(in[1]) || in[0].bool || in[1].bool {
			return out, false
		}
		a, b := in[0], in[1]
		size := max(len(a.v), len(b.v))
		if len(a.v) != size && len(a.v) != 1 || len(b.v) != size && len(b.v) != 1 {
			return out, false
		}
		v := make([]int64, size)
		for k := range v {
			x, y := a.v[min(k, len(a.v)-1)], b.v[min(k, len(b.v)-1)]
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
			case "Equal":
				v[k] = map[bool]int64{false: 0, true: 1}[x == y]
			}
		}
		dims := a.dims
		if len(b.dims) > len(dims) || len(b.v) > len(a.v) {
			dims = b.dims
		}
		return intConst{v: v, dims: slices.Clone(dims), bool: n.Op == "Equal"}, true
	case "Where":
		c, a, b := in[0], in[1], in[2]
		if !c.bool || a.bool || b.bool || len(c.dims) > 1 || len(a.dims) > 1 || len(b.dims) > 1 {
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
		// A vector or scalar to a vector (shape [-1] or [k]).
		if len(in) != 2 || in[0].bool || len(in[0].dims) > 1 || len(in[1].v) != 1 || in[1].v[0] != -1 && in[1].v[0] != int64(len(in[0].v)) {
			return out, false
		}
		return intConst{v: in[0].v, dims: []int64{int64(len(in[0].v))}}, true
	case "ConstantOfShape":
		if len(in) != 1 || len(in[0].dims) != 1 || len(in[0].v) != 1 || in[0].v[0] > 64 || in[0].v[0] < 0 {
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
		if len(in) < 3 || len(in[0].dims) != 1 || len(in[1].v) != 1 || len(in[2].v) != 1 {
			return out, false
		}
		if len(in) > 3 && (len(in[3].v) != 1 || in[3].v[0] != 0) || len(in) > 4 && (len(in[4].v) != 1 || in[4].v[0] != 1) {
			return out, false
		}
		r := int64(len(in[0].v))
		s, e := in[1].v[0], in[2].v[0]
		if s < 0 {
			s += r
		}
		if e < 0 {
			e += r
		}
		s, e = min(max(s, 0), r), min(max(e, 0), r)
		if s > e {
			s = e
		}
		v := slices.Clone(in[0].v[s:e])
		return intConst{v: v, dims: []int64{int64(len(v))}}, true
	}
	return out, false
}
