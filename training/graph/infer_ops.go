package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// Shape rules of the elementwise, broadcasting, matrix and layout ops; see
// inferRules.

func inferSame(c *inferCtx) { c.set(0, c.x) }

// inferBatchNorm: in training mode the running mean and variance come out
// shaped as they went in.
func inferBatchNorm(c *inferCtx) {
	c.set(0, c.x)
	if len(c.n.Outputs) > 1 {
		c.set(1, c.in(3))
		c.set(2, c.in(4))
	}
}

// inferLayerNorm: Mean and InvStdDev, where asked for, keep the axes
// before axis and have 1 for the normalised ones, in stash_type (float32
// by default).
func inferLayerNorm(c *inferCtx) {
	c.set(0, c.x)
	if len(c.n.Outputs) < 2 || !c.x.Known {
		return
	}
	axis, ok := normAxis(c.n.Int("axis", -1), len(c.x.Shape))
	if !ok {
		return
	}
	shape := slices.Clone(c.x.Shape)
	for i := int(axis); i < len(shape); i++ {
		shape[i] = 1
	}
	stat := Info{DType: dtype.DType(c.n.Int("stash_type", int64(dtype.Float32))), Known: true, Shape: shape}
	for i := 1; i < len(c.n.Outputs) && i < 3; i++ {
		c.set(i, stat)
	}
}

func inferDropout(c *inferCtx) {
	c.set(0, c.x)
	if len(c.n.Outputs) > 1 {
		c.set(1, Info{DType: dtype.Bool, Known: c.x.Known, Shape: c.x.Shape})
	}
}

func inferCast(c *inferCtx) {
	c.set(0, Info{DType: dtype.DType(c.n.Int("to", 0)), Known: c.x.Known, Shape: c.x.Shape})
}

func inferCastLike(c *inferCtx) {
	c.set(0, Info{DType: c.in(1).DType, Known: c.x.Known, Shape: slices.Clone(c.x.Shape)})
}

func inferIsNaN(c *inferCtx) {
	c.set(0, Info{DType: dtype.Bool, Known: c.x.Known, Shape: slices.Clone(c.x.Shape)})
}

func inputType(c *inferCtx) dtype.DType { return c.x.DType }
func boolType(*inferCtx) dtype.DType    { return dtype.Bool }
func whereType(c *inferCtx) dtype.DType { return c.in(1).DType }

// broadcastRule is the rule of an op whose inputs (at least minInputs)
// broadcast together, with its output type from outType.
func broadcastRule(minInputs int, outType func(*inferCtx) dtype.DType) inferRule {
	return func(c *inferCtx) {
		dt := outType(c)
		if len(c.n.Inputs) < minInputs {
			c.unknown(dt)
			return
		}
		infos := make([]Info, len(c.n.Inputs))
		for i := range c.n.Inputs {
			infos[i] = c.in(i)
		}
		if s, ok := Broadcast(infos...); ok {
			c.shaped(dt, s)
		} else {
			c.set(0, Info{DType: dt})
		}
	}
}

func inferMatMul(c *inferCtx) {
	a, b := c.x, c.in(1)
	if !a.Known || !b.Known || a.Rank() == 0 || b.Rank() == 0 {
		c.set(0, Info{DType: a.DType})
		return
	}
	as, bs := slices.Clone(a.Shape), slices.Clone(b.Shape)
	if c.n.Op == "FusedMatMul" {
		if c.n.Int("transA", 0) == 1 && len(as) >= 2 {
			as[len(as)-1], as[len(as)-2] = as[len(as)-2], as[len(as)-1]
		}
		if c.n.Int("transB", 0) == 1 && len(bs) >= 2 {
			bs[len(bs)-1], bs[len(bs)-2] = bs[len(bs)-2], bs[len(bs)-1]
		}
	}
	if len(as) == 1 {
		as = []int64{1, as[0]}
	}
	if len(bs) == 1 {
		bs = []int64{bs[0], 1}
	}
	batch, ok := Broadcast(Info{Known: true, Shape: as[:len(as)-2]}, Info{Known: true, Shape: bs[:len(bs)-2]})
	if !ok {
		c.set(0, Info{DType: a.DType})
		return
	}
	out := append(batch, as[len(as)-2], bs[len(bs)-1])
	if len(a.Shape) == 1 {
		out = slices.Delete(out, len(out)-2, len(out)-1)
	}
	if len(b.Shape) == 1 {
		out = out[:len(out)-1]
	}
	c.shaped(a.DType, out)
}

