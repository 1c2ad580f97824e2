package autodiff

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// BatchNormalization in training, forward and backward, in as few nodes as
// the exact formulas allow (#31: ONNX Runtime's CUDA provider launches a
// kernel or more per node, and a ResNet-50 has 53 BatchNorm layers):
//
//   - the batch statistics come out in the shapes their readers take (the
//     mean once kept for centring and once flat for the BatchNormalization
//     node, the variance flat only);
//   - the per-layer scalars made from M, the elements per channel
//     (PyTorch's unbiased factor M/(M-1), the backward's 1/M), are
//     constants where M is static and otherwise read from the batch size
//     once for all layers (see elemsPerChannel);
//   - the backward uses inference-mode BatchNormalization nodes as the
//     per-channel affine maps it needs, x̂ = (x-μ)/√(σ²+ε) and
//     γ/√(σ²+ε)·(h-c), so that no per-channel vector is reshaped to
//     broadcast and 1/√(σ²+ε) is never formed.

// sharedPrefix starts the names of the values every BatchNorm layer of a
// graph shares; shared finds them by name.
const sharedPrefix = "ortrain/batchnorm/"

// shared returns the value named for key, made by mk (which must write it
// with OpInto) the first time a layer asks for it.
func shared(b *B, key string, mk func(out string)) string {
	name := sharedPrefix + key
	if _, ok := b.G.Infos[name]; !ok {
		mk(name)
	}
	return name
}

// count is M, the elements per channel of a BatchNorm input: a number
// where every size it multiplies is static, else a scalar value.
type count struct {
	n  float64
	v  string
	dt dtype.DType
}

// elemsPerChannel returns the elements of x over axes in type dt. A size
// unknown before the run (the batch) is read from the tensor it was traced
// to (graph.DimRoot: for a CNN, the input image), once per graph however
// many layers need it, and the product with the static sizes is made once
// per distinct product: ResNet-50's 53 layers need five.
func elemsPerChannel(b *B, x string, dt dtype.DType, axes []int64) count {
	xi := b.Info(x)
	static := int64(1)
	var dyn []string
	for _, a := range axes {
		if d := xi.Shape[a]; d >= 0 {
			static *= d
			continue
		}
		v, ra := b.G.DimRoot(x, int(a))
		dyn = append(dyn, shared(b, fmt.Sprintf("dim/%s/%d/%s", v, ra, dt), func(out string) {
			idx := b.Const(graph.Int64s("", nil, []int64{int64(ra)}))
			b.OpInto(out, "Cast", []string{b.Op("Gather", []string{b.Shape(v), idx}, graph.AInt("axis", 0))},
				graph.AInt("to", int64(dt)))
		}))
	}
	if len(dyn) == 0 {
		return count{n: float64(static), dt: dt}
	}
	slices.Sort(dyn)
	if len(dyn) == 1 && static == 1 {
		return count{v: dyn[0], dt: dt}
	}
	terms := dyn
	if static != 1 {
		terms = append(terms, b.Scalar(dt, float64(static)))
	}
	short := make([]string, len(dyn))
	for i, d := range dyn {
		short[i] = strings.TrimPrefix(d, sharedPrefix)
	}
	m := shared(b, fmt.Sprintf("count/%d*%s", static, strings.Join(short, "*")), func(out string) {
		p := terms[0]
		for _, t := range terms[1 : len(terms)-1] {
			p = b.Mul(p, t)
		}
		b.OpInto(out, "Mul", []string{p, terms[len(terms)-1]})
	})
	return count{v: m, dt: dt}
}

// scalar is f(M): a constant where M is static, else f's graph form of
// the value (made once per graph and key).
func (c count) scalar(b *B, key string, f func(m float64) float64, op func(m, out string)) string {
	if c.v == "" {
		return b.Scalar(c.dt, f(c.n))
	}
	return shared(b, key+"("+strings.TrimPrefix(c.v, sharedPrefix)+")", func(out string) { op(c.v, out) })
}

