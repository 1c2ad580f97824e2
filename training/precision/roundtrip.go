package precision

import (
	"math"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// keepsValues are ops whose float outputs hold only values found in their
// float inputs (or zero): a value a low type holds exactly stays so.
// Where's condition, Gather's indices, Slice's bounds and the like are not
// float and do not count; Pad also reads its constant, checked as any
// other input.
var keepsValues = map[string]bool{
	"Identity": true, "Reshape": true, "Flatten": true, "Squeeze": true, "Unsqueeze": true, "Transpose": true,
	"Slice": true, "Gather": true, "GatherElements": true, "GatherND": true, "Expand": true, "Tile": true,
	"Concat": true, "Split": true, "Pad": true, "DepthToSpace": true, "SpaceToDepth": true,
	"Relu": true, "Neg": true, "Abs": true, "Max": true, "Min": true, "Where": true,
	"MaxPool": true, "GlobalMaxPool": true, "ReduceMax": true, "ReduceMin": true,
}

// DropExactRoundTrips removes the rounding pairs of an emulated graph
// (a float32 value cast to the low type and back) whose value the low
// type already holds exactly, so the pair changes nothing: a ReLU of a
// rounded BatchNorm output rounded again for the next convolution, or the
// ReLU gradient's Where of a rounded gradient. Their readers read the
// float32 value itself. A pair is kept where that value is not read at or
// just before the pair's place in the graph anyway (a copy the backward
// recomputes from the kept low value), so the float32 value is not kept
// across the forward pass in the low copy's stead (ResNet-50's emulated
// step peak grew 0.6 %), and where it makes a graph output. It returns how many pairs were removed;
// the Casts nothing reads any more are left to Prune.
func DropExactRoundTrips(g *graph.Graph) int {
	exact := map[string]dtype.DType{} // float32 values the type holds exactly
	producers := g.Producers()
	lastRead := map[string]int{}
	for i, n := range g.Nodes {
		for _, in := range n.Inputs {
			lastRead[in] = i
		}
	}
	for _, o := range g.Outputs {
		lastRead[o] = len(g.Nodes)
	}
	constExact := func(v string) dtype.DType {
		t := g.Initializers[v]
		if t == nil || graph.Numel(t) > 64 || g.Info(v).DType != dtype.Float32 {
			return 0
		}
		vals, err := graph.FloatData(t)
		if err != nil {
			return 0
		}
		f16, bf16 := true, true
		for _, x := range vals {
			f := float32(x)
			f16 = f16 && sameBits(dtype.ToFloat16(f).Float32(), f)
			bf16 = bf16 && sameBits(dtype.ToBFloat16(f).Float32(), f)
		}
		switch {
		case f16 && bf16:
			return anyLow
		case f16:
			return dtype.Float16
		case bf16:
			return dtype.BFloat16
		}
		return 0
	}
	alias := map[string]string{}
	dropped := 0
	for i, n := range g.Nodes {
		for k, in := range n.Inputs {
			if a, ok := alias[in]; ok {
				n.Inputs[k] = a
			}
		}
		if n.Op == "Cast" && n.Domain == "" {
			x := n.Input(0)
			from := g.Info(x).DType
			if dtype.DType(n.Int("to", 0)) != dtype.Float32 || from != dtype.Float16 && from != dtype.BFloat16 {
				continue
			}
			exact[n.Outputs[0]] = from
			// x = Cast(v, low) of a float32 v the low type holds: the
			// pair gives back v, which is read here or later anyway.
			c := producers[x]
			if c == nil || c.Op != "Cast" || c.Domain != "" {
				continue
			}
			v := c.Input(0)
			if holds(exact[v], from) && lastRead[v] >= i-1 && lastRead[n.Outputs[0]] < len(g.Nodes) {
				alias[n.Outputs[0]] = v
				lastRead[v] = max(lastRead[v], lastRead[n.Outputs[0]])
				dropped++
			}
			continue
		}
		if !keepsValues[n.Op] || n.Domain != "" {
			continue
		}
		var low dtype.DType = anyLow
		for k, in := range n.Inputs {
			if in == "" || !g.Info(in).Float() || !floatOperand(n.Op, k) {
				continue
			}
			t, ok := exact[in]
			if !ok {
				t = constExact(in)
			}
			if low = meet(low, t); low == 0 {
				break
			}
		}
		if low == 0 || low == anyLow {
			continue
		}
		for _, o := range n.Outputs {
			if o != "" && g.Info(o).DType == dtype.Float32 {
				exact[o] = low
			}
		}
	}
	return dropped
}

// anyLow marks a value both low types hold (a constant zero).
const anyLow dtype.DType = -1

// holds reports whether a value exact in have is exact in want.
func holds(have, want dtype.DType) bool { return have == want || have == anyLow }

// meet is the low type in which values exact in a and in b both are.
func meet(a, b dtype.DType) dtype.DType {
	switch {
	case a == anyLow:
		return b
	case b == anyLow || a == b:
		return a
	}
	return 0
}

// floatOperand reports whether input k of op carries the values copied to
// the output (rather than a condition, indices, shape or bounds).
func floatOperand(op string, k int) bool {
	switch op {
	case "Where":
		return k == 1 || k == 2
	case "Pad":
		return k == 0 || k == 2
	case "Reshape", "Expand", "Tile", "Slice", "Gather", "GatherElements", "GatherND", "Squeeze", "Unsqueeze", "Split", "ReduceMax", "ReduceMin":
		return k == 0
	}
	return true
}

func sameBits(a, b float32) bool { return math.Float32bits(a) == math.Float32bits(b) }
