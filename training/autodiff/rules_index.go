package autodiff

import (
	"math"
	"slices"

	"github.com/ortrain/ortrain/training/graph"
)

// gatherGrad adds the slices of dY into zeros shaped like the data, at the
// gathered indices (repeated indices add up). Embedding tables and VQ
// codebooks are gathered along axis 0; another axis is moved to the front
// first. The sum is a ScatterND with reduction add: on ONNX Runtime's CPU
// provider it beat ScatterElements (which needs the indices expanded to
// dY's shape) 5-16x and a one-hot MatMul (tokens×vocabulary×width
// multiply-adds) 35-60x, e.g. 1.6 ms against 7.6 and 95 ms for 2048 tokens
// into an 8192×256 table; BenchmarkGatherGrad in gather_bench_test.go.
// The CUDA provider may order them differently (its ScatterND with
// duplicate indices serialises on atomics, while MatMul is fast), which
// nobody has measured yet.
func gatherGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if !need[0] || dy[0] == "" {
		return dx
	}
	data, idx := n.Inputs[0], n.Inputs[1]
	di, ii := b.Info(data), b.Info(idx)
	if !di.Known || !ii.Known {
		b.Fail("Gather needs the ranks of its data %v and indices %v", di, ii)
		return dx
	}
	r, q := int64(di.Rank()), int64(ii.Rank())
	ax := n.Int("axis", 0)
	if ax < 0 {
		ax += r
	}
	g, d := dy[0], data
	var perm []int64
	if ax > 0 {
		// dY is data[:ax] + indices + data[ax+1:]; bring the index axes first.
		var gp []int64
		for i := ax; i < ax+q; i++ {
			gp = append(gp, i)
		}
		for i := int64(0); i < r+q-1; i++ {
			if i < ax || i >= ax+q {
				gp = append(gp, i)
			}
		}
		g = b.Transpose(g, gp...)
		perm = []int64{ax}
		for i := int64(0); i < r; i++ {
			if i != ax {
				perm = append(perm, i)
			}
		}
		d = b.Transpose(data, perm...)
	}
	rows := b.Flatten(g, q)
	zero := b.ZerosLike(b.Flatten(d, 1))
	sum := b.Op("ScatterND", []string{zero, b.Reshape(idx, b.Ints(-1, 1)), rows}, graph.AString("reduction", "add"))
	out := b.ReshapeLike(sum, d)
	if perm != nil {
		inv := make([]int64, len(perm))
		for i, p := range perm {
			inv[p] = int64(i)
		}
		out = b.Transpose(out, inv...)
	}
	dx[0] = out
	return dx
}

// sliceGrad puts dY back where Slice took it from, zeros elsewhere: a Pad
// for unit steps, a ScatterElements along the axis for other steps. The
// sliced axes must have static sizes, and starts, ends, axes and steps be
// constants; other axes (the batch) may be symbolic.
func sliceGrad(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	starts, ok1 := b.G.ConstInts(n.Input(1))
	ends, ok2 := b.G.ConstInts(n.Input(2))
	if !xi.Known || !ok1 || !ok2 {
		return b.Fail("Slice needs a known rank and constant starts and ends, has %v", xi)
	}
	r := int64(xi.Rank())
	axes, steps := make([]int64, len(starts)), make([]int64, len(starts))
	for i := range axes {
		axes[i], steps[i] = int64(i), 1
	}
	if n.Input(3) != "" {
		var ok bool
		if axes, ok = b.G.ConstInts(n.Input(3)); !ok {
			return b.Fail("Slice axes must be constant")
		}
	}
	if n.Input(4) != "" {
		var ok bool
		if steps, ok = b.G.ConstInts(n.Input(4)); !ok {
			return b.Fail("Slice steps must be constant")
		}
	}
	pads := make([]int64, 2*r)
	g := dy
	for i, a := range axes {
		if a < 0 {
			a += r
		}
		dim, step := xi.Shape[a], steps[i]
		if dim < 0 {
			if step == 1 && starts[i] == 0 && ends[i] >= math.MaxInt32 {
				continue // the whole axis
			}
			return b.Fail("Slice along axis %d of %v needs that axis's size to be static", a, xi)
		}
		st, m := sliceRange(starts[i], ends[i], step, dim)
		if step == 1 {
			pads[a], pads[r+a] = st, dim-st-m
			continue
		}
		shape := make([]int64, r)
		for k := range shape {
			shape[k] = 1
		}
		shape[a] = m
		pos := make([]int64, m)
		for j := range pos {
			pos[j] = st + int64(j)*step
		}
		idx := b.ExpandLike(b.Const(graph.Int64s("", shape, pos)), g)
		var full string
		if gi := b.Info(g); gi.Static() {
			s := slices.Clone(gi.Shape)
			s[a] = dim
			full = b.Ints(s...)
		} else {
			full = b.Op("ScatterElements", []string{b.Shape(g), b.Ints(a), b.Ints(dim)})
		}
		zero, _ := graph.Floats("", xi.DType, []int64{1}, []float64{0})
		zeros := b.Op("ConstantOfShape", []string{full}, graph.ATensor("value", zero))
		g = b.Op("ScatterElements", []string{zeros, idx, g}, graph.AInt("axis", a))
	}
	if slices.ContainsFunc(pads, func(p int64) bool { return p != 0 }) {
		g = b.Pad(g, pads)
	}
	return g
}