// value is M itself.
func (c count) value(b *B) string {
	if c.v == "" {
		return b.Scalar(c.dt, c.n)
	}
	return c.v
}

// unbiasedMomentum is M/(M-1)·(1-momentum), the factor the running
// variance takes the batch's (biased) variance with: PyTorch keeps the
// unbiased variance.
func (c count) unbiasedMomentum(b *B, momentum float64) string {
	return c.scalar(b, fmt.Sprintf("unbiased/%g", momentum), func(m float64) float64 { return m / (m - 1) * (1 - momentum) },
		func(m, out string) {
			b.OpInto(out, "Mul", []string{b.Div(m, b.Sub(m, b.Scalar(c.dt, 1))), b.Scalar(c.dt, 1-momentum)})
		})
}

// channelFill is a vector of v shaped and typed like like (a per-channel
// input of BatchNormalization): a constant shared by the layers of a
// graph when its length is static.
func channelFill(b *B, like string, v float64) string {
	li := b.Info(like)
	if !li.Static() || li.Rank() != 1 {
		return b.Op("Expand", []string{b.ScalarLike(like, v), b.Shape(like)})
	}
	name := fmt.Sprintf("%sfill/%g/%d/%s", sharedPrefix, v, li.Shape[0], li.DType)
	if _, ok := b.G.Infos[name]; !ok {
		vals := make([]float64, li.Shape[0])
		for i := range vals {
			vals[i] = v
		}
		t, err := graph.Floats(name, li.DType, li.Shape, vals)
		if err != nil {
			return b.Fail("%v", err)
		}
		b.G.AddInitializer(t)
	}
	return name
}

// affine is inference-mode BatchNormalization: per channel,
// scale·(x-mean)/√(variance+ε) + bias.
func affine(b *B, n *N, x, scale, bias, mean, variance string) string {
	return b.Op("BatchNormalization", []string{x, scale, bias, mean, variance}, graph.AFloat("epsilon", n.Float("epsilon", 1e-5)))
}

// batchNormGrad differentiates BatchNormalization in inference mode, where
// the mean and variance are constants (frozen statistics): dX is dY
// scaled by γ/√(σ²+ε), an affine map with no shift. Training-mode nodes
// are rewritten by TrainingBatchNorm beforehand.
func batchNormGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	if n.Int("training_mode", 0) == 1 || len(n.Outputs) > 1 {
		b.Fail("training-mode BatchNormalization must be expanded by autodiff.TrainingBatchNorm first")
		return dx
	}
	bc := append([]int64{0}, spatialAxes(b.Info(x(n)).Rank())...)
	scale, mean, v := n.Inputs[1], n.Inputs[3], n.Inputs[4]
	if need[0] {
		dx[0] = affine(b, n, g, scale, channelFill(b, scale, 0), channelFill(b, v, 0), v)
	}
	if need[1] {
		xhat := affine(b, n, x(n), channelFill(b, scale, 1), channelFill(b, scale, 0), mean, v)
		dx[1] = b.ReduceSum(b.Mul(g, xhat), false, bc...)
	}
	if need[2] {
		dx[2] = b.ReduceSum(g, false, bc...)
	}
	return dx
}

