package models_test

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/graph"
	"github.com/ortrain/ortrain/training/safetensors"
)

// python is Debian's interpreter, whose PyTorch 1.13 the examples target.
const python = "/usr/bin/python3"

// TestPyTorchExamplesMatchRecipes runs each PyTorch export example at a
// tiny size and checks it against the Go recipe of the same parameters:
//
//   - the exported initializers (PyTorch's state_dict) have the same names
//     and shapes as the recipe graph's parameters;
//   - the exported graph, run forward on ONNX Runtime with the example's
//     batch, gives the loss PyTorch computed;
//   - the recipe graph, given the exported weights, gives that loss too:
//     the Go recipe and the PyTorch module compute the same function.
//
// It skips where /usr/bin/python3 has no PyTorch.
func TestPyTorchExamplesMatchRecipes(t *testing.T) {
	if err := exec.Command(python, "-c", "import torch").Run(); err != nil {
		t.Skipf("%s has no PyTorch: %v", python, err)
	}
	orttest.Init(t)
	for _, tc := range []struct {
		script, file, recipe string
		params               map[string]any
		args                 []string
		// files are recipe parameters naming a file the script writes
		// into its output directory.
		files map[string]string
	}{
		{"export_vqgan3d.py", "vqgan3d.onnx", "vqgan3d", map[string]any{"patch_size": []int{8, 8, 16}, "channels": 8,
			"channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4}, nil, nil},
		// With both discriminators past their start step: the gradients
		// are the anchors' two optimizer steps (autoencoder with the
		// discriminators frozen, discriminators on the detached
		// reconstruction) at the same weights.
		{"export_vqgan3d.py", "vqgan3d.onnx", "vqgan3d", map[string]any{"patch_size": []int{8, 8, 16}, "channels": 8,
			"channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4,
			"l1_weight": 4.0, "image_gan_weight": 1.0, "video_gan_weight": 0.5, "gan_feat_weight": 4.0, "discriminator_iter_start": 3,
			"disc_channels": 8, "disc_layers": 2}, []string{"--step", "5"}, nil},
		// Group-norm image discriminator, vanilla loss, no feature matching.
		{"export_vqgan3d.py", "vqgan3d.onnx", "vqgan3d", map[string]any{"patch_size": []int{8, 8, 16}, "channels": 8,
			"channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4,
			"image_gan_weight": 0.7, "disc_channels": 8, "disc_layers": 3, "disc_norm": "group", "disc_loss_type": "vanilla"}, []string{"--step", "2"}, nil},
		// TATS's EMA codebook with dead-code restarts: the buffers after
		// one update against the twin's (most codes restart at step 1).
		{"export_vqgan3d.py", "vqgan3d.onnx", "vqgan3d", map[string]any{"patch_size": []int{8, 8, 16}, "channels": 8,
			"channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4,
			"codebook_decay": 0.9, "restart_thres": 0.05}, nil, nil},
		// A perceptual network (LPIPS-shaped, narrow, random weights) on
		// the slices beside the image discriminator: its weights frozen,
		// the gradient through it to the autoencoder checked.
		{"export_vqgan3d.py", "vqgan3d.onnx", "vqgan3d", map[string]any{"patch_size": []int{8, 16, 16}, "channels": 8,
			"channel_mult": []int{1, 2}, "res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4,
			"image_gan_weight": 1.0, "disc_channels": 8, "disc_layers": 2, "perceptual_weight": 0.5},
			[]string{"--step", "4", "--perceptual-widths", "4,8,8,16,16"}, map[string]string{"perceptual_model": "lpips.onnx"}},
		{"export_diffusionlm.py", "diffusionlm.onnx", "bd3lm", map[string]any{"vocab": 20, "mask_token": 19, "hidden": 16,
			"layers": 2, "heads": 2, "seq_len": 12, "block_size": 4, "tie_embeddings": true}, nil, nil},
		{"export_diffusionlm.py", "diffusionlm.onnx", "bd3lm", map[string]any{"vocab": 20, "mask_token": 19, "hidden": 16,
			"layers": 1, "heads": 4, "seq_len": 8, "blocks": []int{2, 2, 4}, "tie_embeddings": false}, nil, nil},
	} {
		dir := t.TempDir()
		cfg, _ := json.Marshal(tc.params)
		cmd := exec.Command(python, append([]string{filepath.Join("pytorch", tc.script), dir, "--config", string(cfg), "--batch", "3"}, tc.args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v\n%s", tc.script, err, out)
		}
		exported, err := graph.Load(filepath.Join(dir, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		for key, file := range tc.files {
			tc.params[key] = filepath.Join(dir, file)
		}
		m, err := models.Build(tc.recipe, tc.params)
		if err != nil {
			t.Fatal(err)
		}
		ref, _, err := safetensors.Read(filepath.Join(dir, "reference.safetensors"))
		if err != nil {
			t.Fatal(err)
		}
		// Buffers the export leaves out (read only by the recipe's buffer
		// updates) start from PyTorch's values, which the reference holds.
		for _, r := range ref {
			if name, ok := strings.CutPrefix(r.Name, "init."); ok {
				m.Graph.AddInitializer(graph.Raw(name, dtype.Float32, r.Shape, r.Data))
				exported.AddInitializer(graph.Raw(name, dtype.Float32, r.Shape, r.Data))
			}
		}
		if got, want := params(exported), params(m.Graph); !maps(got, want) {
			t.Errorf("%s: exported parameters %v\nrecipe parameters %v", tc.script, got, want)
			continue
		}
		feeds, want := map[string]*ort.Value{}, 0.0
		for _, r := range ref {
			if slices.Contains(exported.Inputs, r.Name) {
				feeds[r.Name] = value(t, r)
			}
			if r.Name == "loss" {
				want = float64(math.Float32frombits(binary.LittleEndian.Uint32(r.Data)))
			}
		}
		lossOf := func(g *graph.Graph) float64 {
			return float64(ort.Data[float32](steptest.Forward(t, g, feeds, "loss")["loss"])[0])
		}
		ex := lossOf(exported)
		for name := range params(exported) {
			tensor, _ := exported.Const(name)
			m.Graph.AddInitializer(tensor)
		}
		rec := lossOf(m.Graph)
		t.Logf("%s %s: PyTorch loss %.6f, exported graph %.6f, Go recipe with PyTorch's weights %.6f", tc.script, cfg, want, ex, rec)
		for _, got := range []float64{ex, rec} {
			if math.Abs(got-want) > 1e-4*(1+math.Abs(want)) {
				t.Errorf("%s: loss %.6f, PyTorch computed %.6f", tc.script, got, want)
			}
		}
		checkGradients(t, tc.script, m, feeds, ref)
	}
}

// checkGradients differentiates the recipe graph (holding PyTorch's
// weights) with ortrain's autodiff, runs one training step's backward on
// the example's batch, and compares every parameter's gradient with
// PyTorch autograd's. Both sides compute in float32 with different
// summation orders; a gradient passes when its L2 error is below 1e-3 of
// its own norm (a wrong rule gives errors of order 1) or of 1e-5 of the
// whole gradient's: some gradients are zero in exact arithmetic (the key
// bias of attention, since softmax ignores a shift shared by all keys; a
// convolution's bias before training-mode BatchNorm, which removes any
// per-channel shift) and both sides return rounding noise for them
// (1e-11 to 1e-8).
func checkGradients(t *testing.T, script string, m *models.Model, feeds map[string]*ort.Value, ref []safetensors.Tensor) {
	_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss, LabelSmoothing: m.LabelSmoothing, Frozen: m.Frozen})
	r := steptest.Open(t, dir)
	r.Backward(feeds)
	var total float64
	for _, x := range ref {
		if strings.HasPrefix(x.Name, "grad.") {
			total = math.Hypot(total, norm(ort.Data[float32](value(t, x))))
		}
	}
	worst, worstName := 0.0, ""
	for _, x := range ref {
		name, ok := strings.CutPrefix(x.Name, "grad.")
		if !ok {
			continue
		}
		want := value(t, x)
		e := diffNorm(r.State("grad."+name), ort.Data[float32](want)) / max(norm(ort.Data[float32](want)), 1e-5*total)
		if e > worst {
			worst, worstName = e, name
		}
		if e > 1e-3 {
			t.Errorf("%s: gradient of %s: relative L2 error %.2e against PyTorch (norms %.3g, PyTorch %.3g)", script, name, e, norm(r.State("grad."+name)), norm(ort.Data[float32](want)))
		}
	}
	t.Logf("%s: worst gradient %s, relative L2 error %.2e", script, worstName, worst)
	// Buffers after the step's update (the EMA codebook's), against the
	// twin's update at the same weights.
	for _, x := range ref {
		name, ok := strings.CutPrefix(x.Name, "buffer.")
		if !ok {
			continue
		}
		want := ort.Data[float32](value(t, x))
		e := diffNorm(r.State(name), want) / max(norm(want), 1e-12)
		t.Logf("%s: buffer %s after the update, relative L2 error %.2e", script, name, e)
		if e > 1e-5 {
			t.Errorf("%s: buffer %s after the update: relative L2 error %.2e against PyTorch", script, name, e)
		}
	}
}

func diffNorm(got, want []float32) float64 {
	var d float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
	}
	return math.Sqrt(d)
}

// params maps a graph's trained tensors (floating initializers of rank >=
// 1) to their shapes.
func params(g *graph.Graph) map[string][]int64 {
	p := map[string][]int64{}
	for _, name := range g.InitOrder {
		if info := g.Info(name); info.Float() && info.Rank() >= 1 {
			p[name] = info.Shape
		}
	}
	return p
}

func maps(a, b map[string][]int64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if !slices.Equal(v, b[k]) {
			return false
		}
	}
	return true
}

// value turns a safetensors tensor into a host tensor.
func value(t *testing.T, r safetensors.Tensor) *ort.Value {
	var v *ort.Value
	var err error
	switch r.DType {
	case ort.Float32:
		f := make([]float32, len(r.Data)/4)
		for i := range f {
			f[i] = math.Float32frombits(binary.LittleEndian.Uint32(r.Data[4*i:]))
		}
		v, err = ort.NewTensor(r.Shape, f)
	case ort.Int64:
		n := make([]int64, len(r.Data)/8)
		for i := range n {
			n[i] = int64(binary.LittleEndian.Uint64(r.Data[8*i:]))
		}
		v, err = ort.NewTensor(r.Shape, n)
	case ort.Uint8:
		v, err = ort.NewTensor(r.Shape, slices.Clone(r.Data))
	default:
		t.Fatalf("%s: unexpected type %v", r.Name, r.DType)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	return v
}

func norm(x []float32) float64 {
	var n float64
	for _, v := range x {
		n += float64(v) * float64(v)
	}
	return math.Sqrt(n)
}
