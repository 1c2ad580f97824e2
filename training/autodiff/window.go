package autodiff

import (
	byteorder "encoding/binary"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// convGrad: dX is the transposed convolution of dY with the same window
// (convInputGrad); dW correlates X with dY (convWeightGrad); dB sums dY over
// all but channels.
func convGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	group := n.Int("group", 1)
	if need[0] {
		if f := convForm(b); f == ConvFormOps || f == ConvFormGEMM && b.Info(g).DType != dtype.BFloat16 && len(in) < 3 {
			dx[0] = b.Op("ConvTranspose", []string{g, n.Inputs[1]}, windowAttrs(w, group, outputPadding(w, in, out))...)
		} else {
			dx[0] = convInputGrad(b, g, n.Inputs[1], w, in, out, group)
		}
	}
	if need[1] {
		dx[1] = convWeightGrad(b, x(n), g, n.Inputs[1], w, in, out, group)
	}
	if len(need) > 2 && need[2] {
		dx[2] = b.ReduceSum(g, false, append([]int64{0}, spatialAxes(len(in)+2)...)...)
	}
	return dx
}

// convInputGrad is the input gradient of a convolution: the adjoint of
// the Conv. It is computed as a Conv of the output gradient, with zeros
// inserted between its samples when the forward was strided, by the weight
// with input and output channels swapped and the kernel flipped; the
// padding p' = d(k-1) - p puts every output gradient back over the inputs
// it came from. ONNX Runtime's CPU ConvTranspose, the direct formulation,
// runs 3D windows an order of magnitude slower than its Conv. Where the
// forward's padding exceeds the window (p' < 0) ConvTranspose is used.
func convInputGrad(b *B, g, wv string, w graph.WindowAttrs, in, out []int64, group int64) string {
	wi := b.Info(wv)
	k := len(in)
	pads := make([]int64, 2*k)
	for i := range k {
		span := w.Dilations[i] * (w.Kernel[i] - 1)
		pads[i] = span - w.Pads[i]
		pads[k+i] = in[i] - w.Strides[i]*(out[i]-1) - 1 + w.Pads[i]
		if pads[i] < 0 || pads[k+i] < 0 || !wi.Static() {
			return b.Op("ConvTranspose", []string{g, wv}, windowAttrs(w, group, outputPadding(w, in, out))...)
		}
	}
	spatial := spatialAxes(k + 2)
	// W [M, C/g, k...] → [C, M/g, k...]: swap the channel roles per group.
	m, cg := wi.Shape[0], wi.Shape[1]
	var wt string
	if group == 1 {
		wt = b.Transpose(wv, append([]int64{1, 0}, spatial...)...) // no group axis to split off
	} else {
		wr := b.Reshape(wv, b.Ints(append([]int64{group, m / group, cg}, wi.Shape[2:]...)...))
		perm := []int64{0, 2, 1}
		for i := range k {
			perm = append(perm, int64(3+i))
		}
		wt = b.Reshape(b.Transpose(wr, perm...), b.Ints(append([]int64{group * cg, m / group}, wi.Shape[2:]...)...))
	}
	flip := make([]int64, k)
	ends := make([]int64, k)
	steps := make([]int64, k)
	for i := range k {
		flip[i], ends[i], steps[i] = -1, math.MinInt64, -1
	}
	wf := wt
	if slices.ContainsFunc(w.Kernel, func(n int64) bool { return n > 1 }) { // a 1×1 window is its own flip
		wf = b.Slice(wt, flip, ends, spatial, steps)
	}
	// Where the end pad exceeds the start's on a strided axis, up to s-1
	// of its zeros go into the interleaved tensor instead: the same values,
	// but symmetric pads and even sizes where the forward's were. ONNX
	// Runtime's CUDA Conv runs asymmetric pads as the larger pad on both
	// sides and a Slice of the result, and cuDNN's float16 kernels for the
	// odd-sized maps that left were the slow ones: on an H200
	// (2026-11-26) the VQ-GAN preset's three strided input gradients took
	// 1,267, 154 and 71 ms a step in 16-mixed, its same-sized
	// stride-1 Convs 7.3 ms.
	trail := make([]int64, k)
	for i := range k {
		if w.Strides[i] > 1 {
			trail[i] = min(max(pads[k+i]-pads[i], 0), w.Strides[i]-1)
			pads[k+i] -= trail[i]
		}
	}
	g = insertZeros(b, g, w.Strides, out, trail)
	return b.Op("Conv", []string{g, wf}, graph.AInts("pads", pads), graph.AInts("dilations", w.Dilations), graph.AInt("group", group))
}

