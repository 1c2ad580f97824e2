package main

import (
	"bytes"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/graph"
)

// TestArtifactsBuildOwnModels runs `artifacts build` on forward models as a
// plain torch.onnx.export writes them: what it trains is printed, suspect
// initializers are warned about, and what cannot train right (a tied weight
// stored twice by constant folding, float16 parameters, a glob that
// matches nothing, a bad model file) exits 2 saying why.
func TestArtifactsBuildOwnModels(t *testing.T) {
	dir := t.TempDir()
	save := func(name string, g *graph.Graph) string {
		p := filepath.Join(dir, name)
		if err := g.Save(p, graph.SaveOptions{}); err != nil {
			t.Fatal(err)
		}
		return p
	}
	vals := func(n int) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(i%7)*0.1 - 0.3 + float32(i)*1e-3
		}
		return v
	}
	// x [batch,3] normalised by mean/std buffers, then a Linear.
	norm := graph.New("norm", 17)
	norm.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
	norm.AddInitializer(graph.Float32s("mean", []int64{3}, []float32{0.485, 0.456, 0.406}))
	norm.AddInitializer(graph.Float32s("std", []int64{3}, []float32{0.229, 0.224, 0.225}))
	norm.AddInitializer(graph.Float32s("fc.weight", []int64{2, 3}, vals(6)))
	norm.AddInitializer(graph.Float32s("fc.bias", []int64{2}, vals(2)))
	b := graph.NewBuilder(norm, "")
	b.OpInto("logits", "Gemm", []string{b.Div(b.Sub("x", "mean"), "std"), "fc.weight", "fc.bias"}, graph.AInt("transB", 1))
	norm.Outputs = []string{"logits"}
	normPath := save("norm.onnx", norm)

	// A token model whose head is the embedding transposed, stored again.
	tied := graph.New("tied", 17)
	tied.AddInput("tokens", graph.Info{DType: ort.Int64, Known: true, Shape: []int64{2, 3}})
	emb := vals(20)
	head := make([]float32, 20)
	for i := range 5 {
		for j := range 4 {
			head[j*5+i] = emb[i*4+j]
		}
	}
	tied.AddInitializer(graph.Float32s("emb.weight", []int64{5, 4}, emb))
	tied.AddInitializer(graph.Float32s("onnx::MatMul_29", []int64{4, 5}, head))
	b = graph.NewBuilder(tied, "")
	b.OpInto("logits", "MatMul", []string{b.Op("Gather", []string{"emb.weight", "tokens"}), "onnx::MatMul_29"})
	tied.Outputs = []string{"logits"}
	tiedPath := save("tied.onnx", tied)

	half := graph.New("half", 17)
	half.AddInput("x", graph.Info{DType: ort.Float16, Known: true, Shape: []int64{-1, 4}})
	half.AddInitializer(graph.Raw("l1.weight", ort.Float16, []int64{4, 2}, make([]byte, 16)))
	b = graph.NewBuilder(half, "")
	b.OpInto("y", "MatMul", []string{"x", "l1.weight"})
	half.Outputs = []string{"y"}
	halfPath := save("half.onnx", half)

	good, err := os.ReadFile(normPath)
	if err != nil {
		t.Fatal(err)
	}
	trunc := filepath.Join(dir, "trunc.onnx")
	if err := os.WriteFile(trunc, good[:len(good)/2], 0o644); err != nil {
		t.Fatal(err)
	}

	out := func() string { return filepath.Join(t.TempDir(), "art") }
	cases := []struct {
		name        string
		args        []string
		code        int
		stdout, say []string // on stdout; on stderr
	}{
		{"buffers trained, listed and warned about", []string{"--model", normPath, "--loss", "cross_entropy"}, 0,
			[]string{"trained (4): mean [3], std [3], fc.weight [2 3], fc.bias [2]", `cross_entropy reads the model's first output "logits"`},
			[]string{"warning", "mean, std", "--frozen"}},
		{"buffers frozen", []string{"--model", normPath, "--loss", "cross_entropy", "--frozen", "mean", "--frozen", "std"}, 0,
			[]string{"trained (2): fc.weight [2 3], fc.bias [2]", "frozen (2): mean [3], std [3]"}, nil},
		{"a glob that matches nothing", []string{"--model", normPath, "--loss", "mse", "--frozen", "backbone.*"}, 2,
			nil, []string{`--frozen "backbone.*"`, "mean, std, fc.weight, fc.bias"}},
		{"a tied weight stored twice", []string{"--model", tiedPath, "--loss", "cross_entropy:logits"}, 2,
			nil, []string{"emb.weight", "onnx::MatMul_29", "do_constant_folding=False", "ortrain_export.py"}},
		{"float16 parameters", []string{"--model", halfPath, "--loss", "mse"}, 2,
			nil, []string{"l1.weight", "float32 master weights", "--precision fp16"}},
		{"a truncated model file", []string{"--model", trunc, "--loss", "mse"}, 2, nil, []string{trunc, "not an ONNX model"}},
		{"a missing model file", []string{"--model", filepath.Join(dir, "nope.onnx"), "--loss", "mse"}, 2, nil, []string{filepath.Join(dir, "nope.onnx"), "does not exist"}},
		{"no loss output", []string{"--model", normPath}, 2, nil, []string{normPath, "no output named loss", "outputs are logits"}},
	}
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			args := append([]string{"ortrain", "artifacts", "build", "--out", out()}, c.args...)
			code := run(args, &stdout, &stderr)
			if code != c.code {
				t.Fatalf("%v: exit %d, want %d; stderr %q", args, code, c.code, stderr.String())
			}
			for _, w := range c.stdout {
				if !strings.Contains(stdout.String(), w) {
					t.Errorf("stdout %q does not say %q", stdout.String(), w)
				}
			}
			for _, w := range c.say {
				if !strings.Contains(stderr.String(), w) {
					t.Errorf("stderr %q does not say %q", stderr.String(), w)
				}
			}
			if c.say == nil && stderr.Len() > 0 {
				t.Errorf("stderr %q, want nothing", stderr.String())
			}
		})
	}
}

