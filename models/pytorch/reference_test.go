// Package pytorch_test checks ortrain's training graphs against PyTorch
// autograd on models exported through ortrain_export.py.
package pytorch_test

import (
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/safetensors"
)

// python is Debian's interpreter, which has python3-torch; the pyenv python3
// first on PATH does not.
const python = "/usr/bin/python3"

func needTorch(t *testing.T) {
	t.Helper()
	if out, err := exec.Command(python, "-c", "import torch, torchvision").CombinedOutput(); err != nil {
		t.Skipf("PyTorch is not installed for %s (apt-get install python3-torch python3-torchvision): %v\n%s", python, err, out)
	}
}

// TestResNet18MatchesAutograd exports torchvision's ResNet-18, builds
// ortrain's artifacts from it with cross-entropy and label smoothing 0.1,
// runs one training step on the CPU on the batch PyTorch used, and compares
// the loss and the gradient of every parameter with PyTorch autograd.
//
// Tolerance: both sides compute in float32 through 20 convolutions and 20
// batch norms in training mode, summing in different orders (ONNX Runtime's
// MLAS and im2col against PyTorch's oneDNN); the worst seen is 9e-6
// relative (layer4.1.conv2.weight). A gradient is accepted when its relative L2 error is below 1e-4 —
// a wrong rule (a missed transpose, a dropped term of the batch-norm
// backward) gives errors of order 1.
func TestResNet18MatchesAutograd(t *testing.T) {
	matchAutograd(t, "resnet18", []string{"--classes", "10", "--size", "64", "--batch", "4"},
		artifacts.Options{Loss: "cross_entropy", LabelSmoothing: 0.1}, 62)
}

// TestCrossEntropyInsideModelMatchesAutograd: a model whose export holds
// its own loss, F.cross_entropy (ONNX SoftmaxCrossEntropyLoss, with the
// model's own "target" input), and LeakyReLU 0.2, GroupNorm, Hardswish
// and ELU, built with --loss output:loss. Same tolerance as ResNet-18
// (float32 on both sides, different summation orders).
func TestCrossEntropyInsideModelMatchesAutograd(t *testing.T) {
	matchAutograd(t, "patchnet", []string{"--classes", "5", "--size", "16", "--batch", "4"},
		artifacts.Options{Loss: "output:loss"}, 10)
}

// TestViTMatchesAutograd: torchvision's VisionTransformer (its attention
// splits q, k, v with Slices whose bounds the export computes from
// shapes) with its input size fixed (--input-shape images=4x3x32x32: all
// the shape arithmetic then folds to constants) matches PyTorch autograd
// within the ResNet-18 tolerance; TestTorchvisionZooMatchesAutograd
// trains it with the batch size free.
func TestViTMatchesAutograd(t *testing.T) {
	matchAutograd(t, "vit", []string{"--classes", "5", "--size", "32", "--batch", "4"},
		artifacts.Options{Loss: "cross_entropy", InputShapes: map[string][]int64{"images": {4, 3, 32, 32}}}, 32)
}

// TestTorchvisionZooMatchesAutograd: torchvision architectures as users
// export them (batch size free), each with its own demands on shape
// inference and gradient rules, match the exact (float64) gradient as
// closely as PyTorch's own float32 run does: ShuffleNet's channel shuffle
// (a reshape through the batch size), Swin's and MaxViT's window
// partitions (padding and slice bounds computed from shapes, rolls,
// relative position biases), ViT's attention split (bounds read from
// shapes), ConvNeXt's layer scale and channels-last LayerNorm,
// MobileNetV3's and EfficientNet's squeeze-excitation, Hardswish and SiLU,
// DenseNet's concatenations, SqueezeNet's ceil-mode pools; and models with
// their own loss (below).
//
// Judged against float64 because deep stacks of batch norms over small
// maps are ill-conditioned, and a zero gradient (a BatchNorm bias followed
// by a convolution and another BatchNorm) is noise in any float32 run.
// RegNet and GoogLeNet are left out: at sizes a test affords, their last
// stages' 2x2 and 4x4 maps put batch-norm outputs within rounding of 0,
// so float32 runs disagree on ReLU masks and single gradients move by up to
// 6e-2 depending on the seed (PyTorch's CPU kernels, which accumulate batch
// norm in double, less so); their grouped convolutions alone match to
// 3e-7 at those sizes.
func TestTorchvisionZooMatchesAutograd(t *testing.T) {
	for _, c := range []struct {
		name        string
		size, batch int
		loss        string
	}{
		{"shufflenet", 128, 8, ""}, {"swin", 32, 4, ""}, {"vit", 32, 4, ""}, {"maxvit", 32, 4, ""}, {"convnext", 32, 4, ""},
		{"mobilenet_v3", 64, 8, ""}, {"efficientnet", 64, 8, ""}, {"densenet", 64, 8, ""},
		{"squeezenet", 64, 8, ""},
		// With their own loss (the export's "loss" output): a causal
		// transformer LM from torch.nn's layers with a tied head, a 2-D
		// U-Net upsampling by a scale factor, LR-ASPP segmentation
		// interpolating back to the image's size.
		{"gpt", 0, 4, "output:loss"}, {"unet2d", 32, 4, "output:loss"}, {"lraspp", 64, 4, "output:loss"},
		// torch.nn's recurrent layers, unrolled for training: a 2-layer
		// bidirectional LSTM, a GRU (linear_before_reset), a tanh RNN.
		{"lstm", 0, 4, "output:loss"}, {"gru", 0, 4, "output:loss"}, {"rnn", 0, 4, "output:loss"},
		// 3-D pieces (GroupNorm, SiLU, ConvTranspose3d, InstanceNorm3d, a
		// trilinear upsample); padded sequences (an embedding's
		// padding_idx, MultiheadAttention's key_padding_mask, weight_norm,
		// ignore_index).
		{"volume3d", 0, 2, "output:loss"}, {"padded_attention", 0, 3, "output:loss"},
	} {
		t.Run(c.name, func(t *testing.T) {
			opts := artifacts.Options{Loss: "cross_entropy"}
			if c.loss != "" {
				opts.Loss = c.loss
			}
			matchAutograd(t, "zoo:"+c.name, []string{"--classes", "5", "--size", fmt.Sprint(c.size), "--batch", fmt.Sprint(c.batch)},
				opts, -1)
		})
	}
}

