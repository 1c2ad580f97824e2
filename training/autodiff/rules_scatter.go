package autodiff

import "github.com/ortrain/ortrain/training/graph"

// Rules for the element-indexed gathers and scatters, TopK, Tile and the
// depth/space rearrangements. A gather's gradient scatters with reduction
// add (repeated indices add up); a scatter's gradient gathers what each
// update became and zeroes what it overwrote.

func init() {
	for op, r := range map[string]Rule{
		"GatherElements": func(b *B, n *N, dy []string, need []bool) []string {
			dx := make([]string, len(n.Inputs))
			if need[0] && dy[0] != "" {
				dx[0] = b.Op("ScatterElements", []string{b.ZerosLike(n.Inputs[0]), n.Inputs[1], dy[0]},
					graph.AInt("axis", n.Int("axis", 0)), graph.AString("reduction", "add"))
			}
			return dx
		},
		"GatherND": func(b *B, n *N, dy []string, need []bool) []string {
			dx := make([]string, len(n.Inputs))
			if need[0] && dy[0] != "" {
				if n.Int("batch_dims", 0) != 0 {
					b.Fail("GatherND with batch_dims has no gradient rule")
					return dx
				}
				dx[0] = b.Op("ScatterND", []string{b.ZerosLike(n.Inputs[0]), n.Inputs[1], dy[0]}, graph.AString("reduction", "add"))
			}
			return dx
		},
		"ScatterElements": scatterGrad("ScatterElements", "GatherElements"),
		"ScatterND":       scatterGrad("ScatterND", "GatherND"),
		"TopK": func(b *B, n *N, dy []string, need []bool) []string {
			// The values output only; the indices carry no gradient.
			dx := make([]string, len(n.Inputs))
			if need[0] && dy[0] != "" {
				dx[0] = b.Op("ScatterElements", []string{b.ZerosLike(n.Inputs[0]), n.Outputs[1], dy[0]},
					graph.AInt("axis", n.Int("axis", -1)), graph.AString("reduction", "add"))
			}
			return dx
		},
		"Tile":         unary(tileGrad),
		"SpaceToDepth": unary(func(b *B, n *N, dy string) string { return depthToSpace(b, dy, n.Int("blocksize", 1), "DCR") }),
		"DepthToSpace": unary(func(b *B, n *N, dy string) string {
			if n.String("mode", "DCR") == "DCR" {
				return b.Op("SpaceToDepth", []string{dy}, graph.AInt("blocksize", n.Int("blocksize", 1)))
			}
			return crdInverse(b, n, dy)
		}),
	} {
		rules[op] = r
	}
}

// scatterGrad: with reduction none the data's gradient is dY where no
// update landed, and each update's is dY where it landed; with add, the
// data's is all of dY. Other reductions (mul, max, min) are refused.
func scatterGrad(op, gather string) Rule {
	return func(b *B, n *N, dy []string, need []bool) []string {
		dx := make([]string, len(n.Inputs))
		g := dy[0]
		if g == "" {
			return dx
		}
		red := n.String("reduction", "none")
		if red != "none" && red != "add" {
			b.Fail("%s with reduction %s has no gradient rule", op, red)
			return dx
		}
		idx, upd := n.Inputs[1], n.Inputs[2]
		var axis []*graph.Attr
		if op == "ScatterElements" {
			axis = []*graph.Attr{graph.AInt("axis", n.Int("axis", 0))}
		}
		if need[0] {
			dx[0] = g
			if red == "none" {
				dx[0] = b.Op(op, []string{g, idx, b.ZerosLike(upd)}, axis...)
			}
		}
		if need[2] {
			dx[2] = b.Op(gather, []string{g, idx}, axis...)
		}
		return dx
	}
}

// tileGrad sums dY over the copies: [r0·d0, r1·d1, ...] reshaped to
// [r0, d0, r1, d1, ...] and summed over the r axes. The input's sizes and
// the repeats must be known.
func tileGrad(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	reps, ok := b.G.ConstInts(n.Inputs[1])
	if !xi.Static() || !ok || len(reps) != len(xi.Shape) {
		return b.Fail("Tile needs static input sizes and constant repeats, has %v", xi)
	}
	var split, axes []int64
	for i, d := range xi.Shape {
		split = append(split, reps[i], d)
		axes = append(axes, int64(2*i))
	}
	return b.ReduceSum(b.Reshape(dy, b.Ints(split...)), false, axes...)
}

// depthToSpace is ONNX DepthToSpace in mode over dy.
func depthToSpace(b *B, dy string, blocksize int64, mode string) string {
	return b.Op("DepthToSpace", []string{dy}, graph.AInt("blocksize", blocksize), graph.AString("mode", mode))
}

// crdInverse undoes DepthToSpace in CRD mode: x [N, C, H, W] was viewed
// as [N, C/b², b, b, H, W] and permuted to [N, C/b², H, b, W, b]; dY
// goes back through the inverse permutation.
func crdInverse(b *B, n *N, dy string) string {
	xi := b.Info(x(n))
	bs := n.Int("blocksize", 1)
	if xi.Rank() != 4 || xi.Shape[1] < 0 || xi.Shape[2] < 0 || xi.Shape[3] < 0 {
		return b.Fail("DepthToSpace in CRD mode needs static channels and sizes, has %v", xi)
	}
	c, h, w := xi.Shape[1], xi.Shape[2], xi.Shape[3]
	v := b.Reshape(dy, b.Ints(0, c/(bs*bs), h, bs, w, bs))
	v = b.Transpose(v, 0, 1, 3, 5, 2, 4)
	return b.Reshape(v, b.Ints(0, c, h, w))
}