// batchNormTrainingGrad differentiates BatchNormTraining: normalisation by
// the batch's own mean μ and variance σ² (inputs 3 and 4, computed from X
// by TrainingBatchNorm), whose dependence on X the formula accounts for;
// the statistics themselves get no gradient. With x̂ = (x-μ)/√(σ²+ε) and g
// the gradient reaching the output, over all axes but channels (M
// elements each):
//
//	dβ = Σg,  dγ = Σ g·x̂,  dX = γ/√(σ²+ε) · (g - x̂·dγ/M - dβ/M)
//
// The backward takes the per-channel means dγ/M and dβ/M (one reduction
// each, read by w and by dγ = M·(dγ/M), dβ = M·(dβ/M), no scaling by -1/M
// before w; batchScaledGradients then computes all the layers' M·mean
// as one product). x̂, w = x̂·dγ/M + dβ/M and dX = γ/√(σ²+ε)·(g - w) are
// each one BatchNormalization node (x̂'s with scale 1; w's with scale
// dγ/M and bias dβ/M; dX's over g - w with mean 0), so the backward keeps
// only X and the per-channel statistics from the forward and reshapes
// nothing.
// Where the forward ran its BatchNorm in a low type, w, g - w and dX are
// element-wise in what X and g are on the device, and
// precision.LowBatchNorms runs all three there: only the reductions
// need the float32 copies, and in CUDA builds over long enough rows not
// those either (batchNormRowMeans).
func batchNormTrainingGrad(b *B, n *N, dy []string, need []bool) []string {
	dx := make([]string, len(n.Inputs))
	g := dy[0]
	if g == "" {
		return dx
	}
	bc := append([]int64{0}, spatialAxes(b.Info(x(n)).Rank())...)
	scale, mean, v := n.Inputs[1], n.Inputs[3], n.Inputs[4]
	meanG, meanGX := batchNormRowMeans(b, n, g, need)
	if (need[0] || need[2]) && meanG == "" {
		meanG = b.ReduceMean(g, false, bc...)
	}
	if (need[0] || need[1]) && meanGX == "" {
		xhat := affine(b, n, x(n), channelFill(b, scale, 1), channelFill(b, scale, 0), mean, v)
		meanGX = b.ReduceMean(b.Mul(g, xhat), false, bc...)
	}
	if need[1] || need[2] {
		m := elemsPerChannel(b, x(n), b.Info(g).DType, bc).value(b)
		if need[2] {
			dx[2] = b.Mul(meanG, m)
		}
		if need[1] {
			dx[1] = b.Mul(meanGX, m)
		}
	}
	if !need[0] {
		return dx
	}
	// w takes the means in the scale's type, should the gradient's differ.
	perChannel := func(u string) string {
		if dt := b.Info(scale).DType; b.Info(u).DType != dt {
			u = b.Cast(u, dt)
		}
		return u
	}
	w := affine(b, n, x(n), perChannel(meanGX), perChannel(meanG), mean, v)
	zero := channelFill(b, scale, 0)
	dx[0] = affine(b, n, b.Sub(g, w), scale, zero, channelFill(b, v, 0), v)
	return dx
}

// minStatisticsRow and maxStatisticsRow bound the positions per (sample,
// channel) row for which rowStatistics computes a BatchNorm's statistics:
// ResNet-50's maps of 28² and up at 224² (three quarters of its BatchNorm
// elements), not the 14² and 7² ones, whose short rows the
// LayerNormalization kernel would run a block each; nor a volume's rows of
// millions, a block each too and few of them, whose scale of ones would
// be an initializer as large as a sample's channel.
const (
	minStatisticsRow = 512
	maxStatisticsRow = 1 << 16
)

// rowStatistics computes the batch mean and (biased) variance of a
// float32 x per channel from each (sample, channel) row's, which one
// LayerNormalization over the spatial axes gives in a single pass: its
// Mean μᵢ and InvStdDev 1/√σᵢ² outputs are float32 whatever x's type,
// computed in float32 (Welford's algorithm on the CUDA provider). The
// channel's are the law of total variance over rows of equal size:
// μ = mean μᵢ, σ² = mean (σᵢ² + (μᵢ-μ)²). The elementary form makes a
// centred copy of x and reads x twice and it once; this reads x once and
// writes the normalised rows LayerNormalization must output, unread (a
// float16 x on the GPU, see precision.LowRowStatistics: 4 bytes an
// element instead of 22). Its ε is 1e-30, far below any variance it
// meets, so that σᵢ² = InvStdDev⁻² and a constant row's is 0. For CUDA
// builds only: the CUDA provider's kernel accumulates with Welford's
// algorithm, the CPU provider's computes E[x²] - E[x]² in float32, which
// loses the variance of rows whose mean is large against their spread.
// "" where it does not apply: x not float32, or rows rowNorm does not
// take.
func rowStatistics(b *B, x string, axes []int64) (flatMean, flatVar string) {
	if b.Info(x).DType != dtype.Float32 {
		return "", ""
	}
	stats := rowNorm(b, x)
	if stats == nil {
		return "", ""
	}
	rowMean, rowInvStd := stats[1], stats[2]
	mean := b.ReduceMean(rowMean, true, 0)
	d := b.Sub(rowMean, mean)
	rowVar := b.Pow(rowInvStd, b.Scalar(dtype.Float32, -2))
	return b.Reshape(mean, b.Ints(-1)), b.ReduceMean(b.Add(rowVar, b.Mul(d, d)), false, axes...)
}