// TestUNet3DMatchesAutograd: a 3D U-Net with LeakyReLU 0.2, a strided
// Conv3d, a ConvTranspose3d and a concatenated skip, its MSE loss inside
// the export; same tolerance.
func TestUNet3DMatchesAutograd(t *testing.T) {
	matchAutograd(t, "unet3d", []string{"--size", "8", "--batch", "2"}, artifacts.Options{Loss: "output:loss"}, 8)
}

// matchAutograd runs reference_step.py for model, builds ortrain's
// artifacts from its export with opts twice, as for the CPU provider and
// as for the CUDA provider (its gradient forms: one ConvTranspose per
// input gradient and GEMMs per weight gradient, cudaform's reductions,
// Pads and broadcasts, the norms' row statistics), runs one training step
// of each on the CPU on the batch PyTorch used, and compares the loss and
// the gradient of each of the params parameters with PyTorch autograd
// (-1: as many as PyTorch has). What the graphs a GPU runs compute
// differently from the CPU's would show here, without a GPU; and the
// mixed-precision builds a GPU makes are checked for operands of mixed
// types, which its sessions refuse.
func matchAutograd(t *testing.T, model string, args []string, opts artifacts.Options, params int) {
	needTorch(t)
	orttest.Init(t)
	dir := t.TempDir()
	cmd := exec.Command(python, append([]string{"reference_step.py", dir, "--model", model}, args...)...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("reference_step.py: %v\n%s", err, out)
	}
	ref := readTensors(t, filepath.Join(dir, "reference.safetensors"))
	for _, forms := range []struct {
		name string
		cuda bool
	}{{"cpu-forms", false}, {"cuda-forms", true}} {
		t.Run(forms.name, func(t *testing.T) {
			o := opts
			o.Model, o.Out = filepath.Join(dir, "model.onnx"), filepath.Join(dir, forms.name)
			if forms.cuda {
				o.CUDA, o.ConvForm = true, autodiff.ConvFormFor(true)
			}
			compareStep(t, o, ref, params)
		})
	}
	// Mixed precision as a GPU builds it cannot run here (no float16
	// convolutions on the CPU), but its operands' types can be checked.
	for _, low := range []dtype.DType{dtype.BFloat16, dtype.Float16} {
		t.Run("cuda-typed-"+low.String(), func(t *testing.T) {
			o := opts
			o.Model, o.Out = filepath.Join(dir, "model.onnx"), filepath.Join(dir, "typed-"+low.String())
			o.CUDA, o.ConvForm, o.Precision, o.Probe = true, autodiff.ConvFormFor(true), low, steptest.CUDALikeKernels{}
			if _, err := artifacts.Build(o); err != nil {
				t.Fatal(err)
			}
			if steptest.CheckOperandTypes(t, o.Out, low) == 0 {
				t.Errorf("no operand in %v: the build was not typed", low)
			}
		})
	}
}

