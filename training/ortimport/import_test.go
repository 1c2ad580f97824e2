package ortimport_test

import (
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/onnxpb"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/ortimport"
	"github.com/ortrain/ortrain/training/safetensors"
)

const v1121 = "testdata/v1.12.1"

func TestReadCheckpoint(t *testing.T) {
	ck, err := ortimport.ReadCheckpoint(filepath.Join(v1121, "checkpoint"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]int64{"conv.weight": {4, 1, 4}, "conv.bias": {4}, "fc.weight": {2, 8}, "fc.bias": {2}}
	if len(ck.Params) != len(want) || len(ck.Frozen) != 0 {
		t.Fatalf("%d params, %d frozen; want 4 and 0", len(ck.Params), len(ck.Frozen))
	}
	for _, p := range ck.Params {
		if s, ok := want[p.Name]; !ok || p.DType != ort.Float32 || !slices.Equal(p.Shape, s) || len(p.Data) != 4*int(ort.Numel(s)) {
			t.Errorf("param %s %v %v with %d bytes", p.Name, p.DType, p.Shape, len(p.Data))
		}
	}
	if _, err := ortimport.ReadCheckpoint(filepath.Join(v1121, "eval_model.onnx")); err == nil {
		t.Error("an ONNX file read as a checkpoint")
	}
}

// session opens an ONNX file or in-memory graph on stock ONNX Runtime.
func session(t *testing.T, path string, g *graph.Graph) *ort.Session {
	t.Helper()
	orttest.Init(t)
	var s *ort.Session
	var err error
	if g != nil {
		m, merr := g.Marshal()
		if merr != nil {
			t.Fatal(merr)
		}
		s, err = ort.NewSessionFromBytes(m, ort.Options{})
	} else {
		s, err = ort.NewSession(path, ort.Options{})
	}
	if err != nil {
		t.Fatalf("stock ONNX Runtime does not load %s: %v", path, err)
	}
	t.Cleanup(s.Close)
	return s
}

func value(t *testing.T, shape []int64, v []float32) *ort.Value {
	val, err := ort.NewTensor(shape, v)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { val.Close() })
	return val
}

func run(t *testing.T, s *ort.Session, feed map[string]*ort.Value) map[string][]float32 {
	t.Helper()
	in := map[string]*ort.Value{}
	for _, i := range s.Inputs() {
		v, ok := feed[i.Name]
		if !ok {
			t.Fatalf("nothing to feed %s", i.Name)
		}
		in[i.Name] = v
	}
	outs, err := s.Run(in)
	if err != nil {
		t.Fatal(err)
	}
	res := map[string][]float32{}
	for i, o := range s.Outputs() {
		res[o.Name] = append([]float32(nil), ort.Data[float32](outs[i])...)
		outs[i].Close()
	}
	return res
}

