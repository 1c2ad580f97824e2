package artifacts_test

import (
	"errors"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
)

// wantBadInput fails unless err is a bad-input error (exit 2) whose
// message has every one of want.
func wantBadInput(t *testing.T, err error, want ...string) {
	t.Helper()
	var bi interface{ BadInput() bool }
	if err == nil || !errors.As(err, &bi) || !bi.BadInput() {
		t.Fatalf("err = %v, want a bad-input error", err)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not mention %q", err, w)
		}
	}
}

// boolConst is a 1-D bool constant.
func boolConst(b *graph.Builder, v ...bool) string {
	raw := make([]byte, len(v))
	for i, x := range v {
		if x {
			raw[i] = 1
		}
	}
	return b.Const(graph.Raw("", ort.Bool, []int64{int64(len(v))}, raw))
}

func build(t *testing.T, opts artifacts.Options) (*artifacts.Manifest, error) {
	t.Helper()
	opts.Out = filepath.Join(t.TempDir(), "art")
	if opts.Loss == "" {
		opts.Loss = "mse"
	}
	return artifacts.Build(opts)
}

// tiedLM is a token model whose output head reads its embedding table
// transposed as a separate initializer, as torch.onnx.export's constant
// folding writes a tied head (x @ emb.weight.T on a 3-D input).
func tiedLM(r *rand.Rand, head []float32) *graph.Graph {
	g := graph.New("lm", 17)
	g.AddInput("tokens", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{2, 3}})
	emb := randn(r, 5*4, 1)
	g.AddInitializer(graph.Float32s("emb.weight", []int64{5, 4}, emb))
	if head == nil {
		head = make([]float32, 4*5)
		for i := range 5 {
			for j := range 4 {
				head[j*5+i] = emb[i*4+j]
			}
		}
	}
	g.AddInitializer(graph.Float32s("onnx::MatMul_29", []int64{4, 5}, head))
	b := graph.NewBuilder(g, "")
	h := b.Op("Gather", []string{"emb.weight", "tokens"})
	b.OpInto("logits", "MatMul", []string{h, "onnx::MatMul_29"})
	g.Outputs = []string{"logits"}
	return g
}

// TestBuildRefusesTiedCopies: a trained 2-D initializer that is the
// transpose (or a copy) of another is one weight stored twice; training
// both would untie them, so the build is refused naming both and how to
// re-export. Freezing one, or weights equal only by a constant
// initialisation, build.
func TestBuildRefusesTiedCopies(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	_, err := build(t, artifacts.Options{Graph: tiedLM(r, nil)})
	wantBadInput(t, err, "emb.weight", "onnx::MatMul_29", "transpose", "do_constant_folding=False", "ortrain_export.py")

	if _, err := build(t, artifacts.Options{Graph: tiedLM(r, nil), Frozen: []string{"onnx::MatMul_29"}}); err != nil {
		t.Errorf("with the copy frozen: %v", err)
	}
	if _, err := build(t, artifacts.Options{Graph: tiedLM(r, randn(r, 20, 1))}); err != nil {
		t.Errorf("independent weights: %v", err)
	}

	// A copy under torch's name for a folded constant is refused; equal
	// initial values under parameter names (nn.TransformerEncoder
	// deep-copies its first layer) and zero-initialised weights build.
	copies := func(second string) *graph.Graph {
		g := graph.New("copy", 17)
		g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
		w := randn(rand.New(rand.NewPCG(5, 6)), 16, 1)
		g.AddInitializer(graph.Float32s("a.weight", []int64{4, 4}, w))
		g.AddInitializer(graph.Float32s(second, []int64{4, 4}, w))
		g.AddInitializer(graph.Float32s("z1.weight", []int64{4, 4}, make([]float32, 16)))
		g.AddInitializer(graph.Float32s("z2.weight", []int64{4, 4}, make([]float32, 16)))
		b := graph.NewBuilder(g, "")
		b.OpInto("y", "Add", []string{b.MatMul(b.MatMul("x", "a.weight"), second), b.MatMul(b.MatMul("x", "z1.weight"), "z2.weight")})
		g.Outputs = []string{"y"}
		return g
	}
	_, err = build(t, artifacts.Options{Graph: copies("onnx::MatMul_7")})
	wantBadInput(t, err, "onnx::MatMul_7 [4 4] is a copy of a.weight")
	if strings.Contains(err.Error(), "z1") {
		t.Errorf("zero-initialised weights called copies: %v", err)
	}
	if _, err := build(t, artifacts.Options{Graph: copies("layers.1.weight")}); err != nil {
		t.Errorf("layers initialised equal refused: %v", err)
	}
}