// insertZeros puts s-1 zeros between neighbouring samples of g along
// every spatial axis i of stride s = strides[i] > 1, of a tensor
// [N, C, sizes...]: size o becomes s(o-1)+1, and trail[i] < s more zeros
// after the last sample. With its channels known, and
// not in bfloat16 (which ONNX Runtime's CUDA ConvTranspose lacks), one
// node: a ConvTranspose by a 1×1 kernel of ones per channel (group C) at
// those strides, which copies each sample to its place and writes zeros
// between, exactly. ONNX Runtime's CPU provider ran it 8.7 times faster
// than the padded view below on ResNet-50's [8, 512, 28, 28] (4.7 against
// 40.9 ms, whose 6-D Pad copies element by element), 1.7 times on a
// [2, 64, 16, 32, 32] volume. Otherwise four nodes, all the axes at once:
// a size-1 axis after each (Unsqueeze), padded to s (Pad), merged into it
// (Reshape) and the trailing zeros cut (Slice). sizes are given rather
// than inferred because the batch may be symbolic.
func insertZeros(b *B, g string, strides, sizes, trail []int64) string {
	var strided []int
	for i, s := range strides {
		if s > 1 {
			strided = append(strided, i)
		}
	}
	if len(strided) == 0 {
		return g
	}
	if gi := b.Info(g); spreadZeros && gi.Known && len(gi.Shape) == len(sizes)+2 && gi.Shape[1] > 0 && gi.DType != dtype.BFloat16 && gi.Float() {
		kernel, steps := make([]int64, len(sizes)), make([]int64, len(sizes))
		for i := range sizes {
			kernel[i], steps[i] = 1, max(strides[i], 1)
		}
		attrs := []*graph.Attr{graph.AInt("group", gi.Shape[1]), graph.AInts("kernel_shape", kernel), graph.AInts("strides", steps)}
		if slices.ContainsFunc(trail, func(t int64) bool { return t > 0 }) {
			attrs = append(attrs, graph.AInts("output_padding", trail))
		}
		return b.Op("ConvTranspose", []string{g, spreadKernel(b, gi.DType, gi.Shape[1], len(sizes))}, attrs...)
	}
	r := len(sizes) + 2 + len(strided) // the rank with the new axes
	var newAxes, sliceAxes, ends []int64
	pads := make([]int64, 2*r)
	for j, i := range strided {
		a := int64(2 + i + j + 1) // after axis 2+i, past the j new axes before it
		newAxes = append(newAxes, a)
		pads[r+int(a)] = strides[i] - 1 // at the end of the new axis: [.., o, s, ..]
		sliceAxes = append(sliceAxes, int64(2+i))
		ends = append(ends, strides[i]*(sizes[i]-1)+1+trail[i])
	}
	p := b.Op("Pad", []string{b.Unsqueeze(g, newAxes...), b.Ints(pads...)})
	shape := []int64{0, 0} // Reshape's 0 keeps batch and channels
	for i, o := range sizes {
		shape = append(shape, o*max(strides[i], 1))
	}
	return b.Slice(b.Reshape(p, b.Ints(shape...)), make([]int64, len(ends)), ends, sliceAxes, nil)
}

// spreadZeros lets insertZeros use the ConvTranspose (tests turn it off to
// check the padded view).
var spreadZeros = true

// spreadKernel is insertZeros' kernel: ones [channels, 1, 1...] in dt,
// shared by the windows of one type, width and rank.
func spreadKernel(b *B, dt dtype.DType, channels int64, spatial int) string {
	name := fmt.Sprintf("ortrain/conv/spread/%s/c%d/r%d", dt, channels, spatial)
	if _, ok := b.G.Initializers[name]; ok {
		return name
	}
	shape := []int64{channels, 1}
	for range spatial {
		shape = append(shape, 1)
	}
	ones := make([]float64, channels)
	for i := range ones {
		ones[i] = 1
	}
	t, err := graph.Floats(name, dt, shape, ones)
	if err != nil {
		return b.Fail("%w", err)
	}
	b.G.AddInitializer(t)
	return name
}

// convWeightGrad is the weight gradient of the convolution of xv (spatial
// sizes in) by weight wv with window w, given the gradient g of its output
// (spatial sizes out). In the offsets form without groups it is one GEMM
// per kernel offset (convWeightGradGEMM). Otherwise it is one convolution
// of X by dY with batch and channel axes swapped, so that the sum over the
// batch becomes the sum over input channels, strides and dilations trading
// places; a 1×1 stride-1 window unpadded is one GEMM.
func convWeightGrad(b *B, xv, g, wv string, w graph.WindowAttrs, in, out []int64, group int64) string {
	xi, wi := b.Info(xv), b.Info(wv)
	if !wi.Static() || xi.Shape[1] >= 0 && xi.Shape[1] != wi.Shape[1]*group {
		return b.Fail("Conv weight %v must be static and match the input channels %v", wi, xi)
	}
	// The weight fixes the input channels where inference lost them (a
	// channel shuffle reshaped through the batch size).
	channels := wi.Shape[1] * group
	if f := convForm(b); group == 1 && (f == ConvFormOffsets || f == ConvFormGEMM) {
		return convWeightGradGEMM(b, xv, g, w, in, out, wi.Shape)
	}
	if group == 1 && pointwise(w) {
		return convWeightGradPointwise(b, xv, g, wi.Shape)
	}
	r := len(in) + 2
	swap := []int64{1, 0}
	for i := 2; i < r; i++ {
		swap = append(swap, int64(i))
	}
	var xt, gt string
	if group == 1 {
		xt, gt = b.Transpose(xv, swap...), b.Transpose(g, swap...)
	} else {
		// Channels c of group k pair with images as channels k*N+n, so the
		// convolution's own groups keep the groups apart.
		cg, m := channels/group, wi.Shape[0]
		perm := func(first ...int64) []int64 {
			for i := 3; i < r+1; i++ {
				first = append(first, int64(i))
			}
			return first
		}
		xr := b.Reshape(xv, b.Ints(append([]int64{-1, group, cg}, in...)...))
		xt = b.Reshape(b.Transpose(xr, perm(2, 1, 0)...), b.Ints(append([]int64{cg, -1}, in...)...))
		gr := b.Reshape(g, b.Ints(append([]int64{-1, group, m / group}, out...)...))
		gt = b.Reshape(b.Transpose(gr, perm(1, 2, 0)...), b.Ints(append([]int64{m, -1}, out...)...))
	}
	full := b.Op("Conv", []string{xt, gt}, graph.AInts("strides", w.Dilations), graph.AInts("dilations", w.Strides),
		graph.AInts("pads", w.Pads), graph.AInt("group", group))
	k := wi.Shape[2:]
	// The correlation reaches offsets past the kernel where the forward's
	// last window left input rows unread; those are cut off.
	if fi := b.Info(full); !fi.Static() || !slices.Equal(fi.Shape[2:], k) {
		zeros := make([]int64, len(k))
		full = b.Op("Slice", []string{full, b.Ints(zeros...), b.Ints(k...), b.Ints(spatialAxes(r)...)})
	}
	return b.Transpose(full, swap...)
}

