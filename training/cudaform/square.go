package cudaform

import (
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/graph"
)

// FuseSquares rewrites a mean of squares, ReduceMean(Mul(d, d)) with the
// square read by nothing else (BatchNorm's and GroupNorm's variance), as
// ReduceSumSquare over the reduced axes whose sizes are known, scaled by
// one over their count, then ReduceMean over the others (the batch): the
// square is then formed in the reduction's registers instead of written
// and read back as an activation-sized tensor, one pass less per
// normalisation. Float32 and float64 only, whose partial sums keep their
// precision. On ONNX Runtime's CPU provider ReduceSumSquare sums less
// accurately (a torchvision model's BatchNorm gradients drifted from
// PyTorch's with it), so this is for CUDA graphs. It returns the number
// of means rewritten; SplitReductions, run after, finds nothing left to
// split in them.
func FuseSquares(g *graph.Graph) int {
	producers, consumers := g.Producers(), g.Consumers()
	outputs := g.OutputSet()
	fused := 0
	var out []*graph.Node
	dropped := map[*graph.Node]bool{}
	for _, n := range g.Nodes {
		if n.Op != "ReduceMean" || n.Domain != "" {
			out = append(out, n)
			continue
		}
		sq := producers[n.Input(0)]
		if sq == nil || sq.Op != "Mul" || sq.Domain != "" || sq.Input(0) != sq.Input(1) || len(consumers[sq.Outputs[0]]) != 1 || outputs[sq.Outputs[0]] {
			out = append(out, n)
			continue
		}
		d := g.Info(sq.Input(0))
		axes, ok := g.ReduceAxes(n)
		if !ok || !d.Known || (d.DType != dtype.Float32 && d.DType != dtype.Float64) {
			out = append(out, n)
			continue
		}
		if len(axes) == 0 { // every axis
			for i := range d.Shape {
				axes = append(axes, int64(i))
			}
		}
		var known, unknown []int64
		count := 1.0
		for _, a := range axes {
			if s := d.Shape[a]; s > 0 {
				known, count = append(known, a), count*float64(s)
			} else {
				unknown = append(unknown, a)
			}
		}
		if len(known) == 0 {
			out = append(out, n)
			continue
		}
		b := graph.NewBuilder(g, n.Name+"/")
		scale := b.Scalar(d.DType, 1/count)
		if b.Err != nil {
			out = append(out, n)
			continue
		}
		// The sum keeps or drops its axes as the mean did; a batch axis
		// after dropped ones moves down by their number.
		keep := n.Int("keepdims", 1)
		if keep == 0 {
			for i, a := range unknown {
				below := 0
				for _, k := range known {
					if k < a {
						below++
					}
				}
				unknown[i] = a - int64(below)
			}
		}
		sum := &graph.Node{Op: "ReduceSumSquare", Name: g.Fresh(n.Name + "/sumsquare"), Inputs: []string{sq.Input(0)},
			Outputs: []string{g.Fresh(n.Outputs[0] + "/sumsquare")}, Attrs: []*onnxpb.AttributeProto{graph.AInt("keepdims", keep)}}
		setAxes(b, sum, known)
		g.AddNode(sum)
		if len(unknown) == 0 {
			mean := &graph.Node{Op: "Mul", Name: g.Fresh(n.Name + "/mean"), Inputs: []string{sum.Outputs[0], scale}, Outputs: n.Outputs}
			out = append(out, sum, mean)
		} else {
			scaled := &graph.Node{Op: "Mul", Name: g.Fresh(n.Name + "/mean"), Inputs: []string{sum.Outputs[0], scale},
				Outputs: []string{g.Fresh(n.Outputs[0] + "/partial")}}
			g.AddNode(scaled)
			n.Inputs = []string{scaled.Outputs[0]}
			setAxes(b, n, unknown)
			out = append(out, sum, scaled, n)
		}
		dropped[sq] = true
		fused++
	}
	g.Nodes = slices.DeleteFunc(out, func(n *graph.Node) bool { return dropped[n] })
	return fused
}