func inferGemm(c *inferCtx) {
	a, b := c.x, c.in(1)
	if a.Rank() != 2 || b.Rank() != 2 {
		c.set(0, Info{DType: a.DType})
		return
	}
	m, k := a.Shape[0], a.Shape[1]
	if c.n.Int("transA", 0) == 1 {
		m = k
	}
	nn := b.Shape[1]
	if c.n.Int("transB", 0) == 1 {
		nn = b.Shape[0]
	}
	c.shaped(a.DType, []int64{m, nn})
}

func inferGlobalPool(c *inferCtx) {
	x := c.x
	if !x.Known {
		c.set(0, x)
		return
	}
	s := slices.Clone(x.Shape)
	for i := 2; i < len(s); i++ {
		s[i] = 1
	}
	c.shaped(x.DType, s)
}

func inferFlatten(c *inferCtx) {
	x := c.x
	if !x.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	r := len(x.Shape)
	ax := c.n.Int("axis", 1)
	if ax != int64(r) { // axis r flattens everything into the first dimension
		var ok bool
		if ax, ok = normAxis(ax, r); !ok {
			c.unknown(x.DType)
			return
		}
	}
	c.shaped(x.DType, []int64{prod(x.Shape[:ax]), prod(x.Shape[ax:])})
}

func inferReshape(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	if n.Input(1) == "" {
		c.unknown(x.DType)
		return
	}
	target, partial, ok := g.shapeVector(n.Input(1))
	if src, isShape := g.shapeOf[n.Input(1)]; (!ok || partial) && isShape && g.Infos[src].Known {
		// Reshape(y, Shape(x)), as exporters write "view as x": x's
		// facts, symbolic dimensions included.
		c.shaped(x.DType, slices.Clone(g.Infos[src].Shape))
		return
	}
	if !ok {
		if r, ok := declaredRank(c.in(1)); ok {
			c.shaped(x.DType, unknownDims(r))
		} else {
			c.set(0, Info{DType: x.DType})
		}
		return
	}
	// At most one -1 and no other negative size, as ONNX requires.
	inferred := 0
	for _, d := range target {
		if d == -1 {
			inferred++
		}
	}
	if len(target) > maxRank || inferred > 1 || slices.ContainsFunc(target, func(d int64) bool { return d < -1 && !isUnknownElem(d) }) {
		c.unknown(x.DType)
		return
	}
	allowZero := n.Int("allowzero", 0) != 0
	s := slices.Clone(target)
	neg := -1
	for i, d := range s {
		switch {
		case isUnknownElem(d): // a size known only at run time
			s[i] = -1
		case d == 0 && !allowZero:
			if x.Known && i < len(x.Shape) {
				s[i] = x.Shape[i]
			} else {
				s[i] = -1
			}
		case d == -1:
			neg = i
		}
	}
	if neg >= 0 {
		s[neg] = -1
		// The product of the other sizes: -1 if one is unknown.
		known := prod(slices.Delete(slices.Clone(s), neg, neg+1))
		if tot := prod(x.Shape); x.Static() && known > 0 {
			if tot >= 0 {
				s[neg] = tot / known
			}
		} else if d, ok := g.reshapeInferred(n.Input(0), x, target, neg, allowZero); ok {
			// Unknown dimensions of x copied by 0s or named by the
			// target (Reshape(x, [batch, groups, -1])) cancel out.
			s[neg] = d
		}
	}
	c.shaped(x.DType, s)
}

// isPerm reports whether perm holds each of 0..rank-1 once.
func isPerm(perm []int64, rank int) bool {
	if len(perm) != rank {
		return false
	}
	seen := make([]bool, rank)
	for _, p := range perm {
		if p < 0 || p >= int64(rank) || seen[p] {
			return false
		}
		seen[p] = true
	}
	return true
}