// pointwise reports a 1×1 window with unit strides and no padding: each
// output position reads exactly its own input position.
func pointwise(w graph.WindowAttrs) bool {
	for i, k := range w.Kernel {
		if k != 1 || w.Strides[i] != 1 || w.Pads[i] != 0 || w.Pads[len(w.Kernel)+i] != 0 {
			return false
		}
	}
	return true
}

// convWeightGradPointwise is the weight gradient of a pointwise
// convolution, dW[m,c] = Σ_{n,p} dY[n,m,p]·X[n,c,p]: one GEMM of dY as
// [M, N·P] by X as [C, N·P] transposed, after moving the channels in front
// of the batch. A batched GEMM per image would skip those two copies but
// writes an [N, M, C] partial product, larger than the activations in a
// network's last stages.
func convWeightGradPointwise(b *B, xv, g string, wshape []int64) string {
	m, c := wshape[0], wshape[1]
	swap := []int64{1, 0}
	for i := 2; i < len(wshape); i++ {
		swap = append(swap, int64(i))
	}
	xm := b.Reshape(b.Transpose(xv, swap...), b.Ints(c, -1))
	gm := b.Reshape(b.Transpose(g, swap...), b.Ints(m, -1))
	return b.Reshape(b.Op("Gemm", []string{gm, xm}, graph.AInt("transB", 1)), b.Ints(wshape...))
}

// convWeightGradGEMM computes dW[m,c,κ] = Σ_{n,o} dY[n,m,o]·X̄[n,c,o·s+κ·d]
// (X̄ the padded input): all offsets in one GEMM where their windows are
// small enough to gather (convWeightGradGather), else one matrix product
// per kernel offset κ, the strided slice of X̄ that offset reads, as
// [C, N·P], times dY as [N·P, M] (for a 1×1 window, dY's transpose times
// the slice's). Written as a Conv whose kernel is the whole output map,
// ONNX Runtime's CPU provider runs it several times slower, materialising
// a kernel-sized im2col for every offset.
func convWeightGradGEMM(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	if convForm(b) == ConvFormGEMM {
		if dw := convWeightGradBatched(b, xv, g, w, in, out, wshape); dw != "" {
			return dw
		}
		if dw := convWeightGradShifted(b, xv, g, w, in, out, wshape); dw != "" {
			return dw
		}
	}
	if dw := convWeightGradGather(b, xv, g, w, in, out, wshape); dw != "" {
		return dw
	}
	if convForm(b) == ConvFormGEMM {
		if dw := convWeightGradSlabs(b, xv, g, w, in, out, wshape); dw != "" {
			return dw
		}
		if dw := convWeightGradPerDepth(b, xv, g, w, in, out, wshape); dw != "" {
			return dw
		}
	}
	k := len(in)
	r := int64(k + 2)
	m := wshape[0]
	toChannelsFirst := []int64{1, 0}
	for i := int64(2); i < r; i++ {
		toChannelsFirst = append(toChannelsFirst, i)
	}
	xt := padWindow(b, b.Transpose(xv, toChannelsFirst...), w) // [C, N, in...]
	// dY [N, M, out...] → [N·P, M]
	gt := b.Reshape(b.Transpose(g, append([]int64{0}, append(spatialAxes(int(r)), 1)...)...), b.Ints(-1, m))
	axes := spatialAxes(int(r))
	var parts []string
	offset := make([]int64, k)
	for {
		starts, ends := make([]int64, k), make([]int64, k)
		whole := true // the offset reads all of X̄, as a pointwise window's one does
		for i := range k {
			starts[i] = offset[i] * w.Dilations[i]
			ends[i] = starts[i] + w.Strides[i]*(out[i]-1) + 1
			whole = whole && starts[i] == 0 && w.Strides[i] == 1 && ends[i] == in[i]+w.Pads[i]+w.Pads[k+i]
		}
		xs := xt
		if !whole {
			xs = b.Slice(xt, starts, ends, axes, w.Strides)
		}
		if !slices.ContainsFunc(w.Kernel, func(n int64) bool { return n > 1 }) {
			// One offset: dW = dYᵀ·Xᵀ, [M, N·P] by [N·P, C], transposed
			// in the GEMM rather than after it.
			dw := b.Op("Gemm", []string{gt, b.Reshape(xs, b.Ints(wshape[1], -1))}, graph.AInt("transA", 1), graph.AInt("transB", 1))
			return b.Reshape(dw, b.Ints(wshape...))
		}
		// [C, 1, N·P] times [N·P, M] is one GEMM (the left operand's
		// leading axes fold into its rows) giving [C, 1, M], the offset's
		// slot of [C, K, M]: no Unsqueeze per offset to stack them.
		xs = b.Reshape(xs, b.Ints(wshape[1], 1, -1))
		parts = append(parts, b.MatMul(xs, gt))
		i := k - 1 // next offset, the last kernel axis fastest as in W's layout
		for ; i >= 0; i-- {
			if offset[i]++; offset[i] < w.Kernel[i] {
				break
			}
			offset[i] = 0
		}
		if i < 0 {
			break
		}
	}
	dw := b.Op("Concat", parts, graph.AInt("axis", 1)) // [C, K, M]
	return b.Reshape(b.Transpose(dw, 2, 0, 1), b.Ints(wshape...))
}