// TestArtifactsBuildHelpDefaults: --help shows the optimizer defaults the
// manifest records, not the flags' zero values.
func TestArtifactsBuildHelpDefaults(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"ortrain", "artifacts", "build", "--help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	help := stdout.String()
	for _, w := range []string{"0.001 for adamw, 0.1 for sgd", "0.01 for adamw, 0.0001 for sgd", "(default: 0.9)", "(default: 0.999)", "(default: 1e-08)", "KIND:OUTPUT"} {
		if !strings.Contains(help, w) {
			t.Errorf("help does not show %q", w)
		}
	}
	if m := regexp.MustCompile(`--(lr|weight-decay|beta1|beta2|eps|momentum) .*\(default: 0\)`).FindString(help); m != "" {
		t.Errorf("help shows a zero default: %s", m)
	}
}

// TestArtifactsBuildRefusesUnusableGPU: mixed precision for a CUDA device
// is decided by probing that device's kernels; where it cannot be used,
// every probe would fail and every product be emulated, so the build is
// refused (exit 2, nothing written) instead of writing float32 artifacts
// for a GPU. Float32 artifacts need no probe and build anywhere.
func TestArtifactsBuildRefusesUnusableGPU(t *testing.T) {
	orttest.Init(t)
	t.Setenv(ort.LibraryEnv, ort.LibraryPath())
	if err := ort.CheckDevice(ort.CUDADevice(0), ort.Options{}); err == nil {
		t.Skip("cuda:0 is usable here")
	}
	dir := t.TempDir()
	g := graph.New("lin", 17)
	g.AddInput("x", graph.Info{DType: ort.Float32, Known: true, Shape: []int64{-1, 3}})
	g.AddInitializer(graph.Float32s("fc.weight", []int64{2, 3}, []float32{0.1, -0.2, 0.3, 0.4, -0.5, 0.6}))
	b := graph.NewBuilder(g, "")
	b.OpInto("logits", "MatMul", []string{"x", b.Op("Transpose", []string{"fc.weight"})})
	g.Outputs = []string{"logits"}
	model := filepath.Join(dir, "lin.onnx")
	if err := g.Save(model, graph.SaveOptions{}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "art")
	var stdout, stderr bytes.Buffer
	code := run([]string{"ortrain", "artifacts", "build", "--model", model, "--loss", "mse", "--precision", "fp16", "--device", "cuda:0", "--out", out}, &stdout, &stderr)
	if code != 2 || !strings.Contains(stderr.String(), "cuda:0") || !strings.Contains(stderr.String(), "--precision fp16") {
		t.Fatalf("fp16 for an unusable cuda:0: exit %d, want 2 naming the device and the precision: %s", code, stderr.String())
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("a refused build left %s behind (%v)", out, err)
	}
	stderr.Reset()
	if code := run([]string{"ortrain", "artifacts", "build", "--model", model, "--loss", "mse", "--device", "cuda:0", "--out", out}, &stdout, &stderr); code != 0 {
		t.Errorf("float32 for cuda:0: exit %d: %s", code, stderr.String())
	}
}