func inferTranspose(c *inferCtx) {
	x := c.x
	if !x.Known {
		c.set(0, x)
		return
	}
	perm := c.n.Ints("perm")
	if perm == nil {
		for i := len(x.Shape) - 1; i >= 0; i-- {
			perm = append(perm, int64(i))
		}
	}
	if !isPerm(perm, len(x.Shape)) {
		c.unknown(x.DType)
		return
	}
	s := make([]int64, len(perm))
	for i, p := range perm {
		s[i] = x.Shape[p]
	}
	c.shaped(x.DType, s)
}

func inferConcat(c *inferCtx) {
	x := c.x
	if !x.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	ax, ok := normAxis(c.n.Int("axis", 0), len(x.Shape))
	if !ok {
		c.unknown(x.DType)
		return
	}
	s := slices.Clone(x.Shape)
	var ck checked
	for i := 1; i < len(c.n.Inputs); i++ {
		o := c.in(i)
		if o.Known && len(o.Shape) != len(s) {
			c.unknown(x.DType)
			return
		}
		if !o.Known || s[ax] < 0 || o.Shape[ax] < 0 {
			s[ax] = -1
		} else {
			s[ax] = ck.add(s[ax], o.Shape[ax])
		}
		if o.Known { // the other axes are every input's: any that knows one
			for i, d := range o.Shape {
				if int64(i) != ax && s[i] < 0 {
					s[i] = d
				}
			}
		}
	}
	if ck.over {
		c.unknown(x.DType)
		return
	}
	c.shaped(x.DType, s)
}

func inferReduce(c *inferCtx) {
	x := c.x
	axes, ok := c.g.ReduceAxes(c.n)
	keep := c.n.Int("keepdims", 1) == 1
	if ok && len(axes) == 0 && !keep {
		// Every axis reduced away: a scalar whatever the input's rank
		// (a loss summed over data-dependent detections).
		c.shaped(x.DType, []int64{})
		return
	}
	if !ok || !x.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	var s []int64
	for i, d := range x.Shape {
		if len(axes) == 0 || slices.Contains(axes, int64(i)) {
			if keep {
				s = append(s, 1)
			}
			continue
		}
		s = append(s, d)
	}
	if s == nil {
		s = []int64{}
	}
	c.shaped(x.DType, s)
}

func inferShape(c *inferCtx) {
	g, n := c.g, c.n
	if n.Int("start", 0) == 0 && n.Attr("end") == nil && n.Input(0) != "" && n.Output(0) != "" {
		if g.shapeOf == nil {
			g.shapeOf = map[string]string{}
		}
		g.shapeOf[n.Output(0)] = n.Input(0)
	}
	if c.x.Known {
		c.shaped(dtype.Int64, []int64{int64(len(c.x.Shape))})
	} else {
		c.shaped(dtype.Int64, []int64{-1})
	}
}

func inferSize(c *inferCtx) { c.shaped(dtype.Int64, []int64{}) }

// unsqueezeAxes returns an Unsqueeze's or Squeeze's axes, from its second
// input (opset 13) or its attribute; a Squeeze without them squeezes every
// dimension of size 1.
func unsqueezeAxes(c *inferCtx) ([]int64, bool) {
	if c.n.Input(1) != "" {
		return c.g.ConstInts(c.n.Input(1))
	}
	return c.n.Ints("axes"), c.n.Op == "Unsqueeze" || c.n.Attr("axes") != nil
}

func inferUnsqueeze(c *inferCtx) {
	x := c.x
	axes, ok := unsqueezeAxes(c)
	if !x.Known || !ok {
		c.set(0, Info{DType: x.DType})
		return
	}
	r := len(x.Shape) + len(axes)
	if r > maxRank {
		c.unknown(x.DType)
		return
	}
	norm, ok := normAxes(axes, r)
	if !ok {
		c.unknown(x.DType)
		return
	}
	ones := make([]bool, r)
	for _, a := range norm {
		if ones[a] { // an axis named twice
			c.unknown(x.DType)
			return
		}
		ones[a] = true
	}
	var s []int64
	j := 0
	for i := range r {
		if ones[i] {
			s = append(s, 1)
		} else {
			s = append(s, x.Shape[j])
			j++
		}
	}
	c.shaped(x.DType, s)
}

