package artifacts_test

import (
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/optim"
	"github.com/ortrain/ortrain/training/safetensors"
)

// trainer drives the three graphs the way the real trainer does, with host
// values: state tensors are read from weights.safetensors and zeros, and
// every output named X.out replaces X.
type trainer struct {
	t               *testing.T
	m               *artifacts.Manifest
	train, eval, op *ort.Session
	state           map[string]*ort.Value
	step            int
}

func newTrainer(t *testing.T, dir string) *trainer {
	return newTrainerOpts(t, dir, ort.Options{})
}

// newTrainerOpts opens dir's sessions with opts.
func newTrainerOpts(t *testing.T, dir string, opts ort.Options) *trainer {
	orttest.Init(t)
	m, err := artifacts.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	tr := &trainer{t: t, m: m, state: map[string]*ort.Value{}}
	open := func(f string) *ort.Session {
		s, err := ort.NewSession(filepath.Join(dir, f), opts)
		if err != nil {
			t.Fatalf("%s does not load on stock ONNX Runtime: %v", f, err)
		}
		t.Cleanup(s.Close)
		return s
	}
	tr.train, tr.eval, tr.op = open(artifacts.TrainingFile), open(artifacts.EvalFile), open(artifacts.OptimizerFile)
	ws, _, err := safetensors.Read(filepath.Join(dir, artifacts.WeightsFile))
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range ws {
		if w.DType != ort.Float32 {
			t.Fatalf("weight %s is %v; this test trainer handles float32", w.Name, w.DType)
		}
		v, err := ort.NewEmpty(w.DType, w.Shape)
		if err != nil {
			t.Fatal(err)
		}
		raw := bytesOf(v)
		copy(raw, w.Data)
		tr.state[w.Name] = v
	}
	shapes := map[string][]int64{}
	for _, p := range m.Params {
		shapes[p.Name] = p.Shape
	}
	for _, gr := range m.Gradients {
		tr.state[gr.Name()], _ = ort.NewEmpty(ort.Float32, shapes[gr.Param])
	}
	for _, s := range m.Optimizer.States {
		tr.state[s.Name], _ = ort.NewEmpty(ort.Float32, shapes[s.Param])
	}
	t.Cleanup(func() {
		for _, v := range tr.state {
			v.Close()
		}
	})
	return tr
}

// bytesOf views a float32 host tensor's memory as bytes.
func bytesOf(v *ort.Value) []byte {
	f := ort.Data[float32](v)
	if len(f) == 0 {
		return nil
	}
	return unsafeBytes(f)
}

func (tr *trainer) feed(s *ort.Session, data map[string]*ort.Value) map[string]*ort.Value {
	in := map[string]*ort.Value{}
	for _, i := range s.Inputs() {
		if v, ok := data[i.Name]; ok {
			in[i.Name] = v
		} else if v, ok := tr.state[i.Name]; ok {
			in[i.Name] = v
		} else {
			tr.t.Fatalf("nothing to feed input %s", i.Name)
		}
	}
	return in
}

// absorb takes a run's X.out outputs as the new X.
func (tr *trainer) absorb(s *ort.Session, outs []*ort.Value) map[string]*ort.Value {
	rest := map[string]*ort.Value{}
	for i, o := range s.Outputs() {
		name := o.Name
		if base, ok := cutSuffix(name, ".out"); ok {
			if _, known := tr.state[base]; known {
				tr.state[base].Close()
				tr.state[base] = outs[i]
				continue
			}
		}
		rest[name] = outs[i]
	}
	return rest
}

func cutSuffix(s, suf string) (string, bool) {
	if len(s) > len(suf) && s[len(s)-len(suf):] == suf {
		return s[:len(s)-len(suf)], true
	}
	return s, false
}

