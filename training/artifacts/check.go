package artifacts

import (
	"bytes"
	"fmt"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/graph"
)

// What Build checks in a forward model before it trains it: ONNX cannot
// tell a parameter from a buffer or a constant, and torch.onnx.export's
// defaults (constant folding, eval mode) rewrite weights in ways that are
// harmless for inference but wrong for training.

// Reexport is how to export a PyTorch model that ortrain trains as PyTorch
// would.
const Reexport = "re-export with torch.onnx.export(..., do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING), " +
	"or with models/pytorch/ortrain_export.py (which also marks buffers as frozen)"

// modelName names the model in messages: its file's absolute path, or
// "the model" for a graph handed over in memory.
func modelName(opts Options) string {
	if opts.Model == "" {
		return "the model"
	}
	if abs, err := filepath.Abs(opts.Model); err == nil {
		return abs
	}
	return opts.Model
}

// list joins names, the first max of them and a count of the rest.
func list(names []string, max int) string {
	if len(names) <= max {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:max], ", "), len(names)-max)
}

// stateNames are g's floating initializers of rank >= 1: what can train.
func stateNames(g *graph.Graph) []string {
	var out []string
	for _, name := range g.InitOrder {
		if info := g.Info(name); info.Float() && info.Rank() >= 1 {
			out = append(out, name)
		}
	}
	return out
}

// checkGlobs refuses a --trainable or --frozen glob that matches no
// initializer: a typo or a renamed tensor would otherwise train what was
// meant to stay fixed, or the reverse, without a word.
func checkGlobs(g *graph.Graph, opts Options, model string) error {
	state := stateNames(g)
	for _, set := range []struct {
		flag, key string
		globs     []string
	}{{"--trainable", "model.trainable", opts.Trainable}, {"--frozen", "model.frozen", opts.Frozen}} {
		for _, gl := range set.globs {
			if slices.ContainsFunc(g.InitOrder, func(n string) bool { ok, _ := path.Match(gl, n); return ok }) {
				continue
			}
			msg := fmt.Sprintf("%s %q (%s) matches no initializer of %s; ", set.flag, gl, set.key, model)
			if len(state) == 0 {
				msg += "it has no floating initializers"
			} else {
				msg += fmt.Sprintf("its floating initializers are %s", list(state, 12))
			}
			if s := suggestGlob(gl, state); s != "" {
				msg += fmt.Sprintf("; did you mean %q?", s)
			}
			if slices.ContainsFunc(state, isFolded) {
				msg += "; names like onnx::MatMul_12 are weights torch.onnx.export's constant folding renamed: " + Reexport
			}
			return &Error{msg}
		}
	}
	return nil
}

// suggestGlob proposes a glob that matches where gl matches only a dotted
// suffix of the names: "fc.*" for net.fc.weight suggests "net.fc.*".
func suggestGlob(gl string, names []string) string {
	for _, n := range names {
		for i := 1; i < len(n); i++ {
			if n[i-1] != '.' {
				continue
			}
			if ok, _ := path.Match(gl, n[i:]); ok {
				return n[:i] + gl
			}
		}
	}
	return ""
}

// isFolded reports a name torch.onnx.export made up for a tensor it
// computed at export time (onnx::Conv_21, onnx::MatMul_28): a constant it
// folded, not a parameter of the module.
func isFolded(name string) bool { return strings.HasPrefix(name, "onnx::") }

// trainee is a tensor Build is about to train, with its initial data.
type trainee struct {
	name string
	info graph.Info
	data []byte
}

