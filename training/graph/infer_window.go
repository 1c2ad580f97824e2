package graph

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
)

// inferWindow handles Conv, ConvTranspose and the pools, whose spatial output
// sizes follow from kernel, strides, pads and dilations.
func inferWindow(c *inferCtx) {
	n, x := c.n, c.x
	out := func(s []int64) {
		c.set(0, Info{DType: x.DType, Known: s != nil, Shape: s})
		if n.Op == "MaxPool" {
			c.set(1, Info{DType: dtype.Int64, Known: s != nil, Shape: s})
		}
	}
	if !x.Known || len(x.Shape) < 3 {
		out(nil)
		return
	}
	w := Window(c.g, n)
	k := len(w.Kernel)
	// One kernel size, stride and dilation per spatial axis, and a pad at
	// each end of it; strides and dilations of at least 1.
	if k != len(x.Shape)-2 || len(w.Strides) != k || len(w.Dilations) != k || len(w.Pads) != 2*k ||
		slices.ContainsFunc(w.Strides, func(v int64) bool { return v < 1 }) ||
		slices.ContainsFunc(w.Dilations, func(v int64) bool { return v < 1 }) {
		out(nil)
		return
	}
	s := []int64{x.Shape[0], x.Shape[1]}
	var ck checked
	switch wi := c.in(1); n.Op {
	case "Conv":
		s[1] = -1
		if wi.Known {
			if len(wi.Shape) == 0 {
				out(nil)
				return
			}
			s[1] = wi.Shape[0]
		}
	case "ConvTranspose":
		s[1] = -1
		if wi.Known {
			if len(wi.Shape) < 2 {
				out(nil)
				return
			}
			if wi.Shape[1] >= 0 {
				s[1] = ck.mul(wi.Shape[1], n.Int("group", 1))
			}
		}
	}
	outShape, outPad := n.Ints("output_shape"), n.Ints("output_padding")
	if n.Op == "ConvTranspose" && (outShape != nil && len(outShape) < k || outPad != nil && len(outPad) != k) {
		out(nil)
		return
	}
	for i := range k {
		d := x.Shape[2+i]
		if d < 0 || w.Kernel[i] < 0 {
			s = append(s, -1)
			continue
		}
		stride, pads := w.Strides[i], ck.add(w.Pads[i], w.Pads[i+k])
		eff := ck.add(ck.mul(w.Kernel[i]-1, w.Dilations[i]), 1) // the dilated kernel's extent
		if n.Op == "ConvTranspose" {
			if outShape != nil {
				s = append(s, outShape[len(outShape)-k+i])
				continue
			}
			op := int64(0)
			if outPad != nil {
				op = outPad[i]
			}
			s = append(s, ck.sub(ck.add(ck.add(ck.mul(stride, d-1), op), eff), pads))
			continue
		}
		if w.AutoPad != "NOTSET" && w.AutoPad != "VALID" {
			s = append(s, ck.add(d, stride-1)/stride)
			continue
		}
		num := ck.sub(ck.add(d, pads), eff)
		if w.CeilMode {
			o := ck.add(num, stride-1)/stride + 1
			// The last window must start inside the input or left padding.
			if ck.mul(o-1, stride) >= ck.add(d, w.Pads[i]) {
				o--
			}
			s = append(s, o)
		} else {
			s = append(s, num/stride+1)
		}
	}
	if ck.over {
		out(nil)
		return
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
			if len(wi.Shape) >= 2 { // else a malformed weight: no kernel
				w.Kernel = slices.Clone(wi.Shape[2:])
			}
		} else if xi := g.Infos[n.Input(0)]; xi.Known && len(xi.Shape) >= 2 {
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