// maxGatherIndices bounds the index table of convWeightGradGather (int32
// elements, kernel offsets × output positions, stored in the training
// graph): 4 MiB. maxGatherColumns bounds the gathered windows per sample
// (input channels × kernel offsets × output positions), a transient K times
// the input's size: 2M elements, 8 MiB in float32, the most a ResNet-50
// layer gathers at 224². Larger windows (3-D volumes: 27 offsets) take
// one GEMM per offset on the CPU; in the gemm form (CUDA) they gather the
// offsets of their trailing kernel axes only, a slab at a time
// (convWeightGradSlabs): at most maxGatherSlabs offsets' windows at once,
// and never over maxGatherSlabColumns elements per sample, which keeps
// the gathered tensor under CUDA's 2³¹ elements up to a batch of 8.
// Three, not nine: the bench VQ-GAN's memory per sample was 88 MB one
// offset at a time, 84 with three offsets a slab and 120 with nine
// (ortrain bench --memory --case vqgan3d, this 2-core machine). Not on the
// CPU: there the slabs' layout (the batch moved last) made the VQ-GAN's
// step 5 % slower in kernel time (1,250 → 1,310 ms, its transposes
// 46 → 264 ms). On an H200 the VQ-GAN preset's weight gradients took as
// long with slabs as one GEMM per offset (GEMMs, slices, gathers and
// transposes 1,257 against 1,229 ms a step): both were GEMMs with a whole
// volume as their inner dimension, which cuBLAS ran at 3% of its peak;
// both are now batched over the depth (convWeightGradPerDepth).
var (
	// maxBatchedShare bounds convWeightGradBatched's partial product
	// against the copies it saves: writing and reading it costs about
	// what a copy of the same size does, and its sum runs slower than a
	// Transpose, so only a quarter of them.
	maxBatchedShare int64 = 4

	maxGatherIndices     int64 = 1 << 20
	maxGatherColumns     int64 = 1 << 21
	maxGatherSlabs       int64 = 3
	maxGatherSlabColumns int64 = 1 << 28
)

// convWeightGradGather computes the offsets form's weight gradient with
// all kernel offsets in one GEMM: one Gather lays out every offset's
// strided window of the padded input as X̄ [C, K, P·N] (X in channels-
// first, batch-last order, so each gathered position copies N contiguous
// values), which times dY as [P·N, M] gives [C, K, M]. The same products
// as one GEMM per offset, summed in another order, in a fixed number of
// kernels instead of three per offset, reading dY once instead of K
// times. It returns "" where it does not apply: one offset, sizes not
// static, or an index table or gathered windows over their bounds.
func convWeightGradGather(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	k := len(in)
	kernels, positions := int64(1), int64(1)
	for i := range k {
		kernels *= w.Kernel[i]
		positions *= out[i]
		if in[i] < 0 || out[i] < 0 {
			return ""
		}
	}
	if kernels == 1 || kernels*positions > maxGatherIndices || wshape[1]*kernels*positions > maxGatherColumns {
		return ""
	}
	padded := make([]int64, k)
	for i := range k {
		padded[i] = in[i] + w.Pads[i] + w.Pads[k+i]
	}
	r := k + 2
	// X [N, C, in...] padded along in..., then → [C, in..., N]. Padded
	// before the transpose: ONNX Runtime's CUDA Pad has a fast kernel only
	// for pads on the last two axes of a rank ≤ 4 tensor (NCHW's H and W);
	// its general one, which [C, H, W, N] would take, wrote about 10¹⁰
	// elements a second on an H200, 57 ms of ResNet-50's step at batch 256.
	xv = padWindow(b, xv, w)
	perm := []int64{1}
	for i := 2; i < r; i++ {
		perm = append(perm, int64(i))
	}
	xt := b.Transpose(xv, append(perm, 0)...)
	area := int64(1)
	for _, p := range padded {
		area *= p
	}
	xt = b.Reshape(xt, b.Ints(wshape[1], area, -1)) // [C, S, N]
	cols := b.Op("Gather", []string{xt, gatherIndices(b, w, padded, out, kernels, positions)}, graph.AInt("axis", 1))
	cols = b.Reshape(cols, b.Ints(wshape[1], kernels, -1)) // [C, K, P·N]
	// dY [N, M, out...] → [out..., N, M] → [P·N, M]
	gperm := spatialAxes(r)
	gt := b.Reshape(b.Transpose(g, append(gperm, 0, 1)...), b.Ints(-1, wshape[0]))
	dw := b.MatMul(cols, gt) // [C, K, M]
	return b.Reshape(b.Transpose(dw, 2, 0, 1), b.Ints(wshape...))
}