func inferSqueeze(c *inferCtx) {
	x := c.x
	axes, ok := unsqueezeAxes(c)
	if !x.Known || !ok {
		c.set(0, Info{DType: x.DType})
		return
	}
	norm, ok := normAxes(axes, len(x.Shape))
	if !ok {
		c.unknown(x.DType)
		return
	}
	drop := make([]bool, len(x.Shape))
	for _, a := range norm {
		drop[a] = true
	}
	s := []int64{}
	for i, d := range x.Shape {
		if (len(norm) == 0 && d == 1) || drop[i] {
			continue
		}
		s = append(s, d)
	}
	c.shaped(x.DType, s)
}

func inferExpand(c *inferCtx) {
	x := c.x
	target, partial, ok := c.g.shapeVector(c.n.Input(1))
	if partial {
		// An unknown element broadcasts to x's size where that is not 1.
		target = slices.Clone(target)
		off := len(target) - len(x.Shape)
		for i, d := range target {
			if !isUnknownElem(d) {
				continue
			}
			target[i] = -1
			if x.Known && i >= off && x.Shape[i-off] > 1 {
				target[i] = x.Shape[i-off]
			}
		}
	}
	if !ok {
		if r, ok := declaredRank(c.in(1)); ok && x.Known && r >= int64(len(x.Shape)) {
			c.shaped(x.DType, unknownDims(r))
		} else {
			c.set(0, Info{DType: x.DType})
		}
		return
	}
	if s, ok := Broadcast(x, Info{Known: true, Shape: target}); ok {
		c.shaped(x.DType, s)
	} else {
		c.set(0, Info{DType: x.DType})
	}
}

func inferConstantOfShape(c *inferCtx) {
	dt := dtype.Float32
	if a := c.n.Attr("value"); a != nil && a.GetT() != nil {
		dt = dtype.DType(a.GetT().GetDataType())
	}
	if s, partial, ok := c.g.shapeVector(c.n.Input(0)); ok {
		if partial {
			s = slices.Clone(s)
			for i, d := range s {
				if isUnknownElem(d) {
					s[i] = -1
				}
			}
		}
		c.shaped(dt, s)
	} else if r, ok := declaredRank(c.x); ok {
		c.shaped(dt, unknownDims(r))
	} else {
		c.set(0, Info{DType: dt})
	}
}

func inferConstant(c *inferCtx) {
	if t, ok := c.g.Const(c.n.Output(0)); ok {
		d := slices.Clone(t.GetDims())
		if d == nil {
			d = []int64{}
		}
		c.shaped(dtype.DType(t.GetDataType()), d)
	}
}

func inferGather(c *inferCtx) {
	x, idx := c.x, c.in(1)
	if !x.Known || !idx.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	ax, ok := normAxis(c.n.Int("axis", 0), len(x.Shape))
	if !ok {
		c.unknown(x.DType)
		return
	}
	s := append(append(slices.Clone(x.Shape[:ax]), idx.Shape...), x.Shape[ax+1:]...)
	c.shaped(x.DType, s)
}

// inferGatherElements: the output is shaped as the indices.
func inferGatherElements(c *inferCtx) {
	idx := c.in(1)
	c.set(0, Info{DType: c.x.DType, Known: idx.Known, Shape: idx.Shape})
}

// inferLoss: the loss per position (reduction none) or a scalar; SCE's
// second output is the log-probability, shaped as the scores.
func inferLoss(c *inferCtx) {
	x := c.x
	if c.n.String("reduction", "mean") == "none" {
		t := c.in(1)
		c.set(0, Info{DType: x.DType, Known: t.Known, Shape: slices.Clone(t.Shape)})
	} else {
		c.shaped(x.DType, []int64{})
	}
	c.set(1, x)
}