// TestBuildWarnsAboutBuffersAndFolding: trained initializers with the names
// torch.onnx.export makes up for folded constants, and ones no op reads as
// a weight (a normalisation mean/std feeding Sub/Div), are warned about in
// the manifest; frozen, they are not. The project's own test models and
// recipes build without warnings.
func TestBuildWarnsAboutBuffersAndFolding(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	g := graph.New("norm", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
	g.AddInitializer(graph.Float32s("mean", []int64{3}, []float32{0.485, 0.456, 0.406}))
	g.AddInitializer(graph.Float32s("std", []int64{3}, []float32{0.229, 0.224, 0.225}))
	g.AddInitializer(graph.Float32s("onnx::Gemm_21", []int64{2, 3}, randn(r, 6, 1)))
	g.AddInitializer(graph.Float32s("fc.bias", []int64{2}, randn(r, 2, 1)))
	b := graph.NewBuilder(g, "")
	x := b.Div(b.Sub("x", "mean"), "std")
	b.OpInto("y", "Gemm", []string{x, "onnx::Gemm_21", "fc.bias"}, graph.AInt("transB", 1))
	g.Outputs = []string{"y"}
	m, err := build(t, artifacts.Options{Graph: g})
	if err != nil {
		t.Fatal(err)
	}
	all := strings.Join(m.Warnings, "\n")
	if len(m.Warnings) != 2 || !strings.Contains(all, "onnx::Gemm_21") || !strings.Contains(all, "mean, std") ||
		!strings.Contains(all, "--frozen") || !strings.Contains(all, "do_constant_folding=False") || strings.Contains(all, "fc.bias") {
		t.Errorf("warnings %q, want one naming onnx::Gemm_21 and one naming mean and std", m.Warnings)
	}
	if s := (artifacts.Report{Manifest: m}).String(); !strings.Contains(s, "warning") || !strings.Contains(s, "mean, std") {
		t.Errorf("artifacts inspect does not show the warnings:\n%s", s)
	}
	if m, err := build(t, artifacts.Options{Graph: g, Frozen: []string{"mean", "std", "onnx::*"}}); err != nil || len(m.Warnings) != 0 {
		t.Errorf("with them frozen: warnings %q, err %v", m.Warnings, err)
	}

	// Weights read as PyTorch's layers read them, under names that are not
	// PyTorch's: an embedding table, a bias added to a MatMul, a LayerNorm
	// written out (as exported before opset 17) with its scale and shift.
	g = graph.New("layers", 17)
	g.AddInput("tokens", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{2, 3}})
	g.AddInitializer(graph.Float32s("table", []int64{5, 4}, randn(r, 20, 1)))
	g.AddInitializer(graph.Float32s("proj", []int64{4, 4}, randn(r, 16, 1)))
	g.AddInitializer(graph.Float32s("proj_b", []int64{4}, randn(r, 4, 1)))
	g.AddInitializer(graph.Float32s("gain", []int64{4}, randn(r, 4, 1)))
	g.AddInitializer(graph.Float32s("shift", []int64{4}, randn(r, 4, 1)))
	b = graph.NewBuilder(g, "")
	h := b.Add(b.MatMul(b.Op("Gather", []string{"table", "tokens"}), "proj"), "proj_b")
	d := b.Sub(h, b.ReduceMean(h, true, -1))
	n := b.Div(d, b.Sqrt(b.Add(b.ReduceMean(b.Mul(d, d), true, -1), b.Scalar(ort.Float32, 1e-5))))
	b.OpInto("y", "Add", []string{b.Mul(n, "gain"), "shift"})
	g.Outputs = []string{"y"}

	quiet := map[string]artifacts.Options{
		"mlp":               {Graph: mlp(r), Loss: "cross_entropy"},
		"resnet":            {Graph: resnet(r), Loss: "cross_entropy"},
		"layers, own names": {Graph: g},
	}
	for name, params := range map[string]map[string]any{
		"resnet": {"depth": 18, "width": 4, "classes": 3, "image_size": 32},
		"vqgan3d": {"patch_size": []int{8, 8, 8}, "channels": 8, "channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4,
			"embed_dim": 4, "codebook_size": 16, "groups": 4},
		"bd3lm": {"vocab": 20, "mask_token": 19, "hidden": 16, "layers": 2, "heads": 2, "seq_len": 8, "block_size": 4},
	} {
		rm, err := models.Build(name, params)
		if err != nil {
			t.Fatal(err)
		}
		quiet["recipe "+name] = artifacts.Options{Graph: rm.Graph, Loss: rm.Loss, Frozen: rm.Frozen, LabelSmoothing: rm.LabelSmoothing}
	}
	for name, opts := range quiet {
		m, err := build(t, opts)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if len(m.Warnings) > 0 {
			t.Errorf("%s warns: %q", name, m.Warnings)
		}
	}
}

// TestBuildRefusesLowPrecisionParams: float16 or bfloat16 initializers that
// would train are refused (ortrain keeps float32 master weights), naming
// them and what to do instead.
func TestBuildRefusesLowPrecisionParams(t *testing.T) {
	for _, dt := range []ort.DType{ort.Float16, ort.BFloat16} {
		g := graph.New("half", 17)
		g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
		g.AddInitializer(graph.Raw("l1.weight", dt, []int64{4, 3}, make([]byte, 2*12)))
		g.AddInitializer(graph.Float32s("l1.bias", []int64{3}, []float32{1, 2, 3}))
		b := graph.NewBuilder(g, "")
		b.OpInto("y", "Add", []string{b.Cast(b.MatMul(b.Cast("x", dt), "l1.weight"), ort.Float32), "l1.bias"})
		g.Outputs = []string{"y"}
		_, err := build(t, artifacts.Options{Graph: g})
		wantBadInput(t, err, "l1.weight ("+dt.String(), "float32 master weights", "--precision fp16", "16-mixed")
		if strings.Contains(err.Error(), "l1.bias") {
			t.Errorf("%v: float32 l1.bias named: %v", dt, err)
		}
	}
}