// rowNorm is a LayerNormalization over x's spatial axes, each (sample,
// channel) row normalised (the output, unread) with its Mean and
// InvStdDev (ε 1e-30, so that σᵢ² = InvStdDev⁻²), the rows' statistics
// rowStatistics and batchNormRowSums read; nil where x's rows do not fit
// the kernel: fewer than three axes, spatial sizes not static or their
// product outside [minStatisticsRow, maxStatisticsRow].
func rowNorm(b *B, x string) []string {
	xi := b.Info(x)
	if !rowsFit(xi) {
		return nil
	}
	spatial := xi.Shape[2:]
	ones := fmt.Sprintf("%sones/%v", sharedPrefix, strings.Trim(strings.ReplaceAll(fmt.Sprint(spatial), " ", "x"), "[]"))
	if _, ok := b.G.Infos[ones]; !ok {
		vals := make([]float64, dtype.Numel(spatial))
		for i := range vals {
			vals[i] = 1
		}
		t, err := graph.Floats(ones, dtype.Float32, spatial, vals)
		if err != nil {
			b.Fail("%v", err)
			return nil
		}
		b.G.AddInitializer(t)
	}
	return b.OpN("LayerNormalization", []string{x, ones}, 3, graph.AInt("axis", 2), graph.AFloat("epsilon", 1e-30))
}

// rowsFit reports whether rowNorm takes a value of x's shape.
func rowsFit(xi graph.Info) bool {
	if !xi.Known || xi.Rank() < 3 || slices.Contains(xi.Shape[2:], -1) {
		return false
	}
	rows := dtype.Numel(xi.Shape[2:])
	return rows >= minStatisticsRow && rows <= maxStatisticsRow
}

// rowSumScale is the power of two x̂ is divided by (exactly) before
// batchNormRowMeans multiplies it with g in float16: products stay below
// float16's largest value where a loss-scaled gradient comes near it, for
// three bits less at the small end (float16 resolves down to 2⁻²⁴).
const rowSumScale = 8

// batchNormRowMeans computes a training BatchNorm's dβ/M = mean g and
// dγ/M = mean g·x̂ per channel from each (sample, channel) row's mean,
// which one LayerNormalization over the row gives in float32: the
// channel's mean is the mean of its rows' (all of one size).
// precision.LowRowStatistics has the LayerNormalizations read the float16
// values and takes g·x̂/8 in float16 (x̂/8 is a BatchNormalization with
// scale 1/8, exact in powers of two). The sums over float32 copies moved
// 10 and 22 bytes an element (g's copy and its reduction; x̂'s copy, the
// float32 product and its reduction), these 4 and 10, at one more
// rounding of each product (a NumPy model of both chains on float16 data:
// relative error in dγ 1.0–1.6× the float32 chain's, dβ's unchanged).
// Only where g and x are float32 copies of float16 values (a float16
// BatchNorm's, CUDA builds: Options.RowSums) and x's rows fit rowNorm; ""
// otherwise. Over float32 values a LayerNormalization moves twice the
// bytes of a reduction.
func batchNormRowMeans(b *B, n *N, g string, need []bool) (meanG, meanGX string) {
	xi := b.Info(x(n))
	if !optionsFor(b).RowSums || !rowsFit(xi) || !float16Copy(b, g) || !float16Copy(b, x(n)) {
		return "", ""
	}
	bc := append([]int64{0}, spatialAxes(xi.Rank())...)
	rowMeans := func(v string) string {
		stats := rowNorm(b, v)
		if stats == nil { // the builder failed (b.Err says why)
			return ""
		}
		// The means are [N, C, 1...]: a mean over the batch, which the
		// CUDA provider's own kernel runs (the axes of size 1 set aside).
		return b.ReduceMean(stats[1], false, bc...)
	}
	if need[0] || need[2] {
		meanG = rowMeans(g)
	}
	if need[0] || need[1] {
		scale, mean, v := n.Inputs[1], n.Inputs[3], n.Inputs[4]
		xhat := affine(b, n, x(n), channelFill(b, scale, 1.0/rowSumScale), channelFill(b, scale, 0), mean, v)
		if m := rowMeans(b.Mul(g, xhat)); m != "" {
			meanGX = b.Mul(m, b.Scalar(dtype.Float32, rowSumScale))
		}
	}
	return meanG, meanGX
}