// compareStep builds the artifacts opts describes, runs one training step
// on ref's batch and compares its loss and gradients with ref's.
func compareStep(t *testing.T, opts artifacts.Options, ref map[string]*ort.Value, params int) {
	m, err := artifacts.Build(opts)
	if err != nil {
		t.Fatal(err)
	}
	art := opts.Out
	weights := readTensors(t, filepath.Join(art, "weights.safetensors"))

	sess, err := ort.NewSession(filepath.Join(art, m.Files["training"]), ort.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sess.Close()
	inputs := map[string]*ort.Value{}
	for _, d := range m.Data {
		inputs[d.Name] = ref[d.Name]
	}
	for name, v := range weights {
		inputs[name] = v
	}
	// A graph that accumulates reads its accumulators (zeros) and reset.
	for _, g := range m.Gradients {
		if g.Acc == "" {
			continue
		}
		w := weights[g.Param]
		z, err := ort.NewEmpty(w.DType(), w.Shape())
		if err != nil {
			t.Fatal(err)
		}
		inputs[g.Acc] = z
	}
	if m.Reset != "" {
		reset, _ := ort.NewScalar(true)
		inputs[m.Reset] = reset
	}
	names := []string{m.Loss}
	for _, g := range m.Gradients {
		names = append(names, g.Out)
	}
	out, err := sess.Run(inputs, names...)
	if err != nil {
		t.Fatal(err)
	}
	wantLoss := float64(ort.Data[float32](ref["loss"])[0])
	gotLoss := float64(ort.Data[float32](out[0])[0])
	if math.Abs(gotLoss-wantLoss) > 1e-5*math.Abs(wantLoss) {
		t.Errorf("loss = %.7f, PyTorch %.7f", gotLoss, wantLoss)
	}
	// The whole gradient's norm, for errors in parameters whose own
	// gradient is float32 noise next to it (see below).
	var total float64
	for _, g := range m.Gradients {
		if exact, ok := ref["grad64."+g.Param]; ok {
			for _, v := range ort.Data[float64](exact) {
				total += v * v
			}
		}
	}
	total = math.Sqrt(total)
	// worst is the largest error as a share of its tolerance.
	worst, worstName, worstErr := 0.0, "", 0.0
	for i, g := range m.Gradients {
		want, ok := ref["grad."+g.Param]
		if !ok {
			t.Errorf("PyTorch has no gradient for %s", g.Param)
			continue
		}
		got := ort.Data[float32](out[i+1])
		e, limit := relErr(got, ort.Data[float32](want)), 1e-4
		if exact, ok := ref["grad64."+g.Param]; ok {
			// Judged by the exact gradient: within 1e-4 of it, or as close
			// as PyTorch's own float32 gradient (within a factor of 4), or
			// off by less than 1e-5 of the whole gradient's norm — float32
			// reductions over the few values a deep layer's batch norm sees
			// are that noisy (PyTorch's CPU kernels accumulate them in
			// double, so its float32 run can be closer than ONNX Runtime's).
			x := ort.Data[float64](exact)
			torch := relErrExact(ort.Data[float32](want), x)
			e = relErrExact(got, x)
			limit = max(1e-4, 4*torch, 1e-5*total/norm(x))
			if e > limit {
				t.Errorf("gradient of %s: relative L2 error %.2e against the exact gradient, PyTorch's float32 %.2e", g.Param, e, torch)
			}
		} else if e > limit {
			t.Errorf("gradient of %s: relative L2 error %.2e against PyTorch", g.Param, e)
		}
		if e/limit > worst {
			worst, worstName, worstErr = e/limit, g.Param, e
		}
	}
	if params < 0 {
		params = 0
		for name := range ref {
			if strings.HasPrefix(name, "grad.") {
				params++
			}
		}
	}
	if len(m.Gradients) != params {
		t.Errorf("%d gradients, want %d (every parameter)", len(m.Gradients), params)
	}
	t.Logf("loss %.7f (PyTorch %.7f); worst gradient %s, relative L2 error %.2e (%.2f of its tolerance)", gotLoss, wantLoss, worstName, worstErr, worst)
}

func norm(v []float64) float64 {
	var n float64
	for _, x := range v {
		n += x * x
	}
	return math.Sqrt(n)
}

// relErrExact is relErr against a float64 reference.
func relErrExact(got []float32, want []float64) float64 {
	var d, n float64
	for i := range want {
		e := float64(got[i]) - want[i]
		d += e * e
		n += want[i] * want[i]
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

func relErr(got, want []float32) float64 {
	var d, n float64
	for i := range want {
		e := float64(got[i]) - float64(want[i])
		d += e * e
		n += float64(want[i]) * float64(want[i])
	}
	if n == 0 {
		return math.Sqrt(d)
	}
	return math.Sqrt(d / n)
}

func readTensors(t *testing.T, path string) map[string]*ort.Value {
	t.Helper()
	ts, _, err := safetensors.Read(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*ort.Value{}
	for _, x := range ts {
		v, err := ort.NewTensorFromBytes(x.DType, x.Shape, x.Data)
		if err != nil {
			t.Fatalf("%s: %s: %v", path, x.Name, err)
		}
		out[x.Name] = v
	}
	t.Cleanup(func() {
		for _, v := range out {
			v.Close()
		}
	})
	return out
}