// convWeightGradSlabs is the offsets form's weight gradient for a window
// whose offsets are too many to gather at once (a 3×3×3 kernel over a
// volume): the input's leading spatial axes are sliced, one slab per
// offset along them, and the offsets along the trailing axes are gathered
// from each slab as convWeightGradGather gathers them all, with an index
// table over the trailing axes only. A 3×3×3 window then takes nine
// Gathers and nine GEMMs with three offsets a slab (three of each with
// nine), not 27 Slices and 27 GEMMs each reading dY. X is laid out as
// [lead₀, C, trailing..., lead₁..., N], so a slab's gathered windows
// [P₀, C, K_t, P_t, P₁..., N] are a batch over the output's depth P₀ of
// the GEMM's rows as they come, against dY as [P₀, P_t·P₁·N, M]; the
// batch's products are summed after (depthSum), as convWeightGradPerDepth
// does and why. The leading axes sliced are the fewest that keep a slab
// within maxGatherSlabs offsets (or maxGatherColumns elements) and
// maxGatherSlabColumns; "" where none does, or sizes are not static.
func convWeightGradSlabs(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	k := len(in)
	c, m := wshape[1], wshape[0]
	positions := int64(1)
	for i := range k {
		if in[i] < 0 || out[i] < 0 {
			return ""
		}
		positions *= out[i]
	}
	j, kt, pt := 1, int64(1), int64(1) // leading axes sliced; trailing offsets and positions
	for ; j < k; j++ {
		kt, pt = 1, 1
		for i := j; i < k; i++ {
			kt *= w.Kernel[i]
			pt *= out[i]
		}
		cols := c * kt * positions
		if kt > 1 && kt*pt <= maxGatherIndices && (kt <= maxGatherSlabs || cols <= maxGatherColumns) && cols <= maxGatherSlabColumns {
			break
		}
	}
	if j >= k {
		return ""
	}
	padded := make([]int64, k)
	for i := range k {
		padded[i] = in[i] + w.Pads[i] + w.Pads[k+i]
	}
	xv = padWindow(b, xv, w) // before the transpose: see convWeightGradGather
	// X̄ [N, C, lead..., trail...] → [lead₀, C, trail..., lead₁..., N] → [lead₀, C, S_t, lead₁..., N]
	perm, gperm := []int64{2, 1}, []int64{2}
	for i := j; i < k; i++ {
		perm, gperm = append(perm, int64(2+i)), append(gperm, int64(2+i))
	}
	for i := 1; i < j; i++ {
		perm, gperm = append(perm, int64(2+i)), append(gperm, int64(2+i))
	}
	area := int64(1)
	for _, p := range padded[j:] {
		area *= p
	}
	xt := b.Reshape(b.Transpose(xv, append(perm, 0)...), b.Ints(append(append([]int64{padded[0], c, area}, padded[1:j]...), -1)...))
	// dY [N, M, lead..., trail...] → [lead₀, trail..., lead₁..., N, M] → [P₀, P'·N, M]
	gt := b.Reshape(b.Transpose(g, append(gperm, 0, 1)...), b.Ints(out[0], -1, m))
	trailing := graph.WindowAttrs{Kernel: w.Kernel[j:], Strides: w.Strides[j:], Dilations: w.Dilations[j:]}
	table := gatherIndices(b, trailing, padded[j:], out[j:], kt, pt)
	axes := []int64{0}
	for i := 1; i < j; i++ {
		axes = append(axes, int64(2+i))
	}
	var parts []string
	offset := make([]int64, j)
	for {
		starts, ends := make([]int64, j), make([]int64, j)
		whole := true
		for i := range j {
			starts[i] = offset[i] * w.Dilations[i]
			ends[i] = starts[i] + w.Strides[i]*(out[i]-1) + 1
			whole = whole && starts[i] == 0 && w.Strides[i] == 1 && ends[i] == padded[i]
		}
		slab := xt
		if !whole {
			slab = b.Slice(xt, starts, ends, axes, w.Strides[:j])
		}
		cols := b.Op("Gather", []string{slab, table}, graph.AInt("axis", 2)) // [P₀, C, K_t, P_t, lead₁..., N]
		part := b.MatMul(b.Reshape(cols, b.Ints(out[0], c*kt, -1)), gt)      // [P₀, C·K_t, M]
		parts = append(parts, b.Reshape(part, b.Ints(out[0], c, kt, m)))
		next(offset, w.Kernel[:j])
		if !slices.ContainsFunc(offset, func(o int64) bool { return o != 0 }) {
			break
		}
	}
	return depthSum(b, parts, wshape)
}