// float16Copy reports whether v is a float32 Cast of a float16 value.
func float16Copy(b *B, v string) bool {
	for _, p := range b.G.Nodes {
		if slices.Contains(p.Outputs, v) {
			return p.Op == "Cast" && p.Domain == "" && dtype.DType(p.Int("to", 0)) == dtype.Float32 && b.Info(p.Input(0)).DType == dtype.Float16
		}
	}
	return false
}

// BufferUpdate pairs a buffer input (a running statistic) with the value
// holding its new contents after a training step.
type BufferUpdate struct {
	Buffer, Out string
}

// TrainingBatchNorm rewrites every BatchNormalization node into training
// mode: the batch's mean and (biased) variance are computed with
// elementary ops and fed to a BatchNormTraining node (a BatchNormalization
// whose gradient rule knows its statistics are its input's, see
// batchNormTrainingGrad), and the running statistics are updated as
// running*momentum + batch*(1-momentum), with the variance unbiased as
// PyTorch does, since the models and recipes ortrain trains come from
// PyTorch. Stock ONNX Runtime has no training-mode BatchNormalization
// gradient; this form needs none, and its backward holds only the input.
// outName names the value each running statistic's update is written to.
// rows computes the batch statistics from per-row ones where
// rowStatistics applies (builds for CUDA; see there).
func TrainingBatchNorm(g *graph.Graph, outName func(buffer string) string, rows bool) ([]BufferUpdate, error) {
	seen := map[string]bool{}
	var bns []*graph.Node
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool {
		if n.Op == "BatchNormalization" && n.Domain == "" {
			bns = append(bns, n)
			return true
		}
		return false
	})
	var stats []runningStat
	for _, n := range bns {
		b := graph.NewBuilder(g, n.Name+"/")
		xi := g.Info(x(n))
		if !xi.Known || xi.Rank() < 2 {
			return nil, graph.Errorf("BatchNormalization %q: input rank unknown", n.Name)
		}
		axes := append([]int64{0}, spatialAxes(xi.Rank())...)
		dt := xi.DType
		var flatMean, flatVar string
		if rows {
			flatMean, flatVar = rowStatistics(b, x(n), axes)
		}
		if flatMean == "" {
			// The mean is kept with its axes to centre X, the variance is
			// reduced straight to the flat per-channel vector.
			mean := b.ReduceMean(x(n), true, axes...)
			d := b.Sub(x(n), mean)
			flatVar = b.ReduceMean(b.Mul(d, d), false, axes...)
			flatMean = b.Reshape(mean, b.Ints(-1))
		}
		g.Domains[graph.StopGradientDomain] = 1
		g.AddNode(&graph.Node{Op: graph.BatchNormTrainingOp, Domain: graph.StopGradientDomain, Name: g.Fresh(n.Name),
			Inputs:  []string{x(n), n.Inputs[1], n.Inputs[2], flatMean, flatVar},
			Outputs: []string{y(n)}, Attrs: []*graph.Attr{graph.AFloat("epsilon", n.Float("epsilon", 1e-5))}})

		mom := n.Float("momentum", 0.9)
		c := elemsPerChannel(b, x(n), dt, axes)
		for i, stat := range []string{flatMean, flatVar} {
			buf := n.Inputs[3+i]
			if seen[buf] {
				return nil, graph.Errorf("running statistic %q feeds two BatchNormalization nodes", buf)
			}
			seen[buf] = true
			st := runningStat{at: len(stats), buf: buf, stat: stat, out: outName(buf), mom: mom, factor: 1 - mom}
			if i == 1 {
				if c.v == "" {
					st.factor = c.n / (c.n - 1) * (1 - mom)
				} else {
					st.factorValue = c.unbiasedMomentum(b, mom)
				}
			}
			stats = append(stats, st)
		}
		if b.Err != nil {
			return nil, b.Err
		}
	}
	ups, err := updateRunningStats(g, stats)
	if err != nil {
		return nil, err
	}
	return ups, g.Sort()
}

