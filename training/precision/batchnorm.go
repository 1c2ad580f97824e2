package precision

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// LowBatchNorms gives the low type to the BatchNormalization nodes that
// autocast left in float32 between Casts (Cast(h, float32) → BN → Cast(low),
// outputsInputType): each reads h itself, with its scale, bias, mean and
// variance cast to the low type, and writes its output in it, where the
// device has such a kernel (ONNX Runtime's CUDA provider has it in float16:
// cuDNN normalises in float32 inside and rounds the output, as PyTorch's
// autocast does for a float16 BatchNorm). That is two passes over the
// activation fewer per layer, and the float32 output never exists: in
// ResNet-50's step, forward and recomputed, the largest traffic after the
// statistics. The batch statistics themselves are still computed in
// float32 from the float32 copy, and the backward reads them so.
//
// The per-channel inputs rounded to the low type change the output by
// about one rounding of it. Each per-channel value is cast once for every
// layer that reads it (a layer and its recomputation share the copy).
//
// The backward's element-wise part of a training BatchNorm (autodiff's
// w = BN(x, dγ/M, dβ/M), g - w and dX = BN(g - w, γ, 0, 0, σ²); see
// LowBatchNormGrad) is given the low type the same way where g and x
// are float32 copies of low values and dX goes on in the low type: three
// passes that read and write the low type instead of float32 and need
// neither the float32 sum nor the float32 dX nor its Cast. Each of the
// three rounds its output once (cuDNN computes each in float32), where
// the float32 chain rounded dX once; the error stays of the order of the
// low rounding of g that dX inherits anyway.
//
// The backward's x̂ = BN(x32, 1, 0, μ, σ²), which dγ's float32 product
// reads, is normalised from the low value and cast up where that leaves
// x's float32 copy without readers.
//
// It returns the number of nodes rewritten (a backward's element-wise
// part counts one, its x̂ another); the float32 values nothing reads any
// more are left to Prune. An error leaves g half rewritten.
func LowBatchNorms(g *graph.Graph, low dtype.DType, kernels Kernels) (int, error) {
	if kernels == nil || low == 0 {
		return 0, nil
	}
	producers, consumers, outputs := g.Producers(), g.Consumers(), g.OutputSet()
	type lowGrad struct {
		w    *graph.Node
		x, g string // the low values
	}
	type match struct {
		readers []*graph.Node
		grad    *lowGrad
		up      string // x̂'s: the low value it normalises, its output cast up
	}
	found := map[*graph.Node]match{}
	up := map[*graph.Node]string{}
	order := map[*graph.Node]int{}
	for i, n := range g.Nodes {
		order[n] = i
	}
	var first *graph.Node // the first node rewritten
	// The per-channel vectors that are graph inputs (a layer's scale and
	// bias, the running statistics an eval graph reads) are cast together,
	// one Concat, Cast and Split for all layers, before the first.
	var whole []string
	seen := map[string]bool{}
	perChannel := func(vs []string) {
		for _, v := range vs {
			if i := g.Info(v); producers[v] == nil && i.DType != low && i.Static() && i.Rank() == 1 && !seen[v] {
				seen[v] = true
				whole = append(whole, v)
			}
		}
	}
	for _, n := range g.Nodes {
		if m, ok := LowBatchNormGrad(g, producers, consumers, outputs, n); ok {
			x, gr := lowSource(g, producers, m.X32, low), lowSource(g, producers, m.G32, low)
			if x == "" || gr == "" || dtype.DType(m.Readers[0].Int("to", 0)) != low ||
				!kernels(m.W, low) || !kernels(m.Diff, low) || !kernels(n, low) {
				continue
			}
			found[n] = match{readers: m.Readers, grad: &lowGrad{m.W, x, gr}}
			perChannel(append(slices.Clone(m.W.Inputs[1:5]), n.Inputs[1:5]...))
		} else {
			x32, readers, ok := LowBatchNorm(g, producers, consumers, outputs, n)
			if !ok || g.Info(producers[x32].Input(0)).DType != low || dtype.DType(readers[0].Int("to", 0)) != low || !kernels(n, low) {
				continue
			}
			found[n] = match{readers: readers}
			perChannel(n.Inputs[1:5])
		}
		if first == nil {
			first = n
		}
	}
	// A rewritten backward's x̂: a BatchNorm over the float32 copy of x
	// that w read, with w's statistics. Where nothing else reads the copy
	// it dies: 10 bytes an element moved instead of 14, and one float32
	// tensor fewer.
	for _, m := range found {
		d := m.grad
		if d == nil {
			continue
		}
		x32 := d.w.Input(0)
		var xhats []*graph.Node
		dies := !outputs[x32]
		for _, r := range consumers[x32] {
			switch {
			case r == d.w:
			case found[r].readers != nil && found[r].grad == nil:
				// The forward's BatchNorm recomputed for the backward,
				// which reads the low value already.
			case inferenceBN(r) && r.Input(3) == d.w.Input(3) && r.Input(4) == d.w.Input(4) && !outputs[r.Outputs[0]] && kernels(r, low):
				xhats = append(xhats, r)
			default:
				dies = false
			}
		}
		if !dies {
			continue
		}
		for _, r := range xhats {
			up[r] = d.x
		}
	}
	for _, n := range g.Nodes {
		x, ok := up[n]
		if !ok {
			continue
		}
		found[n] = match{up: x}
		perChannel(n.Inputs[1:5])
		if first == nil || order[n] < order[first] {
			first = n
		}
	}
	if len(found) == 0 {
		return 0, nil
	}
	b := graph.NewBuilder(g, "autocast/")
	lowCopy := map[string]string{}
	old := g.Nodes
	nodes := make([]*graph.Node, 0, len(old)+len(whole)+2)
	emit := func(mk func()) {
		at := len(g.Nodes)
		mk()
		nodes = append(nodes, g.Nodes[at:]...)
	}
	drop := map[*graph.Node]bool{}
	rename := map[string]string{}
	for _, n := range old {
		m, ok := found[n]
		if !ok {
			nodes = append(nodes, n)
			continue
		}
		if n == first && len(whole) > 0 {
			emit(func() { castTogether(b, whole, low, lowCopy) })
		}
		lowOf := func(vs []string) []string {
			var copies []string
			for _, v := range vs {
				c, done := lowCopy[v]
				if !done && g.Info(v).DType == low {
					c, done = v, true
				}
				if !done {
					emit(func() { c = b.Cast(v, low) })
					lowCopy[v] = c
				}
				copies = append(copies, c)
			}
			return copies
		}
		if m.up != "" {
			params := lowOf(n.Inputs[1:5])
			emit(func() {
				y := b.Op("BatchNormalization", append([]string{m.up}, params...), n.Attrs...)
				b.OpInto(n.Outputs[0], "Cast", []string{y}, graph.AInt("to", int64(dtype.Float32)))
			})
			drop[n] = true
			continue
		}
		// The node writes the first low copy's value; the other copies'
		// readers read it too.
		out := m.readers[0].Outputs[0]
		for _, r := range m.readers {
			drop[r] = true
			rename[r.Outputs[0]] = out
		}
		if d := m.grad; d != nil {
			// w, g - w and dX again, over the low values, in F's place
			// (everything they read is computed before it); the float32
			// w and sum are left to Prune.
			params := lowOf(append(slices.Clone(d.w.Inputs[1:5]), n.Inputs[1:5]...))
			emit(func() {
				w := b.Op("BatchNormalization", append([]string{d.x}, params[:4]...), d.w.Attrs...)
				b.OpInto(out, "BatchNormalization", append([]string{b.Sub(d.g, w)}, params[4:]...), n.Attrs...)
			})
			drop[n] = true
			continue
		}
		n.Inputs = append([]string{producers[n.Input(0)].Input(0)}, lowOf(n.Inputs[1:5])...)
		n.Outputs = []string{out}
		nodes = append(nodes, n)
	}
	if b.Err != nil {
		return 0, b.Err
	}
	g.Nodes = rewired(nodes, drop, rename, nil)
	return len(found), nil
}