// sliceRange clamps a Slice's start and end as ONNX does and counts the
// elements taken.
func sliceRange(start, end, step, dim int64) (st, m int64) {
	if start < 0 {
		start += dim
	}
	if end < 0 {
		end += dim
	}
	if step > 0 {
		st, en := min(max(start, 0), dim), min(max(end, 0), dim)
		return st, max(0, (en-st+step-1)/step)
	}
	st, en := min(max(start, 0), dim-1), min(max(end, -1), dim-1)
	return st, max(0, (st-en-step-1)/(-step))
}

// splitGrad concatenates the parts' gradients, zeros for parts the loss
// does not read.
func splitGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	if !need[0] || !slices.ContainsFunc(dy, func(s string) bool { return s != "" }) {
		return dx
	}
	parts := make([]string, len(n.Outputs))
	for i, o := range n.Outputs {
		parts[i] = dy[i]
		if parts[i] == "" {
			parts[i] = b.ZerosLike(o)
		}
	}
	dx[0] = b.Concat(n.Int("axis", 0), parts...)
	return dx
}

// padGrad crops what constant padding added and pads back what negative
// pads cropped. Reflect and edge padding are refused.
func padGrad(b *B, n *N, dy string) string {
	if mode := n.String("mode", "constant"); mode != "constant" {
		return b.Fail("Pad in %s mode has no gradient rule (constant only)", mode)
	}
	xi := b.Info(x(n))
	pads, ok := b.G.ConstInts(n.Input(1))
	if !xi.Known || !ok {
		return b.Fail("Pad needs a known rank and constant pads, has %v", xi)
	}
	r := int64(xi.Rank())
	axes := make([]int64, r)
	for i := range axes {
		axes[i] = int64(i)
	}
	if n.Input(3) != "" {
		if axes, ok = b.G.ConstInts(n.Input(3)); !ok {
			return b.Fail("Pad axes must be constant")
		}
	}
	k := len(axes)
	var starts, ends, sax []int64
	back := make([]int64, 2*r)
	for i, a := range axes {
		if a < 0 {
			a += r
		}
		pb, pe := pads[i], pads[i+k]
		if pb > 0 || pe > 0 {
			starts, sax = append(starts, max(pb, 0)), append(sax, a)
			ends = append(ends, cond64(pe > 0, -pe, math.MaxInt64))
		}
		back[a], back[r+a] = max(-pb, 0), max(-pe, 0)
	}
	g := dy
	if len(sax) > 0 {
		g = b.Slice(g, starts, ends, sax, nil)
	}
	if slices.ContainsFunc(back, func(p int64) bool { return p != 0 }) {
		g = b.Pad(g, back)
	}
	return g
}

func cond64(ok bool, a, b int64) int64 {
	if ok {
		return a
	}
	return b
}