// checkTrained refuses what cannot train right (low-precision parameters,
// one weight stored twice) and returns warnings about what may be trained
// by mistake.
func checkTrained(g *graph.Graph, ts []trainee, model string) ([]string, error) {
	var low []string
	for _, t := range ts {
		if t.info.DType == dtype.Float16 || t.info.DType == dtype.BFloat16 {
			low = append(low, fmt.Sprintf("%s (%s)", t.name, t.info))
		}
	}
	if len(low) > 0 {
		return nil, &Error{fmt.Sprintf("%s has low-precision initializers that would train: %s. ortrain keeps float32 master weights: "+
			"export the model in float32 and use trainer.precision = 16-mixed / --precision fp16 (or bf16-mixed / --precision bf16), "+
			"or freeze them with --frozen GLOB", model, list(low, 8))}
	}
	if ties := tiedCopies(ts); len(ties) > 0 {
		return nil, &Error{fmt.Sprintf("%s has trained initializers that hold the same values: %s. That is one weight used twice in the PyTorch model "+
			"(a tied embedding and output head), which torch.onnx.export's constant folding (do_constant_folding=True, its default) stored a second time; "+
			"trained separately, the copies would drift apart and the tie would be lost: %s. If they are meant to be separate weights, freeze one with --frozen NAME",
			model, strings.Join(ties, "; "), Reexport)}
	}
	var warnings []string
	var folded []string
	for _, t := range ts {
		if isFolded(t.name) {
			folded = append(folded, t.name)
		}
	}
	if len(folded) > 0 {
		warnings = append(warnings, fmt.Sprintf("%d trained initializers have names torch.onnx.export made up (%s): constants it folded at export, "+
			"such as a BatchNorm folded into the Conv before it by an eval-mode export or W.T of a Linear, not parameters of the module; "+
			"their checkpoint values cannot be mapped back to the module's state_dict: %s",
			len(folded), list(folded, 8), Reexport))
	}
	if unread := notWeights(g, ts); len(unread) > 0 {
		warnings = append(warnings, fmt.Sprintf("%d trained initializers are read by no op that takes weights (Conv, Gemm, MatMul, a normalisation's scale or bias, an embedding Gather, LSTM/GRU/RNN, PRelu): %s. "+
			"If they are buffers (normalisation constants, a positional table, a mask), freeze them with --frozen NAME (config model.frozen) "+
			"or export with models/pytorch/ortrain_export.py, which marks buffers; learned ones (a positional embedding, a class token, a scale) are right to train",
			len(unread), list(unread, 8)))
	}
	return warnings, nil
}