// TestBuildRefusesUnmatchedGlobs: a --trainable or --frozen glob that
// matches no initializer is refused naming it and listing the names, with
// a suggestion where it matches a dotted suffix.
func TestBuildRefusesUnmatchedGlobs(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	_, err := build(t, artifacts.Options{Graph: mlp(r), Frozen: []string{"backbone.*"}})
	wantBadInput(t, err, `--frozen "backbone.*"`, "model.frozen", "fc1.weight, fc1.bias, fc2.weight, fc2.bias")
	g := graph.New("net", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.AddInitializer(graph.Float32s("net.fc1.weight", []int64{4, 4}, randn(r, 16, 0.5)))
	g.AddInitializer(graph.Float32s("net.fc2.weight", []int64{4, 2}, randn(r, 8, 0.5)))
	g.AddInitializer(graph.Float32s("net.fc2.bias", []int64{2}, randn(r, 2, 0.5)))
	b := graph.NewBuilder(g, "")
	b.OpInto("y", "Add", []string{b.MatMul(b.Relu(b.MatMul("x", "net.fc1.weight")), "net.fc2.weight"), "net.fc2.bias"})
	g.Outputs = []string{"y"}
	_, err = build(t, artifacts.Options{Graph: g, Trainable: []string{"fc2.*"}})
	wantBadInput(t, err, `--trainable "fc2.*"`, `did you mean "net.fc2.*"`)
	if _, err := build(t, artifacts.Options{Graph: g, Trainable: []string{"net.fc2.*"}, Frozen: []string{"*.bias"}}); err != nil {
		t.Errorf("matching globs: %v", err)
	}
}

// twoOut has outputs features [batch,16] (first) and logits [batch,3].
func twoOut(r *rand.Rand) *graph.Graph {
	g := graph.New("two", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 8}})
	g.AddInitializer(graph.Float32s("f.weight", []int64{8, 16}, randn(r, 128, 0.3)))
	g.AddInitializer(graph.Float32s("h.weight", []int64{16, 3}, randn(r, 48, 0.3)))
	b := graph.NewBuilder(g, "")
	b.OpInto("features", "Relu", []string{b.MatMul("x", "f.weight")})
	b.OpInto("logits", "MatMul", []string{"features", "h.weight"})
	b.OpInto("total", "ReduceMean", []string{"logits"}, graph.AInt("keepdims", 0))
	g.Outputs = []string{"features", "logits", "total"}
	return g
}

// TestBuildLossOutput: a built-in loss reads the first output unless
// --loss KIND:OUTPUT names another, and a failure says which it read; a
// model's own loss is named as output:NAME or NAME; a missing loss output
// lists the outputs.
func TestBuildLossOutput(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	_, err := build(t, artifacts.Options{Graph: twoOut(r), Loss: "cross_entropy"})
	wantBadInput(t, err, `first output "features"`, "cross_entropy:OUTPUT", "h.weight")
	m, err := build(t, artifacts.Options{Graph: twoOut(r), Loss: "cross_entropy:logits"})
	if err != nil {
		t.Fatal(err)
	}
	if m.LossSpec.Output != "logits" || m.Classes != 3 {
		t.Errorf("loss spec %+v, classes %d; want cross_entropy on logits, 3 classes", m.LossSpec, m.Classes)
	}
	for _, l := range []string{"total", "output:total"} {
		if m, err := build(t, artifacts.Options{Graph: twoOut(r), Loss: l}); err != nil || m.LossSpec.Output != "total" {
			t.Errorf("--loss %s: %v", l, err)
		}
	}
	_, err = build(t, artifacts.Options{Graph: twoOut(r), Loss: "mse:nope"})
	wantBadInput(t, err, `"nope"`, "features, logits, total")
	_, err = artifacts.Build(artifacts.Options{Graph: twoOut(r), Out: t.TempDir()})
	wantBadInput(t, err, "no output named loss", "features, logits, total")
}

// TestBuildNoParamsMessage: a model exported with export_params=False has
// its weights as graph inputs; the refusal names the file and says so.
func TestBuildNoParamsMessage(t *testing.T) {
	g := graph.New("noparams", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 4}})
	g.AddInput("l1.weight", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{4, 2}})
	b := graph.NewBuilder(g, "")
	b.OpInto("y", "MatMul", []string{"x", "l1.weight"})
	g.Outputs = []string{"y"}
	path := filepath.Join(t.TempDir(), "noparams.onnx")
	if err := g.Save(path, graph.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	_, err := build(t, artifacts.Options{Model: path})
	wantBadInput(t, err, path, "l1.weight", "export_params=True")
}
