package autodiff

import (
	"fmt"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// UnrollRecurrent rewrites every LSTM, GRU and RNN node (ONNX's recurrent
// ops, which exporters write for torch.nn.LSTM, GRU and RNN) as the same
// recurrence written out step by step in elementary ops, which have
// gradient rules: stock ONNX Runtime has no gradient of its own for them.
// The sequence length must be fixed (the steps are unrolled); the input's
// projection is one MatMul over all steps, each step adds the hidden
// state's. Inference (the eval graph) keeps the native op.
//
// Padded sequences (sequence_lens) are masked as ONNX specifies: a step at
// or past a sequence's length keeps its state (so Y_h and Y_c are the
// states after its last step, the first one in reverse) and writes zeros
// to Y, and through the mask neither its input nor the weights receive
// gradient from it. What PyTorch never exports is refused with the node
// named: clip, activations other than the defaults, input_forget.
func UnrollRecurrent(g *graph.Graph) error {
	var rec []*graph.Node
	g.Nodes = slices.DeleteFunc(g.Nodes, func(n *graph.Node) bool {
		if n.Domain == "" && (n.Op == "LSTM" || n.Op == "GRU" || n.Op == "RNN") {
			rec = append(rec, n)
			return true
		}
		return false
	})
	if len(rec) == 0 {
		return nil
	}
	for _, n := range rec {
		if err := unroll(g, n); err != nil {
			return err
		}
	}
	return g.Sort()
}

// Unrolled reports whether UnrollRecurrent rewrites op.
func Unrolled(op string) bool {
	_, ok := cells[op]
	return ok
}

// cell describes one recurrent op: its gate count and default activations.
type cell struct {
	gates       int64
	activations []string // per direction
}

var cells = map[string]cell{
	"LSTM": {4, []string{"Sigmoid", "Tanh", "Tanh"}},
	"GRU":  {3, []string{"Sigmoid", "Tanh"}},
	"RNN":  {1, []string{"Tanh"}},
}

func unroll(g *graph.Graph, n *graph.Node) error {
	fail := func(format string, args ...any) error {
		return &RuleError{Node: fmt.Sprintf("%s node %q", n.Op, n.Name), Err: fmt.Errorf(format, args...)}
	}
	c := cells[n.Op]
	dirs := int64(1)
	switch d := n.String("direction", "forward"); d {
	case "forward", "reverse":
	case "bidirectional":
		dirs = 2
	default:
		return fail("direction %q", d)
	}
	if n.Attr("clip") != nil {
		return fail("clip is not supported for training")
	}
	if n.Op == "LSTM" && n.Int("input_forget", 0) != 0 {
		return fail("input_forget is not supported for training")
	}
	if a := n.Attr("activations"); a != nil {
		for i, s := range a.GetStrings() {
			if want := c.activations[i%len(c.activations)]; string(s) != want {
				return fail("activation %s where ONNX's default is %s", s, want)
			}
		}
	}
	layout := n.Int("layout", 0)
	xi := g.Info(n.Input(0))
	seqAxis := layout
	if !xi.Known || xi.Rank() != 3 || xi.Shape[seqAxis] < 1 {
		return fail("the input %v needs a fixed sequence length to be unrolled for training", xi)
	}
	wi := g.Info(n.Input(2))
	if !wi.Known || wi.Rank() != 3 || wi.Shape[2] < 1 {
		return fail("the recurrence weight R %v must have a known shape", wi)
	}
	h := wi.Shape[2]
	steps := xi.Shape[seqAxis]

	b := graph.NewBuilder(g, n.Name+"/")
	dt := xi.DType
	index := func(i int64) string { return b.Const(graph.Int64s("", nil, []int64{i})) }
	x := n.Input(0)
	if layout == 1 {
		x = b.Transpose(x, 1, 0, 2) // [seq, batch, input]
	}
	// State inputs are [dirs, batch, hidden], or [batch, dirs, hidden] with layout 1.
	state := func(i int, d int64) string {
		v := n.Input(i)
		if v == "" {
			return ""
		}
		if layout == 1 {
			return b.Gather(v, index(d), 1)
		}
		return b.Gather(v, index(d), 0)
	}
	// valid[t] is [batch, 1], true where step t is inside the sequence.
	var valid []string
	if n.Input(4) != "" {
		lens := b.Unsqueeze(b.Cast(n.Input(4), dtype.Int64), 1)
		for t := range steps {
			valid = append(valid, b.Less(index(t), lens))
		}
	}
	var ys, hs, cs []string
	for d := range dirs {
		reverse := d == 1 || n.String("direction", "forward") == "reverse"
		w := b.Gather(n.Input(1), index(d), 0) // [gates·h, input]
		r := b.Gather(n.Input(2), index(d), 0) // [gates·h, h]
		// The input's projection for all steps at once: [seq, batch, gates·h].
		xw := b.MatMul(x, b.Transpose(w, 1, 0))
		var wb, rb string
		if n.Input(3) != "" {
			bias := b.Gather(n.Input(3), index(d), 0)
			wb = b.Slice(bias, []int64{0}, []int64{c.gates * h}, []int64{0}, nil)
			rb = b.Slice(bias, []int64{c.gates * h}, []int64{2 * c.gates * h}, []int64{0}, nil)
		}
		gruHidden := ""
		switch {
		case wb == "":
		case n.Op == "GRU":
			// The reset gate multiplies the recurrence's h-part with or
			// without its bias (linear_before_reset): that part of Rb stays
			// per step.
			xw = b.Add(xw, b.Add(wb, b.Concat(0, b.Slice(rb, []int64{0}, []int64{2 * h}, []int64{0}, nil), zerosOf(b, dt, h))))
			gruHidden = b.Slice(rb, []int64{2 * h}, []int64{3 * h}, []int64{0}, nil)
		default:
			xw = b.Add(xw, b.Add(wb, rb))
		}
		rt := b.Transpose(r, 1, 0) // [h, gates·h]
		var peep [3]string
		if n.Op == "LSTM" && n.Input(7) != "" {
			p := b.Gather(n.Input(7), index(d), 0)
			for k := range peep {
				peep[k] = b.Slice(p, []int64{int64(k) * h}, []int64{int64(k+1) * h}, []int64{0}, nil)
			}
		}
		gate := func(v string, k int64) string {
			return b.Slice(v, []int64{k * h}, []int64{(k + 1) * h}, []int64{1}, nil)
		}
		hPrev, cPrev := state(5, d), state(6, d)
		if hPrev == "" || n.Op == "LSTM" && cPrev == "" {
			zero := b.ZerosLike(gate(b.Gather(xw, index(0), 0), 0)) // [batch, h]
			if hPrev == "" {
				hPrev = zero
			}
			if cPrev == "" {
				cPrev = zero
			}
		}
		outs := make([]string, steps)
		for s := range steps {
			t := s
			if reverse {
				t = steps - 1 - s
			}
			xt := b.Gather(xw, index(t), 0) // [batch, gates·h]
			hOld, cOld := hPrev, cPrev
			switch n.Op {
			case "LSTM":
				v := b.Add(xt, b.MatMul(hPrev, rt))
				in, out, forget, cand := gate(v, 0), gate(v, 1), gate(v, 2), b.Tanh(gate(v, 3))
				if peep[0] != "" {
					in, forget = b.Add(in, b.Mul(peep[0], cPrev)), b.Add(forget, b.Mul(peep[2], cPrev))
				}
				cPrev = b.Add(b.Mul(b.Sigmoid(forget), cPrev), b.Mul(b.Sigmoid(in), cand))
				if peep[1] != "" {
					out = b.Add(out, b.Mul(peep[1], cPrev))
				}
				hPrev = b.Mul(b.Sigmoid(out), b.Tanh(cPrev))
			case "GRU":
				rzr := b.Slice(rt, []int64{0}, []int64{2 * h}, []int64{1}, nil)
				rh := b.Slice(rt, []int64{2 * h}, []int64{3 * h}, []int64{1}, nil)
				zr := b.Add(b.Slice(xt, []int64{0}, []int64{2 * h}, []int64{1}, nil), b.MatMul(hPrev, rzr))
				z, reset := b.Sigmoid(gate(zr, 0)), b.Sigmoid(gate(zr, 1))
				var hh string
				if n.Int("linear_before_reset", 0) != 0 {
					hh = b.MatMul(hPrev, rh)
					if gruHidden != "" {
						hh = b.Add(hh, gruHidden)
					}
					hh = b.Mul(reset, hh)
				} else {
					hh = b.MatMul(b.Mul(reset, hPrev), rh)
					if gruHidden != "" {
						hh = b.Add(hh, gruHidden)
					}
				}
				cand := b.Tanh(b.Add(gate(xt, 2), hh))
				// (1 - z)·h̃ + z·h = h̃ + z·(h - h̃)
				hPrev = b.Add(cand, b.Mul(z, b.Sub(hPrev, cand)))
			default:
				hPrev = b.Tanh(b.Add(xt, b.MatMul(hPrev, rt)))
			}
			out := hPrev
			if valid != nil {
				hPrev = b.Where(valid[t], hPrev, hOld)
				if n.Op == "LSTM" {
					cPrev = b.Where(valid[t], cPrev, cOld)
				}
				out = b.Where(valid[t], hPrev, b.ZerosLike(hPrev))
			}
			outs[t] = b.Unsqueeze(out, 0) // [1, batch, h]
		}
		ys = append(ys, b.Unsqueeze(b.Concat(0, outs...), 1)) // [seq, 1, batch, h]
		hs = append(hs, b.Unsqueeze(hPrev, 0))
		cs = append(cs, b.Unsqueeze(cPrev, 0))
	}
	// Outputs: Y [seq, dirs, batch, h] (layout 1: [batch, seq, dirs, h]),
	// Y_h and Y_c [dirs, batch, h] (layout 1: [batch, dirs, h]).
	for i, parts := range [][]string{ys, hs, cs} {
		out := n.Output(i)
		if out == "" || i == 2 && n.Op != "LSTM" {
			continue
		}
		axis := int64(1)
		if i > 0 {
			axis = 0
		}
		v := b.Concat(axis, parts...)
		if layout == 1 {
			if i == 0 {
				v = b.Transpose(v, 2, 0, 1, 3)
			} else {
				v = b.Transpose(v, 1, 0, 2)
			}
		}
		b.OpInto(out, "Identity", []string{v})
	}
	if b.Err != nil {
		return fail("%w", b.Err)
	}
	return nil
}

// zerosOf is a constant vector of n zeros of type dt.
func zerosOf(b *graph.Builder, dt dtype.DType, n int64) string {
	t, err := graph.Floats("", dt, []int64{n}, make([]float64, n))
	if err != nil {
		return b.Fail("%w", err)
	}
	return b.Const(t)
}