// Step runs the training graph on one batch (reset on, no accumulation)
// and then the optimizer graph; it returns the loss.
func (tr *trainer) Step(data map[string]*ort.Value, lr float32) float64 {
	reset, _ := ort.NewScalar(true)
	defer reset.Close()
	data[artifacts.Reset] = reset
	outs, err := tr.train.Run(tr.feed(tr.train, data))
	if err != nil {
		tr.t.Fatal(err)
	}
	rest := tr.absorb(tr.train, outs)
	l := float64(ort.Data[float32](rest["loss"])[0])
	for _, v := range rest {
		v.Close()
	}
	tr.step++
	sc := map[string]*ort.Value{}
	sc["lr"], _ = ort.NewScalar(lr)
	sc["step"], _ = ort.NewScalar(float32(tr.step))
	sc["grad_scale"], _ = ort.NewScalar[float32](1)
	sc["clip_norm"], _ = ort.NewScalar[float32](5)
	if err := tr.m.PackHost(tr.state); err != nil {
		tr.t.Fatal(err)
	}
	outs, err = tr.op.Run(tr.feed(tr.op, sc))
	if err != nil {
		tr.t.Fatal(err)
	}
	for _, v := range tr.absorb(tr.op, outs) {
		v.Close()
	}
	tr.m.UnpackHost(tr.state)
	for _, v := range sc {
		v.Close()
	}
	return l
}

// Eval returns the eval graph's loss on a batch.
func (tr *trainer) Eval(data map[string]*ort.Value) float64 {
	outs, err := tr.eval.Run(tr.feed(tr.eval, data), "loss")
	if err != nil {
		tr.t.Fatal(err)
	}
	defer outs[0].Close()
	return float64(ort.Data[float32](outs[0])[0])
}

func randn(r *rand.Rand, n int, scale float64) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(r.NormFloat64() * scale)
	}
	return v
}

