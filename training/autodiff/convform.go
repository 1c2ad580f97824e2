package autodiff

import (
	"fmt"
	"sync"

	"github.com/ortrain/ortrain/training/graph"
)

// ConvForm is how the gradients of Conv and ConvTranspose are written.
// Both forms compute the same values; they differ in how many nodes they
// take and in which kernels a provider runs them with.
type ConvForm string

const (
	// ConvFormOps writes a convolution's input gradient as one
	// ConvTranspose (cuDNN's backward-data on CUDA) and its weight
	// gradient as one Conv with batch and channel axes swapped (one GEMM
	// for a 1×1 stride-1 window): a handful of nodes per convolution.
	ConvFormOps ConvForm = "ops"
	// ConvFormOffsets writes the input gradient as a Conv of the
	// zero-interleaved output gradient by the flipped weight and the
	// weight gradient as a GEMM over the kernel offsets' windows of the
	// input: all offsets' windows gathered into one matrix where they are
	// small (convWeightGradGather: 2-D windows), else one GEMM per offset
	// over strided Slices. ONNX Runtime's CPU provider and cuBLAS run
	// these faster than the ops form's whole-map kernels.
	ConvFormOffsets ConvForm = "offsets"
	// ConvFormGEMM writes the weight gradient as the offsets form does,
	// but a volume's offsets a few at a time from slabs of the input
	// (convWeightGradSlabs) rather than one GEMM each, and an image's
	// input gradient as one ConvTranspose (cuDNN's backward-data on CUDA,
	// no zeros interleaved for a strided window, no flipped weight). A
	// volume's input gradient, and any in bfloat16, which ONNX Runtime's
	// CUDA ConvTranspose lacks, is the offsets form's Conv: on an H200
	// (2026-11-26) the VQ-GAN preset's 55 float32 3-D ConvTransposes took
	// 903 ms a step, the offsets form's Convs about 590, and its step
	// 3,805 ms against 3,452 in the offsets form.
	ConvFormGEMM ConvForm = "gemm"
)

// ConvForms lists the accepted forms.
var ConvForms = []ConvForm{ConvFormOps, ConvFormOffsets, ConvFormGEMM}

// ConvFormFor is the form for a provider. On ONNX Runtime's CPU provider
// the offsets form: a ResNet-50 step (batch 8, 224², float32, two cores)
// took 21 s with it and 37 s with the ops form, whose CPU ConvTranspose is
// slow. On CUDA the gemm form, from two profiles of ResNet-50 at batch
// 256, 16-mixed, on an H200 (2026-11-26): the ops form's 52 ConvTransposes
// took 56.7 ms a step, where the offsets form's forward and input-gradient
// Convs took 177 ms together (the input gradients about 103 of them, by
// plan's fit), and its whole-map weight-gradient Convs made the ops form
// slower overall (867 against 677 ms a step). The gemm form, measured
// later the same day on the same card: 462 ms a step against 1,473 ms in
// the offsets form. --conv-grad and model.conv_grad choose another.
func ConvFormFor(cuda bool) ConvForm {
	if cuda {
		return ConvFormGEMM
	}
	return ConvFormOffsets
}

// ParseConvForm reads a form's name; "" is the default, ConvFormOffsets.
func ParseConvForm(s string) (ConvForm, error) {
	switch f := ConvForm(s); f {
	case "", ConvFormOps, ConvFormOffsets, ConvFormGEMM:
		return f, nil
	}
	return "", fmt.Errorf("conv gradient form %q is not one of %s, %s, %s", s, ConvFormOps, ConvFormOffsets, ConvFormGEMM)
}

// Options choose between equivalent formulations of gradients.
type Options struct {
	// ConvForm is the form of convolution gradients; "" is
	// ConvFormOffsets, the CPU's (see ConvFormFor).
	ConvForm ConvForm
	// RowSums takes a training BatchNorm's dβ and dγ from per-row means
	// where its input and gradient are float32 copies of float16 values
	// (CUDA builds; see batchNormRowSums).
	RowSums bool
}

// optionsOf holds the Options of the differentiation running on a graph:
// the rules receive only the builder, whose graph keys them.
var optionsOf sync.Map // *graph.Graph → Options

// GradientsWith is Gradients with the formulations opts chooses.
func GradientsWith(g *graph.Graph, loss string, wrt []string, prefix string, opts Options) (map[string]string, error) {
	if _, err := ParseConvForm(string(opts.ConvForm)); err != nil {
		return nil, err
	}
	optionsOf.Store(g, opts)
	defer optionsOf.Delete(g)
	return Gradients(g, loss, wrt, prefix)
}

// optionsFor is the Options of the differentiation running on b's graph.
func optionsFor(b *B) Options {
	o, _ := optionsOf.Load(b.G)
	opts, _ := o.(Options)
	return opts
}

// convForm is the form the rules on b's graph write.
func convForm(b *B) ConvForm {
	if f := optionsFor(b).ConvForm; f != "" {
		return f
	}
	return ConvFormOffsets
}