// runningStat is one running statistic's update, out = buf·mom +
// stat·factor, the factor a number or, where the batch size is known only
// at run time, the scalar factorValue.
type runningStat struct {
	at             int // the order of the updates returned
	buf, stat, out string
	mom, factor    float64
	factorValue    string
}

// updateRunningStats writes the running statistics' updates: those of a
// type and of static length all at once, as one buffer·momentum +
// statistic·factor over their concatenation, split into the outputs (a
// ResNet-50's 106 statistics in a dozen nodes rather than six nodes
// each); the factors are one constant vector but for those computed at
// run time, broadcast once per distinct value. Any other is updated on
// its own. Each element's arithmetic is the same either way.
func updateRunningStats(g *graph.Graph, stats []runningStat) ([]BufferUpdate, error) {
	b := graph.NewBuilder(g, sharedPrefix+"running/")
	ups := make([]BufferUpdate, len(stats))
	groups := map[dtype.DType][]runningStat{}
	var types []dtype.DType
	for _, st := range stats {
		bi := g.Info(st.buf)
		if !g.Info(st.stat).Static() || !bi.Static() || bi.Rank() != 1 {
			factor := st.factorValue
			if factor == "" {
				factor = b.Scalar(bi.DType, st.factor)
			}
			b.OpInto(st.out, "Add", []string{b.Mul(st.buf, b.Scalar(bi.DType, st.mom)), b.Mul(st.stat, factor)})
			ups[st.at] = BufferUpdate{Buffer: st.buf, Out: st.out}
			continue
		}
		if groups[bi.DType] == nil {
			types = append(types, bi.DType)
		}
		groups[bi.DType] = append(groups[bi.DType], st)
	}
	for _, dt := range types {
		group := groups[dt]
		// Constant factors first, then those computed at run time, each
		// value's statistics together.
		slices.SortStableFunc(group, func(a, c runningStat) int { return strings.Compare(a.factorValue, c.factorValue) })
		var bufs, vals, outs []string
		var moms []float64
		var lengths []int64
		parts := make([]factorPart, len(group))
		for i, st := range group {
			n := g.Info(st.buf).Shape[0]
			bufs, vals, outs = append(bufs, st.buf), append(vals, st.stat), append(outs, st.out)
			lengths = append(lengths, n)
			for range n {
				moms = append(moms, st.mom)
			}
			parts[i] = factorPart{n: n, c: st.factor, v: st.factorValue}
		}
		factor := factorVector(b, dt, parts)
		momT, err := graph.Floats("", dt, []int64{int64(len(moms))}, moms)
		if err != nil {
			return nil, err
		}
		all := b.Add(b.Mul(b.Concat(0, bufs...), b.Const(momT)), b.Mul(b.Concat(0, vals...), factor))
		g.AddNode(&graph.Node{Op: "Split", Name: g.Fresh(sharedPrefix + "running/Split"),
			Inputs: []string{all, b.Ints(lengths...)}, Outputs: outs, Attrs: []*graph.Attr{graph.AInt("axis", 0)}})
		for _, st := range group {
			ups[st.at] = BufferUpdate{Buffer: st.buf, Out: st.out}
		}
	}
	return ups, b.Err
}