// mlp is x[batch,4] -> Gemm(16) -> Relu -> MatMul(16x3) + bias: logits.
func mlp(r *rand.Rand) *graph.Graph {
	g := graph.New("mlp", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.Dims["x"] = []string{"batch", ""}
	g.AddInitializer(graph.Float32s("fc1.weight", []int64{16, 4}, randn(r, 64, 0.5)))
	g.AddInitializer(graph.Float32s("fc1.bias", []int64{16}, make([]float32, 16)))
	g.AddInitializer(graph.Float32s("fc2.weight", []int64{16, 3}, randn(r, 48, 0.25)))
	g.AddInitializer(graph.Float32s("fc2.bias", []int64{3}, make([]float32, 3)))
	b := graph.NewBuilder(g, "")
	h := b.Relu(b.Op("Gemm", []string{"x", "fc1.weight", "fc1.bias"}, graph.AInt("transB", 1)))
	b.OpInto("logits", "Add", []string{b.MatMul(h, "fc2.weight"), "fc2.bias"})
	g.Outputs = []string{"logits"}
	return g
}

// TestMLPTrains: three Gaussian blobs in 4-D, cross-entropy, AdamW lr 0.01;
// through the three graphs alone the training loss must fall from above
// 0.5 at the first step (0.74 with this seed) to below 0.05 by step 150 of
// batch 32, and the eval graph, on a batch of another size, must agree.
func TestMLPTrains(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	dir := filepath.Join(t.TempDir(), "mlp")
	if _, err := artifacts.Build(artifacts.Options{Graph: mlp(r), Out: dir, Loss: "cross_entropy"}); err != nil {
		t.Fatal(err)
	}
	tr := newTrainer(t, dir)
	centers := [][]float64{{2, 0, 0, 1}, {-1, 2, 0, -1}, {0, -2, 1.5, 0}}
	batch := func(n int) map[string]*ort.Value {
		x := make([]float32, 4*n)
		y := make([]int64, n)
		for i := 0; i < n; i++ {
			c := r.IntN(3)
			y[i] = int64(c)
			for k := 0; k < 4; k++ {
				x[4*i+k] = float32(centers[c][k] + 0.5*r.NormFloat64())
			}
		}
		xv, _ := ort.NewTensor([]int64{int64(n), 4}, x)
		yv, _ := ort.NewTensor([]int64{int64(n)}, y)
		return map[string]*ort.Value{"x": xv, "target": yv}
	}
	var first, last float64
	for step := 0; step < 150; step++ {
		d := batch(32)
		l := tr.Step(d, 0.01)
		if step == 0 {
			first = l
		}
		last = l
		for _, v := range d {
			v.Close()
		}
	}
	d := batch(256) // a different batch size: the batch dimension is symbolic
	ev := tr.Eval(d)
	t.Logf("MLP: loss %.3f at step 1, %.3f at step 150, eval %.3f", first, last, ev)
	if first < 0.5 || last > 0.05 || ev > 0.05 {
		t.Errorf("MLP loss %.3f -> %.3f (eval %.3f), want from > 0.5 to < 0.05", first, last, ev)
	}
}

func TestBuildRefusesNonEmptyOut(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644)
	_, err := artifacts.Build(artifacts.Options{Graph: mlp(rand.New(rand.NewPCG(1, 1))), Out: dir, Loss: "mse"})
	if bi, ok := err.(interface{ BadInput() bool }); !ok || !bi.BadInput() {
		t.Fatalf("err = %v, want a bad-input refusal", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "mine" {
		t.Error("existing file changed")
	}
}

// resnet is a small ResNet as torchvision exports one: stem conv-BN-ReLU-
// MaxPool, a basic block with identity shortcut, a strided block with a
// 1x1 conv-BN shortcut, global average pooling, Flatten and a Gemm head.
func resnet(r *rand.Rand) *graph.Graph {
	g := graph.New("resnet", 17)
	g.AddInput("image", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3, 16, 16}})
	g.Dims["image"] = []string{"batch", "", "", ""}
	b := graph.NewBuilder(g, "")
	conv := func(name, x string, cin, cout, k, stride int64) string {
		std := math.Sqrt(2 / float64(cin*k*k))
		g.AddInitializer(graph.Float32s(name+".weight", []int64{cout, cin, k, k}, randn(r, int(cout*cin*k*k), std)))
		p := k / 2
		return b.Op("Conv", []string{x, name + ".weight"}, graph.AInts("strides", []int64{stride, stride}), graph.AInts("pads", []int64{p, p, p, p}))
	}
	bn := func(name, x string, c int64) string {
		ones := make([]float32, c)
		for i := range ones {
			ones[i] = 1
		}
		g.AddInitializer(graph.Float32s(name+".weight", []int64{c}, ones))
		g.AddInitializer(graph.Float32s(name+".bias", []int64{c}, make([]float32, c)))
		g.AddInitializer(graph.Float32s(name+".running_mean", []int64{c}, make([]float32, c)))
		g.AddInitializer(graph.Float32s(name+".running_var", []int64{c}, ones))
		return b.Op("BatchNormalization", []string{x, name + ".weight", name + ".bias", name + ".running_mean", name + ".running_var"}, graph.AFloat("momentum", 0.9))
	}
	x := b.Relu(bn("bn1", conv("conv1", "image", 3, 8, 3, 1), 8))
	x = b.Op("MaxPool", []string{x}, graph.AInts("kernel_shape", []int64{3, 3}), graph.AInts("strides", []int64{2, 2}), graph.AInts("pads", []int64{1, 1, 1, 1}))
	h := b.Relu(bn("layer1.bn1", conv("layer1.conv1", x, 8, 8, 3, 1), 8))
	x = b.Relu(b.Add(bn("layer1.bn2", conv("layer1.conv2", h, 8, 8, 3, 1), 8), x))
	h = b.Relu(bn("layer2.bn1", conv("layer2.conv1", x, 8, 16, 3, 2), 16))
	short := bn("layer2.down.bn", conv("layer2.down.conv", x, 8, 16, 1, 2), 16)
	x = b.Relu(b.Add(bn("layer2.bn2", conv("layer2.conv2", h, 16, 16, 3, 1), 16), short))
	x = b.Op("Flatten", []string{b.Op("GlobalAveragePool", []string{x})})
	g.AddInitializer(graph.Float32s("fc.weight", []int64{4, 16}, randn(r, 64, 0.25)))
	g.AddInitializer(graph.Float32s("fc.bias", []int64{4}, make([]float32, 4)))
	b.OpInto("logits", "Gemm", []string{x, "fc.weight", "fc.bias"}, graph.AInt("transB", 1))
	g.Outputs = []string{"logits"}
	return g
}