// rewired returns nodes without those in drop, every input renamed as
// rename says, and the nodes before[n] placed just before n.
func rewired(nodes []*graph.Node, drop map[*graph.Node]bool, rename map[string]string, before map[*graph.Node][]*graph.Node) []*graph.Node {
	out := make([]*graph.Node, 0, len(nodes)+len(before))
	for _, n := range nodes {
		if drop[n] {
			continue
		}
		for i, in := range n.Inputs {
			if r, ok := rename[in]; ok {
				n.Inputs[i] = r
			}
		}
		out = append(out, before[n]...)
		out = append(out, n)
	}
	return out
}

// castTogether casts the rank-1 values vs to low as one Concat, Cast and
// Split, recording each low copy in copies.
func castTogether(b *graph.Builder, vs []string, low dtype.DType, copies map[string]string) {
	if len(vs) == 1 {
		copies[vs[0]] = b.Cast(vs[0], low)
		return
	}
	lengths := make([]int64, len(vs))
	for i, v := range vs {
		lengths[i] = b.Info(v).Shape[0]
	}
	parts := b.OpN("Split", []string{b.Cast(b.Concat(0, vs...), low), b.Ints(lengths...)}, len(vs), graph.AInt("axis", 0))
	for i, v := range vs {
		copies[v] = parts[i]
	}
}

