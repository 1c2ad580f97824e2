package graph

import (
	"math"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
)

// Shape rules of the ops whose sizes follow from constant inputs, an
// equation or attributes; see inferRules.

func inferResize(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	if !x.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	s := slices.Clone(x.Shape)
	axes, ok := normAxes(n.Ints("axes"), len(s))
	if !ok {
		c.unknown(x.DType)
		return
	}
	if len(axes) == 0 {
		for i := range s {
			axes = append(axes, int64(i))
		}
	}
	if sizes, partial, ok := g.shapeVector(n.Input(3)); ok && n.Input(3) != "" && len(sizes) == len(axes) {
		for i, a := range axes {
			switch {
			case !partial || !isUnknownElem(sizes[i]):
				s[a] = sizes[i]
			case s[a] < 0 && g.symbolIs(sizes[i], g.root(n.Input(0), int(a))):
				// interpolate(x, size=...) keeps x's batch and channels
			default:
				s[a] = -1
			}
		}
	} else if t, ok := g.Const(n.Input(2)); ok && n.Input(2) != "" {
		sc, err := FloatData(t)
		if err != nil || len(sc) != len(axes) {
			c.set(0, Info{DType: x.DType})
			return
		}
		for i, a := range axes {
			if s[a] >= 0 {
				// As ONNX Runtime computes it, in float32.
				f := math.Floor(float64(float32(s[a]) * float32(sc[i])))
				if !(f >= 0 && f < math.MaxInt64) { // a NaN, negative or huge scale
					c.unknown(x.DType)
					return
				}
				s[a] = int64(f)
			}
		}
	} else {
		for _, a := range axes {
			s[a] = -1
		}
	}
	c.shaped(x.DType, s)
}