// TestResNetTrains: 4 classes, each a fixed random 3x16x16 template plus
// noise of the same size; SGD with Nesterov momentum 0.9, lr 0.05, batch
// 16. The training loss must fall from above 1.0 (ln 4 = 1.39 at chance)
// to below 0.1 within 40 steps, the BatchNorm running statistics must have
// moved, and the eval graph (BatchNorm on running statistics) must reach
// below 0.3 on fresh data.
func TestResNetTrains(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	dir := filepath.Join(t.TempDir(), "resnet")
	m, err := artifacts.Build(artifacts.Options{Graph: resnet(r), Out: dir, Loss: "cross_entropy",
		Optimizer: optim.Config{Kind: optim.SGD, Nesterov: true, LR: 0.05}})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Buffers) != 12 || len(m.Params) != 20 {
		t.Errorf("manifest has %d buffers and %d params, want 12 and 20", len(m.Buffers), len(m.Params))
	}
	tr := newTrainer(t, dir)
	const px = 3 * 16 * 16
	templates := make([][]float64, 4)
	for c := range templates {
		for i := 0; i < px; i++ {
			templates[c] = append(templates[c], r.NormFloat64())
		}
	}
	batch := func(n int) map[string]*ort.Value {
		x := make([]float32, px*n)
		y := make([]int64, n)
		for i := 0; i < n; i++ {
			c := r.IntN(4)
			y[i] = int64(c)
			for k := 0; k < px; k++ {
				x[px*i+k] = float32(templates[c][k] + r.NormFloat64())
			}
		}
		xv, _ := ort.NewTensor([]int64{int64(n), 3, 16, 16}, x)
		yv, _ := ort.NewTensor([]int64{int64(n)}, y)
		return map[string]*ort.Value{"image": xv, "target": yv}
	}
	var first, last float64
	for step := 0; step < 40; step++ {
		d := batch(16)
		l := tr.Step(d, 0.05)
		if step == 0 {
			first = l
		}
		last = l
		for _, v := range d {
			v.Close()
		}
	}
	rm := ort.Data[float32](tr.state["bn1.running_mean"])
	moved := false
	for _, v := range rm {
		if v != 0 {
			moved = true
		}
	}
	d := batch(32)
	ev := tr.Eval(d)
	t.Logf("ResNet: loss %.3f at step 1, %.3f at step 40, eval %.3f", first, last, ev)
	if first < 1.0 || last > 0.1 || ev > 0.3 || !moved {
		t.Errorf("ResNet loss %.3f -> %.3f (eval %.3f, running stats moved %v), want > 1.0 -> < 0.1, eval < 0.3", first, last, ev, moved)
	}
}

// TestBuildRefusesSilentZeros: a parameter the loss does not reach, and an
// op without a gradient rule on the way to the loss, are refused as bad
// input naming the parameter or the node, and nothing is written; frozen,
// the unused parameter builds.
func TestBuildRefusesSilentZeros(t *testing.T) {
	orttest.Init(t)
	unused := mlp(rand.New(rand.NewPCG(1, 1)))
	unused.AddInitializer(graph.Float32s("spare.weight", []int64{3}, []float32{1, 2, 3}))
	// An op without a rule (Compress) between fc2 and the loss the model
	// computes.
	norule := mlp(rand.New(rand.NewPCG(1, 1)))
	b := graph.NewBuilder(norule, "")
	kept := b.Op("Compress", []string{b.Tanh(norule.Outputs[0]), boolConst(b, true, false, true)}, graph.AInt("axis", 1))
	b.OpInto("total", "ReduceSum", []string{b.Cast(kept, ort.Float32)}, graph.AInt("keepdims", 0))
	norule.Outputs = []string{"total"}
	for _, c := range []struct {
		name, loss string
		g          *graph.Graph
		want       []string
	}{{"unused parameter", "mse", unused, []string{"spare.weight", "--frozen"}}, {"op without a rule", "total", norule, []string{"Compress", "--stop-gradient"}}} {
		out := filepath.Join(t.TempDir(), "art")
		_, err := artifacts.Build(artifacts.Options{Graph: c.g, Out: out, Loss: c.loss})
		if bi, ok := err.(interface{ BadInput() bool }); !ok || !bi.BadInput() {
			t.Errorf("%s: err = %v, want a bad-input refusal", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not mention %s", c.name, err, w)
			}
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%s: %s was written", c.name, out)
		}
	}
	if _, err := artifacts.Build(artifacts.Options{Graph: unused, Out: filepath.Join(t.TempDir(), "art"), Loss: "mse", Frozen: []string{"spare.*"}}); err != nil {
		t.Errorf("with the unused parameter frozen: %v", err)
	}
}

