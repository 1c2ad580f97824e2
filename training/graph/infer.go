package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// infer sets the facts of n's outputs from its inputs' facts. Ops it does not
// know leave their outputs unknown (value_info from the file may fill in).
func (g *Graph) infer(n *Node) {
	defer func() {
		// A malformed node (an axis out of range...) leaves its outputs
		// unknown here; ONNX Runtime reports it properly when loading.
		if recover() != nil {
			for _, o := range n.Outputs {
				if o != "" {
					g.Infos[o] = Info{DType: g.Infos[o].DType}
				}
			}
		}
	}()
	in := func(i int) Info { return g.Infos[n.Input(i)] }
	set := func(i int, info Info) {
		if o := n.Output(i); o != "" {
			g.Infos[o] = info
		}
	}
	x := in(0)
	same := func() { set(0, x) }
	shaped := func(dt dtype.DType, shape []int64) { set(0, Info{DType: dt, Known: true, Shape: shape}) }
	switch n.Op {
	case "Relu", "Sigmoid", "Tanh", "Exp", "Log", "Sqrt", "Neg", "Abs", "Sign", "Identity",
		"Softmax", "LogSoftmax", "Reciprocal", "Erf", "LeakyRelu", "Elu", "Floor", "Ceil", "Round", "Clip",
		"BatchNormalization", "BatchNormTraining", "LayerNormalization", "Dropout", "Softplus", "Gelu", "FastGelu", "Sin", "Cos",
		"InstanceNormalization", "GroupNormalization", "Trilu", "StopGradient", "UpdateBuffer", "TrainingOnly", "Not", "Celu", "Selu", "HardSigmoid", "HardSwish", "Mish", "Softsign",
		"ThresholdedRelu", "Shrink", "PRelu", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
		"LRN", "LpNormalization", "MeanVarianceNormalization", "Hardmax", "CumSum":
		same()
		if n.Op == "BatchNormalization" && len(n.Outputs) > 1 {
			set(1, in(3))
			set(2, in(4))
		}
		if n.Op == "Dropout" && len(n.Outputs) > 1 {
			set(1, Info{DType: dtype.Bool, Known: x.Known, Shape: x.Shape})
		}
	case "Cast":
		set(0, Info{DType: dtype.DType(n.Int("to", 0)), Known: x.Known, Shape: x.Shape})
	case "Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Where", "Mod", "Xor":
		infos := make([]Info, len(n.Inputs))
		for i := range n.Inputs {
			infos[i] = in(i)
		}
		dt := x.DType
		switch n.Op {
		case "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And", "Or", "Xor":
			dt = dtype.Bool
		case "Where":
			dt = in(1).DType
		}
		if s, ok := Broadcast(infos...); ok {
			shaped(dt, s)
		} else {
			set(0, Info{DType: dt})
		}
	case "MatMul", "FusedMatMul":
		a, b := x, in(1)
		if !a.Known || !b.Known || a.Rank() == 0 || b.Rank() == 0 {
			set(0, Info{DType: a.DType})
			break
		}
		as, bs := slices.Clone(a.Shape), slices.Clone(b.Shape)
		if n.Op == "FusedMatMul" {
			if n.Int("transA", 0) == 1 && len(as) >= 2 {
				as[len(as)-1], as[len(as)-2] = as[len(as)-2], as[len(as)-1]
			}
			if n.Int("transB", 0) == 1 && len(bs) >= 2 {
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
			set(0, Info{DType: a.DType})
			break
		}
		out := append(batch, as[len(as)-2], bs[len(bs)-1])
		if len(a.Shape) == 1 {
			out = slices.Delete(out, len(out)-2, len(out)-1)
		}
		if len(b.Shape) == 1 {
			out = out[:len(out)-1]
		}
		shaped(a.DType, out)
	case "Gemm":
		a, b := x, in(1)
		if a.Rank() != 2 || b.Rank() != 2 {
			set(0, Info{DType: a.DType})
			break
		}
		m, k := a.Shape[0], a.Shape[1]
		if n.Int("transA", 0) == 1 {
			m = k
		}
		nn := b.Shape[1]
		if n.Int("transB", 0) == 1 {
			nn = b.Shape[0]
		}
		shaped(a.DType, []int64{m, nn})
	case "Conv", "ConvTranspose", "MaxPool", "AveragePool":
		g.inferWindow(n)
	case "GlobalAveragePool", "GlobalMaxPool":
		if x.Known {
			s := slices.Clone(x.Shape)
			for i := 2; i < len(s); i++ {
				s[i] = 1
			}
			shaped(x.DType, s)
		} else {
			same()
		}
	case "Flatten":
		if !x.Known {
			set(0, Info{DType: x.DType})
			break
		}
		ax := n.Int("axis", 1)
		if ax < 0 {
			ax += int64(len(x.Shape))
		}
		shaped(x.DType, []int64{prod(x.Shape[:ax]), prod(x.Shape[ax:])})
	case "Reshape":
		target, ok := g.ConstInts(n.Input(1))
		if src, isShape := g.shapeOf[n.Input(1)]; !ok && isShape && g.Infos[src].Known {
			// Reshape(y, Shape(x)), as exporters write "view as x": x's
			// facts, symbolic dimensions included.
			shaped(x.DType, slices.Clone(g.Infos[src].Shape))
			break
		}
		if !ok {
			si := in(1)
			if si.Static() && len(si.Shape) == 1 && si.Shape[0] <= maxRank {
				shaped(x.DType, unknownDims(si.Shape[0]))
			} else {
				set(0, Info{DType: x.DType})
			}
			break
		}
		s := slices.Clone(target)
		known := int64(1)
		neg := -1
		for i, d := range s {
			switch {
			case d == 0 && n.Int("allowzero", 0) == 0:
				if x.Known && i < len(x.Shape) {
					s[i] = x.Shape[i]
				} else {
					s[i] = -1
				}
			case d == -1:
				neg = i
			}
			if s[i] >= 0 {
				known *= s[i]
			} else if i != neg {
				known = -1
			}
		}
		if neg >= 0 {
			s[neg] = -1
			if tot := prod(x.Shape); x.Static() && known > 0 {
				s[neg] = tot / known
			} else if x.Known && n.Int("allowzero", 0) == 0 {
				// Unknown dimensions of x all copied by 0s (the batch in
				// Reshape(x, [0, groups, -1])) cancel out.
				rest, div := int64(1), int64(1)
				for i, d := range x.Shape {
					if i < len(target) && target[i] == 0 {
						continue
					}
					if d < 0 {
						rest = -1
						break
					}
					rest *= d
				}
				for i, d := range target {
					if d > 0 && i != neg {
						div *= d
					}
				}
				if rest > 0 && rest%div == 0 {
					s[neg] = rest / div
				}
			}
		}
		shaped(x.DType, s)
	case "Transpose":
		if !x.Known {
			same()
			break
		}
		perm := n.Ints("perm")
		if perm == nil {
			for i := len(x.Shape) - 1; i >= 0; i-- {
				perm = append(perm, int64(i))
			}
		}
		s := make([]int64, len(perm))
		for i, p := range perm {
			s[i] = x.Shape[p]
		}
		shaped(x.DType, s)
	case "Concat":
		if !x.Known {
			set(0, Info{DType: x.DType})
			break
		}
		ax := int(n.Int("axis", 0))
		if ax < 0 {
			ax += len(x.Shape)
		}
		s := slices.Clone(x.Shape)
		for i := 1; i < len(n.Inputs); i++ {
			o := in(i)
			if !o.Known || s[ax] < 0 || o.Shape[ax] < 0 {
				s[ax] = -1
			} else {
				s[ax] += o.Shape[ax]
			}
		}
		shaped(x.DType, s)
	case "ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL2", "ReduceSumSquare", "ReduceL1", "ReduceLogSum", "ReduceLogSumExp":
		axes, ok := g.ReduceAxes(n)
		if !ok || !x.Known {
			set(0, Info{DType: x.DType})
			break
		}
		keep := n.Int("keepdims", 1) == 1
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
		shaped(x.DType, s)
	case "Shape":
		if n.Int("start", 0) == 0 && n.Attr("end") == nil {
			if g.shapeOf == nil {
				g.shapeOf = map[string]string{}
			}
			g.shapeOf[n.Output(0)] = n.Input(0)
		}
		if x.Known {
			shaped(dtype.Int64, []int64{int64(len(x.Shape))})
		} else {
			set(0, Info{DType: dtype.Int64, Known: true, Shape: []int64{-1}})
		}
	case "Size":
		shaped(dtype.Int64, []int64{})
	case "Unsqueeze", "Squeeze":
		var axes []int64
		var ok bool
		if n.Input(1) != "" {
			axes, ok = g.ConstInts(n.Input(1))
		} else {
			axes, ok = n.Ints("axes"), n.Op == "Unsqueeze" || n.Attr("axes") != nil
		}
		if !x.Known || !ok {
			set(0, Info{DType: x.DType})
			break
		}
		if n.Op == "Unsqueeze" {
			r := len(x.Shape) + len(axes)
			norm := normAxes(axes, r)
			var s []int64
			j := 0
			for i := 0; i < r; i++ {
				if slices.Contains(norm, int64(i)) {
					s = append(s, 1)
				} else {
					s = append(s, x.Shape[j])
					j++
				}
			}
			shaped(x.DType, s)
		} else {
			norm := normAxes(axes, len(x.Shape))
			s := []int64{}
			for i, d := range x.Shape {
				if (len(norm) == 0 && d == 1) || slices.Contains(norm, int64(i)) {
					continue
				}
				s = append(s, d)
			}
			shaped(x.DType, s)
		}
	case "Expand":
		target, ok := g.ConstInts(n.Input(1))
		if !ok {
			si := in(1)
			if si.Static() && len(si.Shape) == 1 && x.Known && int(si.Shape[0]) >= len(x.Shape) && si.Shape[0] <= maxRank {
				shaped(x.DType, unknownDims(si.Shape[0]))
			} else {
				set(0, Info{DType: x.DType})
			}
			break
		}
		if s, ok := Broadcast(x, Info{Known: true, Shape: target}); ok {
			shaped(x.DType, s)
		} else {
			set(0, Info{DType: x.DType})
		}
	case "ConstantOfShape":
		dt := dtype.Float32
		if a := n.Attr("value"); a != nil && a.GetT() != nil {
			dt = dtype.DType(a.GetT().GetDataType())
		}
		if s, ok := g.ConstInts(n.Input(0)); ok {
			shaped(dt, s)
		} else if si := in(0); si.Static() && len(si.Shape) == 1 && si.Shape[0] <= maxRank {
			shaped(dt, unknownDims(si.Shape[0]))
		} else {
			set(0, Info{DType: dt})
		}
	case "Constant":
		if t, ok := g.Const(n.Output(0)); ok {
			d := slices.Clone(t.GetDims())
			if d == nil {
				d = []int64{}
			}
			shaped(dtype.DType(t.GetDataType()), d)
		}
	case "Gather":
		idx := in(1)
		if !x.Known || !idx.Known {
			set(0, Info{DType: x.DType})
			break
		}
		ax := int(n.Int("axis", 0))
		if ax < 0 {
			ax += len(x.Shape)
		}
		s := append(append(slices.Clone(x.Shape[:ax]), idx.Shape...), x.Shape[ax+1:]...)
		shaped(x.DType, s)
	case "Resize", "Pad", "Einsum", "OneHot":
		g.inferMore(n)
	case "IsNaN", "IsInf":
		set(0, Info{DType: dtype.Bool, Known: x.Known, Shape: slices.Clone(x.Shape)})
	case "TopK", "Tile", "DepthToSpace", "SpaceToDepth", "GatherND":
		g.inferRearrange(n)
	case "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss":
		// The loss per position (reduction none) or a scalar; SCE's second
		// output is the log-probability, shaped as the scores.
		if n.String("reduction", "mean") == "none" {
			t := in(1)
			set(0, Info{DType: x.DType, Known: t.Known, Shape: slices.Clone(t.Shape)})
		} else {
			shaped(x.DType, []int64{})
		}
		set(1, x)
	case "CastLike":
		set(0, Info{DType: in(1).DType, Known: x.Known, Shape: slices.Clone(x.Shape)})
	case "GridSample":
		// [N, C] of X, then the grid's sampled positions (all but its
		// last axis, which holds the coordinates).
		grid := in(1)
		if x.Known && grid.Known && x.Rank() >= 2 && grid.Rank() == x.Rank() {
			shaped(x.DType, append([]int64{x.Shape[0], x.Shape[1]}, grid.Shape[1:grid.Rank()-1]...))
		} else {
			set(0, Info{DType: x.DType})
		}
	case "GatherElements", "ScatterElements", "ScatterND":
		if n.Op == "GatherElements" {
			set(0, Info{DType: x.DType, Known: in(1).Known, Shape: in(1).Shape})
		} else {
			same()
		}
	case "Slice":
		if x.Known {
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
			for i, a := range normAxes(axes, len(s)) {
				if !okA || !okS || !okE || !okT || s[a] < 0 {
					s[a] = -1
					continue
				}
				step := int64(1)
				if steps != nil {
					step = steps[i]
				}
				st, en := clampIdx(starts[i], s[a], step), clampIdx(ends[i], s[a], step)
				if step > 0 {
					s[a] = max(0, (en-st+step-1)/step)
				} else {
					s[a] = max(0, (st-en-step-1)/(-step))
				}
			}
			shaped(x.DType, s)
		} else {
			set(0, Info{DType: x.DType})
		}
	case "Split":
		for i := range n.Outputs {
			set(i, Info{DType: x.DType, Known: x.Known, Shape: nil})
		}
		if !x.Known {
			break
		}
		ax := int(n.Int("axis", 0))
		if ax < 0 {
			ax += len(x.Shape)
		}
		sizes, ok := g.ConstInts(n.Input(1))
		if n.Input(1) == "" && x.Shape[ax] >= 0 {
			// Equal parts (the last one smaller when num_outputs does
			// not divide the axis, from opset 18).
			k := int64(len(n.Outputs))
			part := (x.Shape[ax] + k - 1) / k
			for i := range k {
				sizes = append(sizes, min(part, x.Shape[ax]-i*part))
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
			set(i, Info{DType: x.DType, Known: true, Shape: s})
		}
	case "Range":
		set(0, Info{DType: x.DType, Known: true, Shape: []int64{-1}})
	case "ArgMax", "ArgMin":
		if !x.Known {
			set(0, Info{DType: dtype.Int64})
			break
		}
		ax := int(n.Int("axis", 0))
		if ax < 0 {
			ax += len(x.Shape)
		}
		s := slices.Clone(x.Shape)
		if n.Int("keepdims", 1) == 1 {
			s[ax] = 1
		} else {
			s = slices.Delete(s, ax, ax+1)
		}
		shaped(dtype.Int64, s)
	}
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

// inferWindow handles Conv, ConvTranspose and the pools, whose spatial output
// sizes follow from kernel, strides, pads and dilations.
func (g *Graph) inferWindow(n *Node) {
	x := g.Infos[n.Input(0)]
	out := func(s []int64) {
		g.Infos[n.Output(0)] = Info{DType: x.DType, Known: s != nil, Shape: s}
		if n.Op == "MaxPool" && n.Output(1) != "" {
			g.Infos[n.Output(1)] = Info{DType: dtype.Int64, Known: s != nil, Shape: s}
		}
	}
	if !x.Known || len(x.Shape) < 3 {
		out(nil)
		return
	}
	w := Window(g, n)
	s := []int64{x.Shape[0], x.Shape[1]}
	switch n.Op {
	case "Conv":
		wi := g.Infos[n.Input(1)]
		if wi.Known {
			s[1] = wi.Shape[0]
		} else {
			s[1] = -1
		}
	case "ConvTranspose":
		wi := g.Infos[n.Input(1)]
		if wi.Known {
			s[1] = wi.Shape[1] * n.Int("group", 1)
		} else {
			s[1] = -1
		}
	}
	for i := range w.Kernel {
		d := x.Shape[2+i]
		if d < 0 || w.Kernel[i] < 0 {
			s = append(s, -1)
			continue
		}
		if n.Op == "ConvTranspose" {
			if os := n.Ints("output_shape"); os != nil {
				s = append(s, os[len(os)-len(w.Kernel)+i])
				continue
			}
			op := int64(0)
			if o := n.Ints("output_padding"); o != nil {
				op = o[i]
			}
			s = append(s, w.Strides[i]*(d-1)+op+(w.Kernel[i]-1)*w.Dilations[i]+1-w.Pads[i]-w.Pads[i+len(w.Kernel)])
			continue
		}
		pads := w.Pads
		if w.AutoPad != "NOTSET" && w.AutoPad != "VALID" {
			s = append(s, (d+w.Strides[i]-1)/w.Strides[i])
			continue
		}
		eff := (w.Kernel[i]-1)*w.Dilations[i] + 1
		num := d + pads[i] + pads[i+len(w.Kernel)] - eff
		if w.CeilMode {
			o := (num+w.Strides[i]-1)/w.Strides[i] + 1
			// The last window must start inside the input or left padding.
			if (o-1)*w.Strides[i] >= d+pads[i] {
				o--
			}
			s = append(s, o)
		} else {
			s = append(s, num/w.Strides[i]+1)
		}
	}
	out(s)
}

// WindowAttrs are a Conv's or pool's window settings with defaults filled in.
type WindowAttrs struct {
	Kernel, Strides, Dilations []int64
	Pads                       []int64 // begins then ends, as ONNX writes them
	AutoPad                    string
	CeilMode                   bool
}

// Window reads a windowed node's attributes; the kernel of a Conv comes from
// its weight's shape when the attribute is absent (-1 where unknown).
func Window(g *Graph, n *Node) WindowAttrs {
	w := WindowAttrs{Kernel: n.Ints("kernel_shape"), AutoPad: n.String("auto_pad", "NOTSET"), CeilMode: n.Int("ceil_mode", 0) == 1}
	if w.Kernel == nil {
		wi := g.Infos[n.Input(1)]
		if wi.Known {
			w.Kernel = slices.Clone(wi.Shape[2:])
		} else if xi := g.Infos[n.Input(0)]; xi.Known {
			for range xi.Shape[2:] {
				w.Kernel = append(w.Kernel, -1)
			}
		}
	}
	k := len(w.Kernel)
	fill := func(v []int64, def int64, n int) []int64 {
		if v != nil {
			return v
		}
		v = make([]int64, n)
		for i := range v {
			v[i] = def
		}
		return v
	}
	w.Strides = fill(n.Ints("strides"), 1, k)
	w.Dilations = fill(n.Ints("dilations"), 1, k)
	w.Pads = fill(slices.Clone(n.Ints("pads")), 0, 2*k)
	return w
}

// ResolvePads turns auto_pad SAME_UPPER/SAME_LOWER into explicit pads for
// the given input spatial sizes (which must be static), as ONNX defines them.
func (w *WindowAttrs) ResolvePads(spatial []int64) bool {
	if w.AutoPad != "SAME_UPPER" && w.AutoPad != "SAME_LOWER" {
		if w.AutoPad == "VALID" {
			for i := range w.Pads {
				w.Pads[i] = 0
			}
		}
		w.AutoPad = "NOTSET"
		return true
	}
	k := len(w.Kernel)
	for i := 0; i < k; i++ {
		d := spatial[i]
		if d < 0 {
			return false
		}
		o := (d + w.Strides[i] - 1) / w.Strides[i]
		total := max(0, (o-1)*w.Strides[i]+(w.Kernel[i]-1)*w.Dilations[i]+1-d)
		small, big := total/2, total-total/2
		if w.AutoPad == "SAME_UPPER" {
			w.Pads[i], w.Pads[i+k] = small, big
		} else {
			w.Pads[i], w.Pads[i+k] = big, small
		}
	}
	w.AutoPad = "NOTSET"
	return true
}

// Broadcast returns the numpy-broadcast shape of the inputs; a dimension
// unknown in one and >1 in another takes the known one, and unknown stays
// unknown otherwise.
func Broadcast(infos ...Info) ([]int64, bool) {
	r := 0
	for _, i := range infos {
		if !i.Known {
			return nil, false
		}
		r = max(r, len(i.Shape))
	}
	out := make([]int64, r)
	for k := range out {
		out[k] = 1
	}
	for _, i := range infos {
		off := r - len(i.Shape)
		for k, d := range i.Shape {
			o := out[off+k]
			switch {
			case d == 1:
			case o == 1:
				out[off+k] = d
			case d == -1 || o == -1:
				out[off+k] = max(d, o) // a known dimension > 1 wins
			case d != o:
				return nil, false
			}
		}
	}
	return out, true
}

// ReduceAxes returns a Reduce* node's axes (normalised, sorted; empty means
// all unless noop_with_empty_axes), from its attribute or, from opset 18 (13
// for ReduceSum), its second input.
func (g *Graph) ReduceAxes(n *Node) ([]int64, bool) {
	axes := n.Ints("axes")
	if n.Input(1) != "" {
		var ok bool
		if axes, ok = g.ConstInts(n.Input(1)); !ok {
			return nil, false
		}
	}
	x := g.Infos[n.Input(0)]
	if len(axes) == 0 {
		if n.Int("noop_with_empty_axes", 0) == 1 {
			return nil, false
		}
		return []int64{}, true
	}
	if !x.Known {
		return nil, false
	}
	a := normAxes(axes, len(x.Shape))
	slices.Sort(a)
	return a, true
}

func normAxes(axes []int64, rank int) []int64 {
	out := make([]int64, len(axes))
	for i, a := range axes {
		if a < 0 {
			a += int64(rank)
		}
		out[i] = a
	}
	return out
}

func prod(s []int64) int64 {
	p := int64(1)
	for _, d := range s {
		if d < 0 {
			return -1
		}
		p *= d
	}
	return p
}

// maxRank bounds the ranks inference makes up from a declared shape (a
// shape input's length): a model file could declare [1<<40] and have
// unknownDims allocate for it. No real tensor comes near it.
const maxRank = 64

// unknownDims is a shape of known rank whose dimensions are all unknown: what
// a shape given at run time tells before it is seen.
func unknownDims(rank int64) []int64 {
	s := make([]int64, rank)
	for i := range s {
		s[i] = -1
	}
	return s
}
