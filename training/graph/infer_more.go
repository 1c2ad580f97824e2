package graph

import (
	"math"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
)

// inferMore handles Resize, Pad, Einsum and OneHot, whose output shapes
// follow from constant inputs or an equation.
func (g *Graph) inferMore(n *Node) {
	x := g.Infos[n.Input(0)]
	set := func(dt dtype.DType, s []int64) {
		g.Infos[n.Output(0)] = Info{DType: dt, Known: s != nil, Shape: s}
	}
	switch n.Op {
	case "Resize":
		if !x.Known {
			set(x.DType, nil)
			return
		}
		s := slices.Clone(x.Shape)
		axes := normAxes(n.Ints("axes"), len(s))
		if len(axes) == 0 {
			for i := range s {
				axes = append(axes, int64(i))
			}
		}
		if sizes, ok := g.ConstInts(n.Input(3)); ok && n.Input(3) != "" && len(sizes) == len(axes) {
			for i, a := range axes {
				s[a] = sizes[i]
			}
		} else if t, ok := g.Const(n.Input(2)); ok && n.Input(2) != "" {
			sc, err := FloatData(t)
			if err != nil || len(sc) != len(axes) {
				set(x.DType, nil)
				return
			}
			for i, a := range axes {
				if s[a] >= 0 {
					// As ONNX Runtime computes it, in float32.
					s[a] = int64(math.Floor(float64(float32(s[a]) * float32(sc[i]))))
				}
			}
		} else {
			for _, a := range axes {
				s[a] = -1
			}
		}
		set(x.DType, s)
	case "Pad":
		pads, ok := g.ConstInts(n.Input(1))
		if !x.Known || !ok {
			if x.Known {
				s := make([]int64, len(x.Shape))
				for i := range s {
					s[i] = -1
				}
				set(x.DType, s)
			} else {
				set(x.DType, nil)
			}
			return
		}
		axes, okA := g.ConstInts(n.Input(3))
		if n.Input(3) == "" {
			axes, okA = nil, true
			for i := range x.Shape {
				axes = append(axes, int64(i))
			}
		}
		if !okA || len(pads) != 2*len(axes) {
			set(x.DType, nil)
			return
		}
		s := slices.Clone(x.Shape)
		for i, a := range normAxes(axes, len(s)) {
			if s[a] >= 0 {
				s[a] += pads[i] + pads[i+len(axes)]
			}
		}
		set(x.DType, s)
	case "Einsum":
		ops, out, ok := ParseEinsum(n.String("equation", ""))
		if !ok || len(ops) != len(n.Inputs) {
			set(x.DType, nil)
			return
		}
		dim := map[byte]int64{}
		for i, lab := range ops {
			in := g.Infos[n.Inputs[i]]
			if !in.Known || len(in.Shape) != len(lab) {
				set(x.DType, nil)
				return
			}
			for k := range lab {
				// A label's size: the first one > 1 (1s broadcast).
				d := in.Shape[k]
				if old, seen := dim[lab[k]]; !seen || old == 1 || old == -1 && d > 1 {
					dim[lab[k]] = d
				}
			}
		}
		s := []int64{}
		for k := range out {
			s = append(s, dim[out[k]])
		}
		set(x.DType, s)
	case "OneHot":
		depth, ok := g.ConstInts(n.Input(1))
		vi := g.Infos[n.Input(2)]
		if !x.Known || !ok || len(depth) != 1 {
			set(vi.DType, nil)
			return
		}
		r := len(x.Shape) + 1
		ax := int(n.Int("axis", -1))
		if ax < 0 {
			ax += r
		}
		s := slices.Insert(slices.Clone(x.Shape), ax, depth[0])
		set(vi.DType, s)
	}
}

// ParseEinsum splits an explicit or implicit einsum equation without
// ellipses into the operands' labels and the output's; implicit mode
// outputs the labels used once, in alphabetical order, as ONNX defines.
func ParseEinsum(eq string) (ops []string, out string, ok bool) {
	eq = strings.ReplaceAll(eq, " ", "")
	if strings.Contains(eq, ".") {
		return nil, "", false
	}
	lhs, rhs, explicit := strings.Cut(eq, "->")
	ops = strings.Split(lhs, ",")
	if explicit {
		return ops, rhs, true
	}
	count := map[rune]int{}
	for _, r := range strings.ReplaceAll(lhs, ",", "") {
		count[r]++
	}
	var once []rune
	for r, c := range count {
		if c == 1 {
			once = append(once, r)
		}
	}
	slices.Sort(once)
	return ops, string(once), true
}

// inferRearrange handles TopK, Tile, DepthToSpace, SpaceToDepth and
// GatherND (batch_dims 0), whose sizes follow from constant inputs and
// attributes; an unknown one leaves the output shape unknown.
func (g *Graph) inferRearrange(n *Node) {
	x := g.Infos[n.Input(0)]
	out := func(i int, dt dtype.DType, s []int64) {
		if o := n.Output(i); o != "" {
			g.Infos[o] = Info{DType: dt, Known: s != nil, Shape: s}
		}
	}
	if !x.Known {
		out(0, x.DType, nil)
		if n.Op == "TopK" {
			out(1, dtype.Int64, nil)
		}
		return
	}
	s := slices.Clone(x.Shape)
	switch n.Op {
	case "TopK":
		k, ok := g.ConstInts(n.Input(1))
		ax := n.Int("axis", -1)
		if ax < 0 {
			ax += int64(len(s))
		}
		if !ok || len(k) != 1 || ax < 0 || ax >= int64(len(s)) {
			out(0, x.DType, nil)
			out(1, dtype.Int64, nil)
			return
		}
		s[ax] = k[0]
		out(0, x.DType, s)
		out(1, dtype.Int64, slices.Clone(s))
	case "Tile":
		reps, ok := g.ConstInts(n.Input(1))
		if !ok || len(reps) != len(s) {
			out(0, x.DType, nil)
			return
		}
		for i := range s {
			if s[i] >= 0 {
				s[i] *= reps[i]
			}
		}
		out(0, x.DType, s)
	case "DepthToSpace", "SpaceToDepth":
		bs := n.Int("blocksize", 1)
		if len(s) != 4 || bs < 1 {
			out(0, x.DType, nil)
			return
		}
		scale := func(d, by int64, up bool) int64 {
			switch {
			case d < 0:
				return -1
			case up:
				return d * by
			}
			return d / by
		}
		up := n.Op == "DepthToSpace"
		s[1] = scale(s[1], bs*bs, !up)
		s[2], s[3] = scale(s[2], bs, up), scale(s[3], bs, up)
		out(0, x.DType, s)
	case "GatherND":
		idx := g.Infos[n.Input(1)]
		if !idx.Known || len(idx.Shape) == 0 || n.Int("batch_dims", 0) != 0 || idx.Shape[len(idx.Shape)-1] < 0 {
			out(0, x.DType, nil)
			return
		}
		m := idx.Shape[len(idx.Shape)-1]
		out(0, x.DType, append(slices.Clone(idx.Shape[:len(idx.Shape)-1]), s[m:]...))
	}
}