func inferPad(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	pads, ok := g.ConstInts(n.Input(1))
	if !x.Known || !ok {
		if x.Known {
			c.shaped(x.DType, unknownDims(int64(len(x.Shape))))
		} else {
			c.set(0, Info{DType: x.DType})
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
		c.set(0, Info{DType: x.DType})
		return
	}
	norm, ok := normAxes(axes, len(x.Shape))
	if !ok {
		c.unknown(x.DType)
		return
	}
	s := slices.Clone(x.Shape)
	var ck checked
	for i, a := range norm {
		if s[a] >= 0 {
			s[a] = ck.add(s[a], ck.add(pads[i], pads[i+len(axes)])) // pads may be negative: a crop
		}
	}
	if ck.over {
		c.unknown(x.DType)
		return
	}
	c.shaped(x.DType, s)
}

func inferEinsum(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	ops, out, ok := ParseEinsum(n.String("equation", ""))
	if !ok || len(ops) != len(n.Inputs) {
		c.set(0, Info{DType: x.DType})
		return
	}
	dim := map[byte]int64{}
	for i, lab := range ops {
		in := g.Infos[n.Inputs[i]]
		if !in.Known || len(in.Shape) != len(lab) {
			c.set(0, Info{DType: x.DType})
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
		d, seen := dim[out[k]]
		if !seen { // an output label no operand has
			c.unknown(x.DType)
			return
		}
		s = append(s, d)
	}
	c.shaped(x.DType, s)
}

func inferOneHot(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	depth, ok := g.ConstInts(n.Input(1))
	vi := c.in(2)
	if !x.Known || !ok || len(depth) != 1 {
		c.set(0, Info{DType: vi.DType})
		return
	}
	ax, ok := normAxis(n.Int("axis", -1), len(x.Shape)+1)
	if !ok {
		c.unknown(vi.DType)
		return
	}
	c.shaped(vi.DType, slices.Insert(slices.Clone(x.Shape), int(ax), depth[0]))
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

// TopK, Tile, DepthToSpace, SpaceToDepth and GatherND (batch_dims 0): an
// unknown size leaves the output shape unknown.

func inferTopK(c *inferCtx) {
	x := c.x
	out := func(s []int64) {
		c.set(0, Info{DType: x.DType, Known: s != nil, Shape: s})
		c.set(1, Info{DType: dtype.Int64, Known: s != nil, Shape: slices.Clone(s)})
	}
	if !x.Known {
		out(nil)
		return
	}
	k, ok := c.g.ConstInts(c.n.Input(1))
	ax, okAx := normAxis(c.n.Int("axis", -1), len(x.Shape))
	if !ok || len(k) != 1 || !okAx {
		out(nil)
		return
	}
	s := slices.Clone(x.Shape)
	s[ax] = k[0]
	out(s)
}

func inferTile(c *inferCtx) {
	x := c.x
	reps, ok := c.g.ConstInts(c.n.Input(1))
	if !x.Known || !ok || len(reps) != len(x.Shape) {
		c.set(0, Info{DType: x.DType})
		return
	}
	s := slices.Clone(x.Shape)
	var ck checked
	for i := range s {
		if s[i] >= 0 {
			s[i] = ck.mul(s[i], reps[i])
		}
	}
	if ck.over {
		c.unknown(x.DType)
		return
	}
	c.shaped(x.DType, s)
}

func inferDepthToSpace(c *inferCtx) {
	x := c.x
	bs := c.n.Int("blocksize", 1)
	if !x.Known || len(x.Shape) != 4 || bs < 1 {
		c.set(0, Info{DType: x.DType})
		return
	}
	var ck checked
	scale := func(d, by int64, up bool) int64 {
		switch {
		case d < 0:
			return -1
		case up:
			return ck.mul(d, by)
		}
		return d / by
	}
	up := c.n.Op == "DepthToSpace"
	s := slices.Clone(x.Shape)
	s[1] = scale(s[1], ck.mul(bs, bs), !up)
	s[2], s[3] = scale(s[2], bs, up), scale(s[3], bs, up)
	if ck.over {
		c.unknown(x.DType)
		return
	}
	c.shaped(x.DType, s)
}

func inferGatherND(c *inferCtx) {
	x, idx := c.x, c.in(1)
	if !x.Known || !idx.Known || len(idx.Shape) == 0 || c.n.Int("batch_dims", 0) != 0 {
		c.set(0, Info{DType: x.DType})
		return
	}
	// Each index tuple addresses the first m axes of x.
	m := idx.Shape[len(idx.Shape)-1]
	if m < 0 || m > int64(len(x.Shape)) {
		c.set(0, Info{DType: x.DType})
		return
	}
	c.shaped(x.DType, append(slices.Clone(idx.Shape[:len(idx.Shape)-1]), x.Shape[m:]...))
}

// inferRecurrent: Y is [seq, directions, batch, hidden] and Y_h, Y_c are
// [directions, batch, hidden] (layout 1: batch first in both).
func inferRecurrent(c *inferCtx) {
	x, r := c.x, c.in(2)
	h := c.n.Int("hidden_size", -1)
	if r.Known && r.Rank() == 3 && h < 0 {
		h = r.Shape[2]
	}
	dirs := int64(1)
	if c.n.String("direction", "forward") == "bidirectional" {
		dirs = 2
	}
	if !x.Known || x.Rank() != 3 {
		c.unknown(x.DType)
		return
	}
	seq, batch := x.Shape[0], x.Shape[1]
	if c.n.Int("layout", 0) != 0 {
		seq, batch = batch, seq
		c.shaped(x.DType, []int64{batch, seq, dirs, h})
		c.set(1, Info{DType: x.DType, Known: true, Shape: []int64{batch, dirs, h}})
		c.set(2, Info{DType: x.DType, Known: true, Shape: []int64{batch, dirs, h}})
		return
	}
	c.shaped(x.DType, []int64{seq, dirs, batch, h})
	c.set(1, Info{DType: x.DType, Known: true, Shape: []int64{dirs, batch, h}})
	c.set(2, Info{DType: x.DType, Known: true, Shape: []int64{dirs, batch, h}})
}