// TestImportV1121 imports the artifacts ONNX Runtime made (ConvGrad,
// ReluGrad, ConcatTraining, SplitTraining, Scale, InPlaceAccumulatorV2,
// AdamWOptimizer), checks the imported gradients against ortrain's own
// autodiff of the eval model (an independent derivation: different graph,
// different rules), then trains: loss falls on stock ONNX Runtime's CPU
// provider. Gradient tolerance 1e-6 + 1e-4·|g|: both are float32 sums of
// at most 40 products, so they agree to ~1e-6 relative; a wrong lowering
// (a missing term, a transposed weight) errs by O(1).
func TestImportV1121(t *testing.T) {
	orttest.Init(t)
	out := t.TempDir()
	m, err := ortimport.Import(ortimport.Options{Dir: v1121, Out: out, Overwrite: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := artifacts.Load(out); err != nil {
		t.Fatal(err)
	}
	tg, err := graph.Load(filepath.Join(out, artifacts.TrainingFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tg.Nodes {
		if n.Domain != "" {
			t.Errorf("node %s left in domain %s", n.Describe(), n.Domain)
		}
	}
	ws, _, err := safetensors.Read(filepath.Join(out, artifacts.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	state := map[string]*ort.Value{}
	weights := map[string][]float32{}
	for _, w := range ws {
		f := make([]float32, len(w.Data)/4)
		for i := range f {
			f[i] = math.Float32frombits(uint32(w.Data[4*i]) | uint32(w.Data[4*i+1])<<8 | uint32(w.Data[4*i+2])<<16 | uint32(w.Data[4*i+3])<<24)
		}
		weights[w.Name] = f
		state[w.Name] = value(t, w.Shape, f)
	}
	r := rand.New(rand.NewPCG(4, 5))
	rnd := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(r.NormFloat64())
		}
		return v
	}
	target := rnd(20)
	for i := range target { // the model ends in a Relu
		target[i] = float32(math.Abs(float64(target[i])))
	}
	data := map[string]*ort.Value{"input": value(t, []int64{10, 1, 4}, rnd(40)), "target": value(t, []int64{10, 1, 2}, target)}
	feed := func(extra map[string]*ort.Value) map[string]*ort.Value {
		f := map[string]*ort.Value{}
		for _, src := range []map[string]*ort.Value{data, state, extra} {
			for k, v := range src {
				f[k] = v
			}
		}
		return f
	}
	reset, _ := ort.NewTensor([]int64{}, []bool{true})
	defer reset.Close()
	zeros := map[string]*ort.Value{artifacts.Reset: reset}
	for _, p := range m.Params {
		zeros["grad."+p.Name] = value(t, p.Shape, make([]float32, ort.Numel(p.Shape)))
	}
	train := session(t, filepath.Join(out, artifacts.TrainingFile), nil)
	got := run(t, train, feed(zeros))

	// Independent: ortrain's autodiff on ONNX Runtime's eval model.
	eg, err := graph.Load(filepath.Join(v1121, "eval_model.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	var params []string
	for _, p := range m.Params {
		params = append(params, p.Name)
	}
	lossName := eg.Outputs[0]
	grads, err := autodiff.Gradients(eg, lossName, params, "grad/")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range params {
		eg.Outputs = append(eg.Outputs, grads[p])
	}
	eg.Prune()
	ref := run(t, session(t, "eval model with autodiff", eg), feed(nil))
	if d := math.Abs(float64(got["loss"][0] - ref[lossName][0])); d > 1e-6 {
		t.Errorf("loss %g, eval model %g", got["loss"][0], ref[lossName][0])
	}
	worst := 0.0
	for _, gr := range m.Gradients {
		a, e := got[gr.Out], ref[grads[gr.Param]]
		if len(a) != len(e) || len(a) == 0 {
			t.Fatalf("%s: %d gradient values, reference %d", gr.Param, len(a), len(e))
		}
		for i := range a {
			d := math.Abs(float64(a[i] - e[i]))
			worst = max(worst, d/(1e-6+math.Abs(float64(e[i]))))
			if d > 1e-6+1e-4*math.Abs(float64(e[i])) {
				t.Errorf("d loss/d %s[%d]: imported %g, autodiff of the eval model %g", gr.Param, i, a[i], e[i])
				break
			}
		}
	}
	t.Logf("imported gradients vs autodiff of eval_model.onnx: worst relative difference %.2g", worst)

	// Train: accumulate one micro-batch, step the imported AdamW.
	opt := session(t, filepath.Join(out, artifacts.OptimizerFile), nil)
	scal := func(v float32) *ort.Value {
		x, _ := ort.NewTensor([]int64{}, []float32{v})
		t.Cleanup(func() { x.Close() })
		return x
	}
	for _, s := range m.Optimizer.States {
		state[s.Name] = value(t, shapeOf(m, s.Param), make([]float32, ort.Numel(shapeOf(m, s.Param))))
	}
	var losses []float32
	for step := 1; step <= 40; step++ {
		res := run(t, train, feed(zeros))
		losses = append(losses, res["loss"][0])
		accs := map[string]*ort.Value{}
		for _, gr := range m.Gradients {
			accs[gr.Acc] = value(t, shapeOf(m, gr.Param), res[gr.Out])
		}
		accs["lr"], accs["step"], accs["grad_scale"], accs["clip_norm"] = scal(0.03), scal(float32(step)), scal(1), scal(0)
		upd := run(t, opt, feed(accs))
		for name, v := range upd {
			if base, ok := strings.CutSuffix(name, ".out"); ok {
				state[base] = value(t, shapeOf(m, paramOf(m, base)), v)
			}
		}
	}
	t.Logf("imported v1.12.1 artifacts: L1 loss %.4f -> %.4f in %d AdamW steps", losses[0], losses[len(losses)-1], len(losses))
	if !(losses[len(losses)-1] < 0.6*losses[0]) {
		t.Errorf("loss fell only from %g to %g", losses[0], losses[len(losses)-1])
	}
}

func shapeOf(m *artifacts.Manifest, param string) []int64 {
	for _, p := range m.Params {
		if p.Name == param {
			return p.Shape
		}
	}
	return nil
}

func paramOf(m *artifacts.Manifest, name string) string {
	for _, s := range m.Optimizer.States {
		if s.Name == name {
			return s.Param
		}
	}
	return name
}

// TestUnloweredOpNamed: an op the import does not lower is an error that
// names it.
func TestUnloweredOpNamed(t *testing.T) {
	dir := t.TempDir()
	for _, f := range []string{"checkpoint", "eval_model.onnx", "optimizer_model.onnx"} {
		b, _ := os.ReadFile(filepath.Join(v1121, f))
		os.WriteFile(filepath.Join(dir, f), b, 0o644)
	}
	raw, _ := os.ReadFile(filepath.Join(v1121, "training_model.onnx"))
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(raw, mp); err != nil {
		t.Fatal(err)
	}
	for _, n := range mp.Graph.Node {
		if n.GetOpType() == "ReluGrad" {
			n.OpType = proto.String("QuickGeluGrad")
		}
	}
	raw, _ = proto.Marshal(mp)
	os.WriteFile(filepath.Join(dir, "training_model.onnx"), raw, 0o644)
	_, err := ortimport.Import(ortimport.Options{Dir: dir, Out: t.TempDir()})
	var u *ortimport.UnsupportedOpError
	if !errors.As(err, &u) || !u.BadInput() || !strings.Contains(err.Error(), "QuickGeluGrad") {
		t.Fatalf("err = %v, want an UnsupportedOpError naming QuickGeluGrad", err)
	}
}