// convWeightGradPerDepth is the weight gradient of a volume's convolution
// in the gemm form (CUDA) where its offsets' windows are too large to
// gather even a slab at a time: one product per kernel offset, as in the
// offsets form, each batched over the output's first spatial axis (the
// depth) and summed over it after: [P₀] × ([C, N·P'] by [N·P', M]). One
// GEMM per offset with all of a volume's voxels as its inner dimension
// (2²³ in the VQ-GAN preset's first layers, 64 channels either side) has
// a single output tile to spread over the GPU; on an H200 such GEMMs ran
// at 3% of bfloat16's peak (the VQ-GAN preset's 666 took 693 ms a step).
// X is laid out as [D, C, N, H, W] and dY as [D', N, H', W', M], so an
// offset's strided slice is its batch of [C, N·P'] matrices as it comes.
// "" for other windows, sizes that are not static, or one offset.
func convWeightGradPerDepth(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	k := len(in)
	if k != 3 || !slices.ContainsFunc(w.Kernel, func(n int64) bool { return n > 1 }) {
		return ""
	}
	for i := range k {
		if in[i] < 0 || out[i] < 0 {
			return ""
		}
	}
	c, m := wshape[1], wshape[0]
	xt := b.Transpose(padWindow(b, xv, w), 2, 1, 0, 3, 4)                 // [D̄, C, N, H̄, W̄]
	gt := b.Reshape(b.Transpose(g, 2, 0, 3, 4, 1), b.Ints(out[0], -1, m)) // [D', N·H'·W', M]
	axes := []int64{0, 3, 4}
	var parts []string
	offset := make([]int64, k)
	for {
		starts, ends := make([]int64, k), make([]int64, k)
		for i := range k {
			starts[i] = offset[i] * w.Dilations[i]
			ends[i] = starts[i] + w.Strides[i]*(out[i]-1) + 1
		}
		xs := b.Reshape(b.Slice(xt, starts, ends, axes, w.Strides), b.Ints(out[0], c, -1)) // [D', C, N·H'·W']
		parts = append(parts, b.Reshape(b.MatMul(xs, gt), b.Ints(out[0], c, 1, m)))
		next(offset, w.Kernel)
		if !slices.ContainsFunc(offset, func(o int64) bool { return o != 0 }) {
			break
		}
	}
	return depthSum(b, parts, wshape)
}

// convWeightGradBatched is the weight gradient in the gemm form (CUDA)
// where a sample's share of it is small against the sample's activations
// (a network's early stages): one product per sample, dW_n = dY_n·X̄_nᵀ
// as [M, P] by [P, C·K] (X̄_n the sample's windows: X_n itself for a
// pointwise window, else gathered as convWeightGradGather does, in the
// input's own layout), batched over the samples, then their sum. The
// other forms first move the channels in front of the batch, a copy of X
// and one of dY (ResNet-50's first two stages: most of its Transposes'
// traffic); this writes an [N, M, C·K] partial product instead, which
// pays where maxBatchedShare times a sample's share, M·C·K, is at most
// C·S + M·P (S the padded input's positions, P the output's). Each
// sample's product is rounded to dY's type before the sum, which ONNX
// Runtime's CUDA reduction accumulates in float32 (a NumPy model in
// float16: relative error 1.0–1.4× one GEMM's). "" where it does not
// apply: that bound, sizes not static, or windows too large to gather.
func convWeightGradBatched(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	k := len(in)
	c, m := wshape[1], wshape[0]
	kernels, positions, area := int64(1), int64(1), int64(1)
	padded := make([]int64, k)
	for i := range k {
		if in[i] < 0 || out[i] < 0 {
			return ""
		}
		padded[i] = in[i] + w.Pads[i] + w.Pads[k+i]
		kernels *= w.Kernel[i]
		positions *= out[i]
		area *= padded[i]
	}
	if maxBatchedShare*m*c*kernels > c*area+m*positions {
		return ""
	}
	var cols string // [N, C·K, P]
	if pointwise(w) {
		cols = b.Reshape(xv, b.Ints(0, c, positions))
	} else {
		if kernels*positions > maxGatherIndices || c*kernels*positions > maxGatherColumns {
			return ""
		}
		xr := b.Reshape(padWindow(b, xv, w), b.Ints(0, c, area))
		cols = b.Op("Gather", []string{xr, gatherIndices(b, w, padded, out, kernels, positions)}, graph.AInt("axis", 2)) // [N, C, K, P]
		cols = b.Reshape(cols, b.Ints(0, c*kernels, positions))
	}
	// [N, M, P] by [N, P, C·K]: ONNX Runtime folds the Transpose into the
	// product (FusedMatMul).
	perSample := b.MatMul(b.Reshape(g, b.Ints(0, m, positions)), b.Transpose(cols, 0, 2, 1))
	return b.Reshape(b.ReduceSum(perSample, false, 0), b.Ints(wshape...))
}