// tiedCopies finds pairs of trained 2-D tensors of which one is the
// transpose of the other, or an exact copy stored under torch's name for a
// folded constant (onnx::...), ignoring tensors with few distinct values
// (zeros, ones, an identity), which are equal by initialisation.
func tiedCopies(ts []trainee) []string {
	type key struct {
		lo, hi      int64
		first, last string
	}
	groups := map[key][]int{}
	var order []key
	for i, t := range ts {
		es := t.info.DType.Size()
		if t.info.Rank() != 2 || es == 0 || len(t.data) == 0 || len(t.data)%es != 0 {
			continue
		}
		r, c := t.info.Shape[0], t.info.Shape[1]
		// Element [0,0] and the last element are where they are in the
		// transpose too.
		k := key{min(r, c), max(r, c), string(t.data[:es]), string(t.data[len(t.data)-es:])}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	var out []string
	for _, k := range order {
		idx := groups[k]
		for x := 0; x < len(idx); x++ {
			for y := x + 1; y < len(idx); y++ {
				a, b := ts[idx[x]], ts[idx[y]]
				if a.info.DType != b.info.DType || !varied(a) {
					continue
				}
				switch {
				case (isFolded(a.name) || isFolded(b.name)) && slices.Equal(a.info.Shape, b.info.Shape) && bytes.Equal(a.data, b.data):
					// Only a copy under a name torch made up for a folded
					// constant: equal initial values alone are common
					// (nn.TransformerEncoder deep-copies its first layer).
					out = append(out, fmt.Sprintf("%s %v is a copy of %s %v", b.name, b.info.Shape, a.name, a.info.Shape))
				case transposed(a, b):
					out = append(out, fmt.Sprintf("%s %v is the transpose of %s %v", b.name, b.info.Shape, a.name, a.info.Shape))
				}
			}
		}
	}
	return out
}

// transposed reports whether b holds a's 2-D data transposed.
func transposed(a, b trainee) bool {
	r, c := a.info.Shape[0], a.info.Shape[1]
	if b.info.Shape[0] != c || b.info.Shape[1] != r {
		return false
	}
	es := int64(a.info.DType.Size())
	for i := range r {
		for j := range c {
			ai, bi := (i*c+j)*es, (j*r+i)*es
			if !bytes.Equal(a.data[ai:ai+es], b.data[bi:bi+es]) {
				return false
			}
		}
	}
	return true
}

// varied reports whether t has many distinct values, as a randomly
// initialised weight does: at least half its elements, or 64.
func varied(t trainee) bool {
	es := t.info.DType.Size()
	n := len(t.data) / es
	want := min(max(n/2, 2), 64)
	seen := map[string]bool{}
	for i := 0; i < n && len(seen) < want; i++ {
		seen[string(t.data[i*es:(i+1)*es])] = true
	}
	return len(seen) >= want
}

// notWeights lists the trained tensors that no op reads as a weight or as
// the bias added to a weight op's output, following layout ops (Transpose,
// Reshape, Cast, Concat, Split...), and whose name does not end in .weight
// or .bias, PyTorch's names for a module's parameters (a GroupNorm, or a
// LayerNorm before opset 17, is exported as a normalisation and a Mul and
// Add of its weight and bias): buffers that a plain torch.onnx.export
// leaves as initializers.
func notWeights(g *graph.Graph, ts []trainee) []string {
	cons, prods := g.Consumers(), g.Producers()
	var out []string
	for _, t := range ts {
		last := t.name[strings.LastIndex(t.name, ".")+1:]
		if strings.HasPrefix(last, "weight") || strings.HasPrefix(last, "bias") || readAsWeight(cons, prods, t.name) {
			continue
		}
		out = append(out, t.name)
	}
	return out
}

// layoutOps pass a tensor on rearranged: a weight read through them is
// still read as a weight (input 0 only where the others are sizes).
var layoutOps = map[string]bool{"Identity": true, "Cast": true, "CastLike": true, "Transpose": true, "Reshape": true, "Squeeze": true,
	"Unsqueeze": true, "Flatten": true, "Concat": true, "Split": true, "Slice": true, "Expand": true, "Tile": true}

func readAsWeight(cons map[string][]*graph.Node, prods map[string]*graph.Node, name string) bool {
	seen := map[string]bool{name: true}
	todo := []string{name}
	for len(todo) > 0 {
		v := todo[0]
		todo = todo[1:]
		for _, n := range cons[v] {
			if n.Domain != "" && n.Domain != "ai.onnx" {
				continue
			}
			for slot, in := range n.Inputs {
				if in != v {
					continue
				}
				if weightSlot(n.Op, slot) {
					return true
				}
				if affine(n, slot, prods) {
					return true
				}
				if layoutOps[n.Op] && (slot == 0 || n.Op == "Concat") {
					for _, o := range n.Outputs {
						if o != "" && !seen[o] {
							seen[o] = true
							todo = append(todo, o)
						}
					}
				}
			}
		}
	}
	return false
}

// normOps normalise their input; a GroupNorm exported at opset 17 is an
// InstanceNormalization followed by its scale and shift.
var normOps = map[string]bool{"InstanceNormalization": true, "LayerNormalization": true, "GroupNormalization": true,
	"BatchNormalization": true, "MeanVarianceNormalization": true, "LpNormalization": true}

// affine reports whether input slot of n is a layer's affine parameter
// applied with a Mul or Add: the bias added to a MatMul's or Conv's output
// (torch's Linear on a 3-D input), or the scale and shift of a
// normalisation exported in pieces.
func affine(n *graph.Node, slot int, prods map[string]*graph.Node) bool {
	if n.Domain != "" || len(n.Inputs) != 2 || (n.Op != "Add" && n.Op != "Mul") {
		return false
	}
	// from follows v back through layout ops to the op that computed it.
	from := func(v string) *graph.Node {
		p := prods[v]
		for p != nil && layoutOps[p.Op] && p.Op != "Concat" && len(p.Inputs) > 0 {
			p = prods[p.Inputs[0]]
		}
		return p
	}
	// norm: a normalisation op, or one written out as (x - mean) /
	// sqrt(var + eps).
	norm := func(p *graph.Node) bool {
		if p == nil || p.Domain != "" {
			return false
		}
		if p.Op == "Div" && len(p.Inputs) == 2 {
			q := from(p.Inputs[1])
			return q != nil && q.Op == "Sqrt"
		}
		return normOps[p.Op]
	}
	p := from(n.Inputs[1-slot])
	switch {
	case p == nil || p.Domain != "":
		return false
	case norm(p):
		return true
	case n.Op == "Add" && weightSlot(p.Op, 1) && !normOps[p.Op]:
		return true
	case n.Op == "Add" && p.Op == "Mul" && len(p.Inputs) == 2:
		return norm(from(p.Inputs[0])) || norm(from(p.Inputs[1]))
	}
	return false
}

// weightSlot reports whether input slot of op is a parameter in PyTorch's
// layers: the weights of Conv, Gemm, MatMul, the recurrent layers, PRelu's
// slope, a normalisation's scale and bias, an embedding's table.
func weightSlot(op string, slot int) bool {
	switch op {
	case "Gemm", "MatMul", "Einsum":
		return true
	case "Conv", "ConvTranspose", "LSTM", "GRU", "RNN", "PRelu",
		"BatchNormalization", "LayerNormalization", "InstanceNormalization", "GroupNormalization":
		return slot >= 1
	case "Gather":
		return slot == 0
	}
	return false
}
