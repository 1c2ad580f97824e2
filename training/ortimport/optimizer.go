package ortimport

import (
	"fmt"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
)

// optimizerNode finds the AdamWOptimizer or SGDOptimizerV2 node of
// optimizer_model.onnx; its inputs are tensor sequences, which ortrain
// replaces by one input per parameter, so only its attributes matter.
func optimizerNode(raw []byte) (*graph.Node, error) {
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, mp); err != nil {
		return nil, &FormatError{OptimizerModel, err.Error()}
	}
	for _, n := range mp.GetGraph().GetNode() {
		if n.GetDomain() != "com.microsoft" {
			continue
		}
		switch n.GetOpType() {
		case "AdamWOptimizer", "SGDOptimizerV2":
			return &graph.Node{Op: n.GetOpType(), Domain: n.GetDomain(), Name: n.GetName(), Attrs: n.GetAttribute()}, nil
		default:
			return nil, &UnsupportedOpError{n.GetOpType(), n.GetName()}
		}
	}
	return nil, &FormatError{OptimizerModel, "no AdamWOptimizer or SGDOptimizerV2 node"}
}

// optimizerGraph lowers the optimizer node to an optimizer.onnx with
// ortrain's interface (SPEC.md): per parameter p, grad.<p> and its state,
// scalars lr, step, grad_scale, clip_norm; outputs p.out, the states' .out
// and grad_norm. The update is ONNX Runtime's:
//
//	m = β1·m + (1-β1)·g;  v = β2·v + (1-β2)·g²;  bc_i = 1 - β_i^step (1 without correct_bias)
//	adam_mode 0 (PyTorch): p -= lr·wd·p;  p -= lr/bc1 · m/(√v/√bc2 + ε)
//	adam_mode 1 (Hugging Face): p -= lr·√bc2/bc1 · m/(√v + ε);  p -= lr·wd·p
//	SGDOptimizerV2: p -= lr·g
//
// with decay applied to every parameter, as ONNX Runtime does.
func optimizerGraph(n *graph.Node, params []optim.Param, ck *Checkpoint) (*graph.Graph, artifacts.Optimizer, error) {
	g := graph.New("optimizer", graph.EmitOpset)
	b := graph.NewBuilder(g, "")
	scalar := graph.Info{DType: ort.Float32, Known: true, Shape: []int64{}}
	for _, s := range []string{optim.LR, optim.Step, optim.GradScale, optim.ClipNorm} {
		g.AddInput(s, scalar)
	}
	cfg := artifacts.Optimizer{LRInput: optim.LR, StepInput: optim.Step, GradScaleInput: optim.GradScale,
		ClipNormInput: optim.ClipNorm, GradNormOutput: optim.GradNorm}
	cfg.Config = optim.Config{Kind: optim.SGD, LR: 1e-3, NoDecay: []string{}}
	if len(ck.Groups) > 0 && ck.Groups[0].InitialLR > 0 {
		cfg.LR = float64(ck.Groups[0].InitialLR)
	}
	adam := n.Op == "AdamWOptimizer"
	b1, b2, eps, wd := n.Float("alpha", 0.9), n.Float("beta", 0.999), n.Float("epsilon", 1e-8), n.Float("weight_decay", 0)
	mode := n.Int("adam_mode", 0)
	if adam {
		if mode != 0 && mode != 1 {
			return nil, cfg, &FormatError{OptimizerModel, fmt.Sprintf("AdamWOptimizer adam_mode %d", mode)}
		}
		cfg.Config = optim.Config{Kind: optim.AdamW, LR: cfg.LR, Beta1: b1, Beta2: b2, Eps: eps, WeightDecay: wd, NoDecay: []string{}}
	}
	grads := make([]string, len(params))
	var sq []string
	for i, p := range params {
		g.AddInput(p.Name, p.Info)
		g.AddInput(optim.GradName(p.Name), p.Info)
		grads[i] = b.Mul(optim.GradName(p.Name), b.Cast(optim.GradScale, p.Info.DType))
		sq = append(sq, b.Cast(b.ReduceSum(b.Mul(grads[i], grads[i]), false), ort.Float32))
	}
	norm := b.Sqrt(b.Sum(sq...))
	b.OpInto(optim.GradNorm, "Identity", []string{norm})
	one := b.Scalar(ort.Float32, 1)
	clipped := b.Min(one, b.Div(optim.ClipNorm, b.Add(norm, b.Scalar(ort.Float32, 1e-6))))
	factor := b.Where(b.Greater(optim.ClipNorm, b.Scalar(ort.Float32, 0)), clipped, one)
	var sbc1, sbc2 string
	if adam {
		sbc1, sbc2 = one, one
		if n.Int("correct_bias", 1) == 1 {
			sbc1 = b.Sub(one, b.Pow(b.Scalar(ort.Float32, b1), optim.Step))
			sbc2 = b.Sub(one, b.Pow(b.Scalar(ort.Float32, b2), optim.Step))
		}
	}
	for i, p := range params {
		dt := p.Info.DType
		k := func(v float64) string { return b.ScalarLike(p.Name, v) }
		cast := func(s string) string { return b.Cast(s, dt) }
		gr := b.Mul(grads[i], cast(factor))
		lr := cast(optim.LR)
		next := b.Sub(p.Name, b.Mul(lr, gr))
		if adam {
			m, v := "opt.m."+p.Name, "opt.v."+p.Name
			g.AddInput(m, p.Info)
			g.AddInput(v, p.Info)
			cfg.States = append(cfg.States, artifacts.State{Name: m, Param: p.Name, Out: optim.Out(m)}, artifacts.State{Name: v, Param: p.Name, Out: optim.Out(v)})
			m1 := b.OpInto(optim.Out(m), "Add", []string{b.Mul(m, k(b1)), b.Mul(gr, k(1-b1))})
			v1 := b.OpInto(optim.Out(v), "Add", []string{b.Mul(v, k(b2)), b.Mul(b.Mul(gr, gr), k(1-b2))})
			bc1, bc2 := cast(sbc1), cast(sbc2)
			decayed := func(x string) string {
				if wd == 0 {
					return x
				}
				return b.Sub(x, b.Mul(b.Mul(lr, k(wd)), x))
			}
			if mode == 0 {
				denom := b.Add(b.Div(b.Sqrt(v1), b.Sqrt(bc2)), k(eps))
				next = b.Sub(decayed(p.Name), b.Mul(b.Div(lr, bc1), b.Div(m1, denom)))
			} else {
				step := b.Div(b.Mul(lr, b.Sqrt(bc2)), bc1)
				next = decayed(b.Sub(p.Name, b.Mul(step, b.Div(m1, b.Add(b.Sqrt(v1), k(eps))))))
			}
		}
		b.OpInto(optim.Out(p.Name), "Identity", []string{next})
	}
	g.Outputs = nil
	for _, p := range params {
		g.Outputs = append(g.Outputs, optim.Out(p.Name))
	}
	for _, s := range cfg.States {
		g.Outputs = append(g.Outputs, s.Out)
	}
	g.Outputs = append(g.Outputs, optim.GradNorm)
	if b.Err != nil {
		return nil, cfg, b.Err
	}
	return g, cfg, nil
}