// convWeightGradShifted is the weight gradient in the gemm form (CUDA)
// of a stride-1 window whose output gradient has fewer channels than its
// input (a decoder's last convolution, 64 channels to 1): the kernel
// offsets shift dY instead of X, dW[m, c, κ] = Σ_s X[c, s]·dY[m, s + p₀ - κ]
// over the input's positions s, so the copies are of the smaller tensor,
// and all offsets' shifted dY go into one product that reads X once:
// [D, C, N·P'] by [D, N·P', K·M], batched over the input's first spatial
// axis and summed over it after. The other forms slice or gather X once
// per offset: the VQ-GAN preset's last convolution copied its 64-channel
// input 27 times (a GiB each at batch 1). "" where it does not apply:
// strides or dilations other than 1, pads past the window, M ≥ C, sizes
// not static, one offset, or shifted windows over maxGatherSlabColumns
// elements a sample.
func convWeightGradShifted(b *B, xv, g string, w graph.WindowAttrs, in, out, wshape []int64) string {
	k := len(in)
	c, m := wshape[1], wshape[0]
	if m >= c || !slices.ContainsFunc(w.Kernel, func(n int64) bool { return n > 1 }) {
		return ""
	}
	// dY padded so that offset κ's window of it starts at K-1-κ: by
	// K-1-p₀ before and K-1-p₁ after, the input's size plus K-1.
	pads := make([]int64, 2*k)
	kernels, positions := int64(1), int64(1)
	for i := range k {
		if in[i] < 0 || out[i] < 0 || w.Strides[i] != 1 || w.Dilations[i] != 1 {
			return ""
		}
		pads[i], pads[k+i] = w.Kernel[i]-1-w.Pads[i], w.Kernel[i]-1-w.Pads[k+i]
		if pads[i] < 0 || pads[k+i] < 0 || out[i]+pads[i]+pads[k+i] != in[i]+w.Kernel[i]-1 {
			return ""
		}
		kernels *= w.Kernel[i]
		positions *= in[i]
	}
	if kernels*m*positions > maxGatherSlabColumns {
		return ""
	}
	r := int64(k + 2)
	// X [N, C, D, rest...] → [D, C, N, rest...] → [D, C, N·P']
	perm := []int64{2, 1, 0}
	// dY [N, M, D̄, rest...] → [D̄, N, rest..., M]
	gperm := []int64{2, 0}
	axes := []int64{0} // the sliced axes of dY so laid out
	for i := int64(3); i < r; i++ {
		perm, gperm, axes = append(perm, i), append(gperm, i), append(axes, i-1)
	}
	xt := b.Reshape(b.Transpose(xv, perm...), b.Ints(in[0], c, -1))
	gt := b.Transpose(padWindow(b, g, graph.WindowAttrs{Pads: pads}), append(gperm, 1)...)
	var parts []string
	offset := make([]int64, k)
	for {
		starts, ends := make([]int64, k), make([]int64, k)
		for i := range k {
			starts[i] = w.Kernel[i] - 1 - offset[i]
			ends[i] = starts[i] + in[i]
		}
		parts = append(parts, b.Reshape(b.Slice(gt, starts, ends, axes, nil), b.Ints(in[0], -1, m))) // [D, N·P', M]
		next(offset, w.Kernel)
		if !slices.ContainsFunc(offset, func(o int64) bool { return o != 0 }) {
			break
		}
	}
	shifted := b.Op("Concat", parts, graph.AInt("axis", 2)) // [D, N·P', K·M]
	return depthSum(b, []string{b.Reshape(b.MatMul(xt, shifted), b.Ints(in[0], c, kernels, m))}, wshape)
}

// depthSum stacks the offsets' per-depth products [P₀, C, K_o, M] in W's
// order, sums them over the depth and lays the sum out as W [M, C, k...].
func depthSum(b *B, parts []string, wshape []int64) string {
	dw := parts[0]
	if len(parts) > 1 {
		dw = b.Op("Concat", parts, graph.AInt("axis", 2)) // [P₀, C, K, M]
	}
	dw = b.ReduceSum(dw, false, 0) // [C, K, M]
	return b.Reshape(b.Transpose(dw, 2, 0, 1), b.Ints(wshape...))
}

// padWindow pads the spatial axes (2 on) of x by the window's pads; x
// itself where they are all zero.
func padWindow(b *B, x string, w graph.WindowAttrs) string {
	if !slices.ContainsFunc(w.Pads, func(p int64) bool { return p != 0 }) {
		return x
	}
	k := len(w.Pads) / 2
	r := k + 2
	pads := make([]int64, 2*r)
	for i := range k {
		pads[2+i], pads[r+2+i] = w.Pads[i], w.Pads[k+i]
	}
	return b.Op("Pad", []string{x, b.Ints(pads...)})
}

// gatherIndices is convWeightGradGather's table [K, P]: for kernel offset
// κ and output position o, the flat position Σ (o_i·s_i + κ_i·d_i)·stride_i
// in the padded input. Windows of one geometry share it.
func gatherIndices(b *B, w graph.WindowAttrs, padded, out []int64, kernels, positions int64) string {
	k := len(padded)
	name := fmt.Sprintf("ortrain/conv/gather/k%v_s%v_d%v_in%v_out%v", w.Kernel, w.Strides, w.Dilations, padded, out)
	name = strings.NewReplacer(" ", "x", "[", "", "]", "").Replace(name)
	if _, ok := b.G.Initializers[name]; ok {
		return name
	}
	raw := make([]byte, 0, 4*kernels*positions)
	kappa := make([]int64, k)
	for range kernels {
		o := make([]int64, k)
		for range positions {
			flat := int64(0)
			for i := range k {
				flat = flat*padded[i] + o[i]*w.Strides[i] + kappa[i]*w.Dilations[i]
			}
			raw = byteorder.LittleEndian.AppendUint32(raw, uint32(flat))
			next(o, out)
		}
		next(kappa, w.Kernel)
	}
	t := graph.Raw(name, dtype.Int32, []int64{kernels, positions}, raw)
	b.G.AddInitializer(t)
	return name
}