// LowBatchNorm reports whether n has LowBatchNorms' pattern but for the
// types: an inference-mode BatchNormalization with one output, whose input
// is a Cast to float32 and whose output only Casts read (to one type, not
// float32) and no graph output is. x32 is the Cast's output, readers the
// Casts. Step-time plans price graphs built for a CPU as a GPU would run
// them, and so ask the same question of a graph whose types are not the
// device's.
func LowBatchNorm(g *graph.Graph, producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node) (x32 string, readers []*graph.Node, ok bool) {
	if !inferenceBN(n) {
		return "", nil, false
	}
	p := producers[n.Input(0)]
	if p == nil || !IsCast(p, dtype.Float32) {
		return "", nil, false
	}
	readers, ok = lowReaders(consumers, outputs, n.Outputs[0])
	return n.Input(0), readers, ok
}

// BatchNormGrad is the element-wise part of a training BatchNorm's
// backward as autodiff writes it: W = BN(X32, s, t, μ, σ²), Diff = G32 - W's
// output, F = BN(that difference, γ, 0, 0, σ²), F's output read only by Casts to
// one type other than float32 (Readers). LowBatchNorms rewrites it where
// X32 and G32 are Casts of X and G, values in that type.
type BatchNormGrad struct {
	W, Diff  *graph.Node
	X32, G32 string
	Readers  []*graph.Node
}

// LowBatchNormGrad reports whether f ends a BatchNormGrad, as
// LowBatchNorm does for the forward: the pattern but for the types (a
// graph built for a CPU computes G32 in float32 where the device's build
// casts it from the low type).
func LowBatchNormGrad(g *graph.Graph, producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, f *graph.Node) (BatchNormGrad, bool) {
	var m BatchNormGrad
	if !inferenceBN(f) {
		return m, false
	}
	sole := func(v string, reader *graph.Node) *graph.Node {
		if p := producers[v]; p != nil && !outputs[v] && len(consumers[v]) == 1 && consumers[v][0] == reader {
			return p
		}
		return nil
	}
	m.Diff = sole(f.Input(0), f)
	if m.Diff == nil || m.Diff.Op != "Sub" || m.Diff.Domain != "" || len(m.Diff.Inputs) != 2 {
		return m, false
	}
	if w := sole(m.Diff.Input(1), m.Diff); w != nil && inferenceBN(w) && w.Input(4) == f.Input(4) {
		m.W, m.X32, m.G32 = w, w.Input(0), m.Diff.Input(0)
	}
	if m.W == nil {
		return m, false
	}
	readers, ok := lowReaders(consumers, outputs, f.Outputs[0])
	m.Readers = readers
	return m, ok
}

// lowSource is the value in low that v, a float32 Cast of it, copies; ""
// for any other v.
func lowSource(g *graph.Graph, producers map[string]*graph.Node, v string, low dtype.DType) string {
	if p := producers[v]; p != nil && IsCast(p, dtype.Float32) && g.Info(p.Input(0)).DType == low {
		return p.Input(0)
	}
	return ""
}

// inferenceBN reports whether n is an inference-mode BatchNormalization
// with one output.
func inferenceBN(n *graph.Node) bool {
	if n.Op != "BatchNormalization" || n.Domain != "" || n.Int("training_mode", 0) != 0 || len(n.Inputs) != 5 {
		return false
	}
	for _, o := range n.Outputs[1:] {
		if o != "" {
			return false
		}
	}
	return true
}

// lowReaders returns y's readers when they are all Casts of it to one
// type other than float32 and y is no graph output.
func lowReaders(consumers map[string][]*graph.Node, outputs map[string]bool, y string) ([]*graph.Node, bool) {
	readers := consumers[y]
	if outputs[y] || len(readers) == 0 {
		return nil, false
	}
	to := dtype.DType(readers[0].Int("to", 0))
	for _, r := range readers {
		if !IsCast(r, to) || to == dtype.Float32 || len(r.Outputs) != 1 || r.Input(0) != y {
			return nil, false
		}
	}
	return readers, true
}

