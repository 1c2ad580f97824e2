// Package steptest runs recipe graphs on ONNX Runtime for the recipes'
// tests: forward graphs as they are (with ortrain's StopGradient marker
// read as Identity, which is what it computes), and artifact sets through
// their training, eval and optimizer graphs the way the trainer drives them
// (every output X.out replaces the state X).
package steptest

import (
	"encoding/binary"
	"errors"
	"math"
	"path/filepath"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/safetensors"
)

// Forward runs g once on the CPU with feeds and returns the named outputs
// (all graph outputs when none are named) by name; the graph is pruned to
// what they need. StopGradient markers
// become Identity nodes, which is their forward value, because stock ONNX
// Runtime has no kernel for them.
func Forward(tb testing.TB, g *graph.Graph, feeds map[string]*ort.Value, names ...string) map[string]*ort.Value {
	tb.Helper()
	orttest.Init(tb)
	g = g.Clone()
	g.StripStopGradients() // and the other ortrain markers, as training runs them
	if len(names) > 0 {
		// Only what is asked for: an exported graph may declare outputs
		// whose type nothing here infers.
		g.Outputs = names
		g.Prune()
	}
	raw, err := g.Marshal()
	if err != nil {
		tb.Fatal(err)
	}
	s, err := ort.NewSessionFromBytes(raw, ort.Options{})
	if err != nil {
		tb.Fatalf("graph does not load on ONNX Runtime: %v", err)
	}
	defer s.Close()
	names = g.Outputs
	outs, err := s.Run(feeds, names...)
	if err != nil {
		tb.Fatal(err)
	}
	res := map[string]*ort.Value{}
	for i, n := range names {
		res[n] = outs[i]
		tb.Cleanup(outs[i].Close)
	}
	return res
}

// BuildOrSkip builds the artifact set opts asks for into a temporary
// directory, which it returns with the manifest. A
// model that needs a gradient rule ortrain does not have yet skips the test,
// naming the op, so the test starts running once the rule lands.
func BuildOrSkip(tb testing.TB, opts artifacts.Options) (*artifacts.Manifest, string) {
	tb.Helper()
	opts.Out = filepath.Join(tb.TempDir(), "artifacts")
	m, err := artifacts.Build(opts)
	var nr *autodiff.NoRuleError
	if errors.As(err, &nr) {
		tb.Skipf("training graph needs a gradient rule for %s (node %s), not yet in autodiff", nr.Op, nr.Node)
	}
	if err != nil {
		tb.Fatal(err)
	}
	return m, opts.Out
}

// Runner drives one artifact set with host tensors.
type Runner struct {
	tb              testing.TB
	M               *artifacts.Manifest
	train, eval, op *ort.Session
	state           map[string]*ort.Value
	step            int
}

// Open loads the artifact set in dir: the three sessions, the initial
// weights, and zeros for gradient accumulators and optimizer states.
func Open(tb testing.TB, dir string) *Runner {
	tb.Helper()
	orttest.Init(tb)
	m, err := artifacts.Load(dir)
	if err != nil {
		tb.Fatal(err)
	}
	r := &Runner{tb: tb, M: m, state: map[string]*ort.Value{}}
	tb.Cleanup(func() {
		for _, v := range r.state {
			v.Close()
		}
	})
	open := func(f string) *ort.Session {
		s, err := ort.NewSession(filepath.Join(dir, f), ort.Options{})
		if err != nil {
			tb.Fatalf("%s does not load on ONNX Runtime: %v", f, err)
		}
		tb.Cleanup(s.Close)
		return s
	}
	r.train, r.eval, r.op = open(artifacts.TrainingFile), open(artifacts.EvalFile), open(artifacts.OptimizerFile)
	ws, _, err := safetensors.Read(filepath.Join(dir, artifacts.WeightsFile))
	if err != nil {
		tb.Fatal(err)
	}
	shapes := map[string][]int64{}
	for _, w := range ws {
		if w.DType != ort.Float32 {
			tb.Fatalf("weight %s is %v; the recipes' weights are float32", w.Name, w.DType)
		}
		f := make([]float32, len(w.Data)/4)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(w.Data[4*i:]))
		}
		r.put(w.Name, w.Shape, f)
		shapes[w.Name] = w.Shape
	}
	for _, g := range m.Gradients {
		r.put(g.Name(), shapes[g.Param], nil)
	}
	for _, s := range m.Optimizer.States {
		r.put(s.Name, shapes[s.Param], nil)
	}
	return r
}

