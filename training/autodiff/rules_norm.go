package autodiff

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// The normalisations share one backward: with x̂ = (x - mean)·invstd over
// the normalised axes and gh the gradient reaching x̂ (dY times the
// scale), dX = invstd·(gh - mean(gh) - x̂·mean(gh·x̂)). The statistics are
// recomputed from x rather than taken from optional outputs, so that the
// forward graph stays as exported (and the Mean/InvStdDev outputs, stored in
// float32 by default, lose nothing for float64 models).

// normStats returns x̂ and invstd over axes (kept as size-1 axes).
func normStats(b *B, xv string, axes []int64, eps float64) (xhat, invstd string) {
	d := b.Sub(xv, b.ReduceMean(xv, true, axes...))
	v := b.ReduceMean(b.Mul(d, d), true, axes...)
	invstd = b.Div(b.ScalarLike(xv, 1), b.Sqrt(b.Add(v, b.ScalarLike(xv, eps))))
	return b.Mul(d, invstd), invstd
}

// maxUnitScale bounds the all-ones scale layerNormStats writes as a
// constant; a longer normalised extent (a LayerNorm over image axes) keeps
// the elementary statistics rather than a constant of its size.
const maxUnitScale = 1 << 16

// layerNormStats returns x̂ and invstd over the axes from axis on as one
// LayerNormalization node, x̂ = LayerNormalization(x; 1) and its InvStdDev
// output, in place of normStats' 8 nodes: the kernel the forward ran, so
// the statistics are the forward's own. Only for float32 x (the statistics'
// type, stash_type 1) of static normalised shape; ok is false otherwise.
func layerNormStats(b *B, xv string, axis int64, eps float64) (xhat, invstd string, ok bool) {
	xi := b.Info(xv)
	if b.Err != nil || !xi.Known || xi.DType != dtype.Float32 || int(axis) >= xi.Rank() {
		return "", "", false
	}
	norm := xi.Shape[axis:]
	if slices.Contains(norm, -1) || numel(norm) > maxUnitScale {
		return "", "", false
	}
	ones := make([]float32, numel(norm))
	for i := range ones {
		ones[i] = 1
	}
	scale := b.Const(graph.Float32s("", slices.Clone(norm), ones))
	xhat, invstd = b.G.Fresh(b.Prefix+"xhat"), b.G.Fresh(b.Prefix+"invstd")
	b.G.AddNode(&graph.Node{Op: "LayerNormalization", Name: b.G.Fresh(b.Prefix + "LayerNormalization"),
		Inputs: []string{xv, scale}, Outputs: []string{xhat, "", invstd},
		Attrs: []*onnxpb.AttributeProto{graph.AInt("axis", axis), graph.AFloat("epsilon", eps)}})
	stat := slices.Clone(xi.Shape)
	for i := axis; i < int64(len(stat)); i++ {
		stat[i] = 1
	}
	b.G.Infos[invstd] = graph.Info{DType: dtype.Float32, Known: true, Shape: stat}
	return xhat, invstd, b.Err == nil
}

func normInputGrad(b *B, xhat, invstd, gh string, axes []int64) string {
	centred := b.Sub(gh, b.ReduceMean(gh, true, axes...))
	return b.Mul(invstd, b.Sub(centred, b.Mul(xhat, b.ReduceMean(b.Mul(gh, xhat), true, axes...))))
}

func span(from, to int) []int64 {
	var s []int64
	for i := from; i < to; i++ {
		s = append(s, int64(i))
	}
	return s
}

// layerNormGrad: LayerNormalization normalises the axes from axis on;
// scale and bias broadcast over the leading axes, so their gradients are
// summed back over those.
func layerNormGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	if len(dy) > 1 && slices.ContainsFunc(dy[1:], func(s string) bool { return s != "" }) {
		b.Fail("the loss depends on LayerNormalization's Mean or InvStdDev output, which has no gradient rule")
		return dx
	}
	r := b.Info(x(n)).Rank()
	if r < 1 {
		b.Fail("LayerNormalization input rank unknown")
		return dx
	}
	ax := int(n.Int("axis", -1))
	if ax < 0 {
		ax += r
	}
	axes := span(ax, r)
	xhat, invstd, ok := layerNormStats(b, x(n), int64(ax), n.Float("epsilon", 1e-5))
	if !ok {
		xhat, invstd = normStats(b, x(n), axes, n.Float("epsilon", 1e-5))
	}
	if need[0] {
		dx[0] = normInputGrad(b, xhat, invstd, b.Mul(g, n.Inputs[1]), axes)
	}
	if need[1] {
		dx[1] = b.ReduceSumTo(b.Mul(g, xhat), n.Inputs[1])
	}
	if len(need) > 2 && need[2] {
		dx[2] = b.ReduceSumTo(g, n.Inputs[2])
	}
	return dx
}

// instanceNormGrad: per sample and channel over the spatial axes, with a
// per-channel scale and bias.
func instanceNormGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	r := b.Info(x(n)).Rank()
	if g == "" || r < 3 {
		if g != "" {
			b.Fail("InstanceNormalization needs a known rank >= 3")
		}
		return dx
	}
	sp := spatialAxes(r)
	red := append([]int64{0}, sp...)
	xhat, invstd := normStats(b, x(n), sp, n.Float("epsilon", 1e-5))
	if need[0] {
		dx[0] = normInputGrad(b, xhat, invstd, b.Mul(g, b.Unsqueeze(n.Inputs[1], span(1, r-1)...)), sp)
	}
	if need[1] {
		dx[1] = b.ReduceSum(b.Mul(g, xhat), false, red...)
	}
	if need[2] {
		dx[2] = b.ReduceSum(g, false, red...)
	}
	return dx
}

// groupNormGrad: GroupNormalization normalises (N, groups, -1); its scale
// and bias are per channel (opset 21) or, in opset 18, per group, told
// apart by their length.
func groupNormGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	xi, si := b.Info(x(n)), b.Info(n.Inputs[1])
	groups := n.Int("num_groups", 0)
	if xi.Rank() < 3 || !si.Static() || xi.Shape[1] < 0 || groups <= 0 {
		b.Fail("GroupNormalization needs a known rank >= 3, static channels and scale, has %v and scale %v", xi, si)
		return dx
	}
	r, c := xi.Rank(), xi.Shape[1]
	perGroup := si.Shape[0] != c
	tail := span(1, r-1)
	grouped := b.Ints(0, groups, -1)
	xhat, invstd := normStats(b, b.Reshape(x(n), grouped), []int64{2}, n.Float("epsilon", 1e-5))
	scale := n.Inputs[1]
	if perGroup {
		scale = b.Reshape(b.Op("Expand", []string{b.Unsqueeze(scale, 1), b.Ints(groups, c/groups)}), b.Ints(c))
	}
	if need[0] {
		gh := b.Reshape(b.Mul(g, b.Unsqueeze(scale, tail...)), grouped)
		dx[0] = b.ReshapeLike(normInputGrad(b, xhat, invstd, gh, []int64{2}), x(n))
	}
	perChannel := func(v string) string {
		s := b.ReduceSum(v, false, append([]int64{0}, spatialAxes(r)...)...)
		if perGroup {
			s = b.ReduceSum(b.Reshape(s, b.Ints(groups, -1)), false, 1)
		}
		return s
	}
	if need[1] {
		dx[1] = perChannel(b.Mul(g, b.ReshapeLike(xhat, x(n))))
	}
	if need[2] {
		dx[2] = perChannel(g)
	}
	return dx
}