// IsCast reports whether n is a Cast to dt.
func IsCast(n *graph.Node, dt dtype.DType) bool {
	return n.Op == "Cast" && n.Domain == "" && dtype.DType(n.Int("to", 0)) == dt
}

// LowRowStatistics gives the low type to the input of the
// LayerNormalizations that compute BatchNorm statistics (autodiff's
// rowStatistics and batchNormRowMeans: only their float32 Mean and
// InvStdDev are read) where it is a float32 Cast of a low value and the
// device has the kernel (ONNX Runtime's CUDA provider computes a float16
// or bfloat16 input's statistics in float32 and writes them so): they read
// the low value and write their unread output in it, 4 bytes an element
// instead of the Cast's 6 and their own 8. Where the input is instead a
// product of two such Casts that only the LayerNormalization reads (a
// BatchNorm backward's g·x̂/8), the product is taken in the low type and
// read so: 10 bytes an element instead of 20. It returns the number
// rewritten; the float32 copies nothing reads any more are left to Prune.
func LowRowStatistics(g *graph.Graph, low dtype.DType, kernels Kernels) int {
	if kernels == nil || low == 0 {
		return 0
	}
	producers, consumers, outputs := g.Producers(), g.Consumers(), g.OutputSet()
	b := graph.NewBuilder(g, "autocast/")
	lowCopy := map[string]string{}
	before := map[*graph.Node][]*graph.Node{}
	rewritten := 0
	for _, n := range slices.Clone(g.Nodes) {
		if x, ok := RowStatistics(g, producers, consumers, outputs, n, low); ok && kernels(n, low) {
			n.Inputs[0] = x
		} else if mul := RowProduct(g, producers, consumers, outputs, n); mul != nil && kernels(n, low) && kernels(mul, low) {
			l, r := lowSource(g, producers, mul.Input(0), low), lowSource(g, producers, mul.Input(1), low)
			if l == "" || r == "" {
				continue
			}
			mul.Inputs = []string{l, r}
			setType(g, mul.Outputs[0], low)
		} else {
			continue
		}
		for i := 1; i < len(n.Inputs); i++ {
			v := n.Inputs[i]
			if v == "" {
				continue
			}
			c, done := lowCopy[v]
			if !done {
				at := len(g.Nodes)
				c = b.Cast(v, low)
				before[n] = append(before[n], g.Nodes[at:]...)
				g.Nodes = g.Nodes[:at]
				lowCopy[v] = c
			}
			n.Inputs[i] = c
		}
		setType(g, n.Outputs[0], low)
		rewritten++
	}
	if rewritten > 0 {
		g.Nodes = rewired(g.Nodes, nil, nil, before)
	}
	return rewritten
}

// setType records v's element type as dt.
func setType(g *graph.Graph, v string, dt dtype.DType) {
	i := g.Info(v)
	i.DType = dt
	g.Infos[v] = i
}

// statisticsOnly reports whether n is a LayerNormalization whose
// normalised output nothing reads and no graph output is.
func statisticsOnly(consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node) bool {
	return n.Op == "LayerNormalization" && n.Domain == "" && len(n.Outputs) >= 3 && !outputs[n.Outputs[0]] && len(consumers[n.Outputs[0]]) == 0
}

// RowStatistics reports whether n is a LayerNormalization that only
// computes statistics (statisticsOnly) over a float32 Cast of a value in
// low, which it returns: the pattern LowRowStatistics rewrites, which
// step-time plans ask of graphs built for a CPU.
func RowStatistics(g *graph.Graph, producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node, low dtype.DType) (string, bool) {
	if !statisticsOnly(consumers, outputs, n) {
		return "", false
	}
	x := lowSource(g, producers, n.Input(0), low)
	return x, x != ""
}

// RowProduct returns the Mul whose product n, a LayerNormalization that
// only computes statistics, reads, where nothing else reads it; nil
// otherwise. LowRowStatistics takes it in the low type where both its
// operands are float32 Casts of low values; step-time plans ask it of
// graphs built for a CPU, whose operands are typed otherwise.
func RowProduct(g *graph.Graph, producers map[string]*graph.Node, consumers map[string][]*graph.Node, outputs map[string]bool, n *graph.Node) *graph.Node {
	if !statisticsOnly(consumers, outputs, n) {
		return nil
	}
	p := producers[n.Input(0)]
	if p == nil || p.Op != "Mul" || p.Domain != "" || len(p.Inputs) != 2 || len(p.Outputs) != 1 || outputs[p.Outputs[0]] || len(consumers[p.Outputs[0]]) != 1 {
		return nil
	}
	return p
}