// put sets state name to a float32 tensor (zeros when v is nil).
func (r *Runner) put(name string, shape []int64, v []float32) {
	if v == nil {
		v = make([]float32, ort.Numel(shape))
	}
	t, err := ort.NewTensor(shape, v)
	if err != nil {
		r.tb.Fatal(err)
	}
	r.state[name] = t
}

// State returns a state tensor's values (a weight, buffer or accumulator).
func (r *Runner) State(name string) []float32 { return ort.Data[float32](r.state[name]) }

// feed picks each input of s from data or, failing that, the state.
func (r *Runner) feed(s *ort.Session, data map[string]*ort.Value) map[string]*ort.Value {
	in := map[string]*ort.Value{}
	for _, i := range s.Inputs() {
		v, ok := data[i.Name]
		if !ok {
			v, ok = r.state[i.Name]
		}
		if !ok {
			r.tb.Fatalf("nothing feeds input %s", i.Name)
		}
		in[i.Name] = v
	}
	return in
}

// absorb makes each output X.out of a state X the new X and returns the
// other outputs by name.
func (r *Runner) absorb(s *ort.Session, outs []*ort.Value) map[string]*ort.Value {
	rest := map[string]*ort.Value{}
	for i, o := range s.Outputs() {
		if base := o.Name[:max(len(o.Name)-4, 0)]; o.Name == base+".out" {
			if old, ok := r.state[base]; ok {
				old.Close()
				r.state[base] = outs[i]
				continue
			}
		}
		rest[o.Name] = outs[i]
	}
	return rest
}

// Step runs the training graph on one batch (a whole accumulation window)
// and an optimizer step with learning rate lr and gradient clipping at
// norm 5, and returns the batch's loss.
func (r *Runner) Step(data map[string]*ort.Value, lr float32) float64 {
	r.tb.Helper()
	loss := r.Backward(data)
	r.step++
	sc := map[string]float32{"lr": lr, "step": float32(r.step), "grad_scale": 1, "clip_norm": 5}
	scv := map[string]*ort.Value{}
	for k, x := range sc {
		scv[k], _ = ort.NewScalar(x)
		defer scv[k].Close()
	}
	if err := r.M.PackHost(r.state); err != nil {
		r.tb.Fatal(err)
	}
	outs, err := r.op.Run(r.feed(r.op, scv))
	if err != nil {
		r.tb.Fatal(err)
	}
	for _, v := range r.absorb(r.op, outs) {
		v.Close()
	}
	r.M.UnpackHost(r.state)
	return loss
}

// Backward runs the training graph on one batch with fresh accumulators,
// leaving each parameter's gradient in State("grad."+param), and returns the
// batch's loss.
func (r *Runner) Backward(data map[string]*ort.Value) float64 {
	r.tb.Helper()
	in := map[string]*ort.Value{}
	for k, v := range data {
		in[k] = v
	}
	reset, _ := ort.NewScalar(true)
	defer reset.Close()
	in[artifacts.Reset] = reset
	outs, err := r.train.Run(r.feed(r.train, in))
	if err != nil {
		r.tb.Fatal(err)
	}
	rest := r.absorb(r.train, outs)
	loss := float64(ort.Data[float32](rest["loss"])[0])
	for _, v := range rest {
		v.Close()
	}
	return loss
}

// Eval returns the eval graph's loss on a batch.
func (r *Runner) Eval(data map[string]*ort.Value) float64 {
	r.tb.Helper()
	outs, err := r.eval.Run(r.feed(r.eval, data), "loss")
	if err != nil {
		r.tb.Fatal(err)
	}
	defer outs[0].Close()
	return float64(ort.Data[float32](outs[0])[0])
}