// next advances the row-major multi-index ix within sizes, the last axis
// fastest, wrapping to zeros after the last.
func next(ix, sizes []int64) {
	for i := len(ix) - 1; i >= 0; i-- {
		if ix[i]++; ix[i] < sizes[i] {
			return
		}
		ix[i] = 0
	}
}

// convTransposeGrad: ConvTranspose is the adjoint of the Conv with the
// same window and weight, mapping its output space back to its input space;
// so dX is that Conv applied to dY, and dW is that Conv's weight gradient
// with dY as its input and X as its output gradient.
func convTransposeGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	if n.String("auto_pad", "NOTSET") != "NOTSET" || n.Ints("output_shape") != nil {
		b.Fail("ConvTranspose with auto_pad or output_shape has no gradient rule; export with explicit pads and output_padding (PyTorch does)")
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	group := n.Int("group", 1)
	if need[0] {
		dx[0] = b.Op("Conv", []string{g, n.Inputs[1]}, graph.AInts("strides", w.Strides), graph.AInts("pads", w.Pads),
			graph.AInts("dilations", w.Dilations), graph.AInt("group", group))
		if gi := b.Info(dx[0]); !slices.Equal(gi.Shape[2:], in) {
			b.Fail("ConvTranspose output_padding as large as the stride has no gradient rule")
		}
	}
	if need[1] {
		dx[1] = convWeightGrad(b, g, x(n), n.Inputs[1], w, out, in, group)
	}
	if len(need) > 2 && need[2] {
		dx[2] = b.ReduceSum(g, false, append([]int64{0}, spatialAxes(len(in)+2)...)...)
	}
	return dx
}

// maxPoolGrad routes dY to the positions MaxPool picked, which it reports
// in its Indices output as offsets into the flattened input; overlapping
// windows that pick the same element add up.
func maxPoolGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, 1)
	if dy[0] == "" || !need[0] {
		return dx
	}
	if n.Int("storage_order", 0) != 0 {
		b.Fail("MaxPool with storage_order=1 is not supported")
		return dx
	}
	idx := n.Output(1)
	if idx == "" {
		idx = b.G.AddOutput(n, y(n)+"_indices")
	}
	flat := b.Ints(-1)
	// Overlapping windows' gradients add up in float32 where the pool ran
	// in float16 or bfloat16 (as PyTorch accumulates them), which also
	// keeps the scatter on ONNX Runtime's float32 kernel.
	g, dt := dy[0], b.Info(dy[0]).DType
	low := dt == dtype.Float16 || dt == dtype.BFloat16
	if low {
		g = b.Cast(g, dtype.Float32)
	}
	z := b.ZerosLikeIn(b.Reshape(x(n), flat), b.Info(g).DType)
	s := b.Op("ScatterElements", []string{z, b.Reshape(idx, flat), b.Reshape(g, flat)},
		graph.AInt("axis", 0), graph.AString("reduction", "add"))
	if low {
		s = b.Cast(s, dt)
	}
	dx[0] = b.ReshapeLike(s, x(n))
	return dx
}

// avgPoolGrad spreads dY / count over each window: a transposed depthwise
// convolution with a kernel of ones, the counts being those ONNX Runtime
// divides by (the window clipped to the padded or the real input).
func avgPoolGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, 1)
	if dy[0] == "" || !need[0] {
		return dx
	}
	w, in, out, ok := staticSpatial(b, n)
	if !ok {
		return dx
	}
	xi := b.Info(x(n))
	c := xi.Shape[1]
	if c < 0 || slices.ContainsFunc(w.Dilations, func(d int64) bool { return d != 1 }) {
		b.Fail("AveragePool gradient needs static channels and no dilation")
		return dx
	}
	op := outputPadding(w, in, out)
	if slices.ContainsFunc(op, func(p int64) bool { return p < 0 }) {
		b.Fail("AveragePool with ceil_mode windows past the padded input is not supported")
		return dx
	}
	include := n.Int("count_include_pad", 0) == 1
	k := len(in)
	per := make([][]float64, k) // per-axis window sizes; the count is their product
	for i := 0; i < k; i++ {
		for o := int64(0); o < out[i]; o++ {
			lo := o*w.Strides[i] - w.Pads[i]
			hi := min(lo+w.Kernel[i], in[i]+w.Pads[k+i])
			if !include {
				lo, hi = max(lo, 0), min(hi, in[i])
			}
			per[i] = append(per[i], 1/float64(hi-lo))
		}
	}
	inv := []float64{1}
	for i := 0; i < k; i++ {
		var next []float64
		for _, a := range inv {
			for _, p := range per[i] {
				next = append(next, a*p)
			}
		}
		inv = next
	}
	dt := xi.DType
	invT, err := graph.Floats("", dt, append([]int64{1, 1}, out...), inv)
	if err != nil {
		b.Fail("%v", err)
		return dx
	}
	ones := make([]float64, c*numel(w.Kernel))
	for i := range ones {
		ones[i] = 1
	}
	kern, _ := graph.Floats("", dt, append([]int64{c, 1}, w.Kernel...), ones)
	g := b.Mul(dy[0], b.Const(invT))
	dx[0] = b.Op("ConvTranspose", []string{g, b.Const(kern)}, windowAttrs(w, c, op)...)
	return dx
}