// inferGridSample: [N, C] of X, then the grid's sampled positions (all but
// its last axis, which holds the coordinates).
func inferGridSample(c *inferCtx) {
	x, grid := c.x, c.in(1)
	if x.Known && grid.Known && x.Rank() >= 2 && grid.Rank() == x.Rank() {
		c.shaped(x.DType, append([]int64{x.Shape[0], x.Shape[1]}, grid.Shape[1:grid.Rank()-1]...))
	} else {
		c.set(0, Info{DType: x.DType})
	}
}

func inferSlice(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	if !x.Known {
		c.set(0, Info{DType: x.DType})
		return
	}
	s := slices.Clone(x.Shape)
	axes, okA := g.ConstInts(n.Input(3))
	starts, okS := g.ConstInts(n.Input(1))
	ends, okE := g.ConstInts(n.Input(2))
	steps, okT := g.ConstInts(n.Input(4))
	if n.Input(3) == "" {
		axes, okA = nil, true
		for i := range starts {
			axes = append(axes, int64(i))
		}
	}
	if n.Input(4) == "" {
		okT = true
	}
	norm, ok := normAxes(axes, len(s))
	if !ok {
		c.unknown(x.DType)
		return
	}
	known := okA && okS && okE && okT
	if known && (len(starts) != len(norm) || len(ends) != len(norm) || steps != nil && len(steps) != len(norm) || slices.Contains(steps, 0)) {
		c.unknown(x.DType)
		return
	}
	for i, a := range norm {
		if !known || s[a] < 0 {
			s[a] = -1
			continue
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		// How many of st, st+step... lie before en: written so that no
		// step, however large, overflows.
		st, en := clampIdx(starts[i], s[a], step), clampIdx(ends[i], s[a], step)
		switch {
		case step > 0 && en > st:
			s[a] = (en-st-1)/step + 1
		case step < 0 && st > en:
			s[a] = -((st - en - 1) / step) + 1
		default:
			s[a] = 0
		}
	}
	c.shaped(x.DType, s)
}

func clampIdx(i, dim, step int64) int64 {
	if i < 0 {
		i += dim
	}
	lo, hi := int64(0), dim
	if step < 0 {
		lo, hi = -1, dim-1
	}
	return min(max(i, lo), hi)
}

func inferSplit(c *inferCtx) {
	g, n, x := c.g, c.n, c.x
	for i := range n.Outputs {
		c.set(i, Info{DType: x.DType, Known: x.Known, Shape: nil})
	}
	if !x.Known || len(n.Outputs) == 0 {
		return
	}
	ax, ok := normAxis(n.Int("axis", 0), len(x.Shape))
	if !ok {
		c.unknown(x.DType)
		return
	}
	sizes, ok := g.ConstInts(n.Input(1))
	if d := x.Shape[ax]; n.Input(1) == "" && d >= 0 {
		// Equal parts (the last one smaller when num_outputs does
		// not divide the axis, from opset 18).
		k := int64(len(n.Outputs))
		part := d / k
		if d%k != 0 {
			part++
		}
		for i := range k {
			sizes = append(sizes, min(part, d-i*part))
		}
		ok = true
	}
	for i := range n.Outputs {
		s := slices.Clone(x.Shape)
		if ok && i < len(sizes) {
			s[ax] = sizes[i]
		} else {
			s[ax] = -1
		}
		c.set(i, Info{DType: x.DType, Known: true, Shape: s})
	}
}

func inferRange(c *inferCtx) {
	c.shaped(c.x.DType, []int64{-1})
}

func inferArg(c *inferCtx) {
	x := c.x
	if !x.Known {
		c.set(0, Info{DType: dtype.Int64})
		return
	}
	ax, ok := normAxis(c.n.Int("axis", 0), len(x.Shape))
	if !ok {
		c.unknown(dtype.Int64)
		return
	}
	s := slices.Clone(x.Shape)
	if c.n.Int("keepdims", 1) == 1 {
		s[ax] = 1
	} else {
		s = slices.Delete(s, int(ax), int(ax)+1)
	}
	c.shaped(dtype.Int64, s)
}