// TestBuildKeepsExportFrozen: initializers the exporter lists in the
// model's ortrain.frozen metadata (PyTorch buffers, requires_grad=False
// parameters) are frozen, not trained; --trainable overrides the list, and
// a list that is not JSON is refused naming the model.
func TestBuildKeepsExportFrozen(t *testing.T) {
	orttest.Init(t)
	g := mlp(rand.New(rand.NewPCG(1, 1)))
	g.Metadata = map[string]string{artifacts.FrozenKey: `["fc2.bias"]`}
	m, err := artifacts.Build(artifacts.Options{Graph: g, Out: filepath.Join(t.TempDir(), "art"), Loss: "mse"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Frozen) != 1 || m.Frozen[0].Name != "fc2.bias" || slices.ContainsFunc(m.Params, func(p artifacts.Tensor) bool { return p.Name == "fc2.bias" }) {
		t.Errorf("frozen %v; want fc2.bias frozen and not among the parameters", m.Frozen)
	}
	m, err = artifacts.Build(artifacts.Options{Graph: g, Out: filepath.Join(t.TempDir(), "art"), Loss: "mse", Trainable: []string{"*"}})
	if err != nil || len(m.Frozen) != 0 {
		t.Errorf("--trainable '*': frozen %v, err %v; want nothing frozen", m.Frozen, err)
	}
	g.Metadata[artifacts.FrozenKey] = "fc2.bias"
	_, err = artifacts.Build(artifacts.Options{Graph: g, Model: "/models/m.onnx", Out: filepath.Join(t.TempDir(), "art"), Loss: "mse"})
	if bi, ok := err.(interface{ BadInput() bool }); !ok || !bi.BadInput() || !strings.Contains(err.Error(), "/models/m.onnx") {
		t.Errorf("metadata not JSON: err = %v, want a bad-input refusal naming the model", err)
	}
}

// TestInputShapes: a Conv net exported with free spatial sizes cannot get
// its Conv gradient (static sizes needed) and the refusal points at
// --input-shape; with the sizes fixed it builds, the batch left free.
// Shapes naming a missing input, with the wrong rank, or a size below 1
// are refused and nothing is written.
func TestInputShapes(t *testing.T) {
	orttest.Init(t)
	net := func() *graph.Graph {
		g := graph.New("convnet", 17)
		g.AddInput("image", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3, -1, -1}})
		g.Dims["image"] = []string{"batch", "", "height", "width"}
		g.AddInitializer(graph.Float32s("conv.weight", []int64{4, 3, 3, 3}, randn(rand.New(rand.NewPCG(1, 2)), 108, 0.2)))
		b := graph.NewBuilder(g, "")
		h := b.Op("Conv", []string{"image", "conv.weight"}, graph.AInts("pads", []int64{1, 1, 1, 1}))
		b.OpInto("pred", "Relu", []string{h})
		g.Outputs = []string{"pred"}
		return g
	}
	build := func(shapes map[string][]int64) (string, error) {
		out := filepath.Join(t.TempDir(), "art")
		_, err := artifacts.Build(artifacts.Options{Graph: net(), Out: out, Loss: "mse", InputShapes: shapes})
		return out, err
	}
	_, err := build(nil)
	if err == nil || !strings.Contains(err.Error(), "--input-shape") {
		t.Fatalf("free spatial sizes: %v, want a refusal pointing at --input-shape", err)
	}
	out, err := build(map[string][]int64{"image": {-1, 3, 8, 8}})
	if err != nil {
		t.Fatalf("with image=-1x3x8x8: %v", err)
	}
	m, err := artifacts.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range m.Data {
		if d.Name == "image" && !slices.Equal(d.Shape, []int64{-1, 3, 8, 8}) {
			t.Errorf("image input %v, want [-1 3 8 8]", d.Shape)
		}
	}
	for _, bad := range []map[string][]int64{{"images": {-1, 3, 8, 8}}, {"image": {3, 8, 8}}, {"image": {-1, 3, 0, 8}}, {"image": {-1, 4, 8, 8}}} {
		out, err := build(bad)
		if bi, ok := err.(interface{ BadInput() bool }); !ok || !bi.BadInput() {
			t.Errorf("%v: err = %v, want a bad-input refusal", bad, err)
		}
		if _, err := os.Stat(out); !os.IsNotExist(err) {
			t.Errorf("%v: %s was written", bad, out)
		}
	}
	if name, dims, err := artifacts.ParseInputShape("image=-1x3x224x224"); err != nil || name != "image" || !slices.Equal(dims, []int64{-1, 3, 224, 224}) {
		t.Errorf("ParseInputShape: %s %v %v", name, dims, err)
	}
	if _, _, err := artifacts.ParseInputShape("image=-1,3"); err == nil {
		t.Error("ParseInputShape accepted commas")
	}
}
