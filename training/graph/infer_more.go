package graph

import (
	"math"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/ort"
)

// inferMore handles Resize, Pad, Einsum and OneHot, whose output shapes
// follow from constant inputs or an equation.
func (g *Graph) inferMore(n *Node) {
	x := g.Infos[n.Input(0)]
	set := func(dt ort.DType, s []int64) {
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
