package autodiff_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/training/autodiff"
	"github.com/ortrain/ortrain/training/graph"
)

// convFormCases are windows that take special paths in one form or the
// other: a pointwise Conv (one GEMM in the ops form, one offset in the
// offsets form), a strided 1×1 (not pointwise), a window whose last
// input rows no output reads (the correlation overshoots the kernel), and
// a strided window over even sizes, whose input gradient's end pads exceed
// its start's.
var convFormCases = []fdCase{
	{name: "Conv/2d-pointwise", dtype: f32, ins: ins(normal, s(2, 3, 4, 5), s(4, 3, 1, 1), s(4)), build: op("Conv")},
	{name: "Conv/3d-pointwise", dtype: f32, ins: ins(normal, s(2, 3, 2, 3, 2), s(2, 3, 1, 1, 1)), build: op("Conv")},
	{name: "Conv/2d-1x1-stride", dtype: f32, ins: ins(normal, s(2, 3, 5, 5), s(4, 3, 1, 1)), build: op("Conv", ais("strides", s(2, 2)))},
	{name: "Conv/2d-unread-rows", dtype: f32, ins: ins(normal, s(1, 2, 8, 7), s(3, 2, 3, 3)), build: op("Conv", ais("strides", s(3, 2)), ais("pads", s(1, 1, 0, 0)))},
	{name: "Conv/3d-stride-even", dtype: f32, ins: ins(normal, s(1, 2, 4, 6, 4), s(3, 2, 3, 3, 3)), build: op("Conv", ais("strides", s(2, 2, 2)), ais("pads", s(1, 1, 1, 1, 1, 1)))},
	// Fewer output than input channels, stride 1: the gemm form shifts dY
	// (convWeightGradShifted), pads on one side only in the second.
	{name: "Conv/3d-fewer-outputs", dtype: f32, ins: ins(normal, s(2, 4, 3, 4, 3), s(2, 4, 3, 3, 3)), build: op("Conv", ais("pads", s(1, 1, 1, 1, 1, 1)))},
	{name: "Conv/2d-fewer-outputs-uneven", dtype: f32, ins: ins(normal, s(1, 3, 5, 4), s(1, 3, 3, 2)), build: op("Conv", ais("pads", s(1, 0, 1, 1)))},
	// The gemm form's weight gradient one product per sample (few
	// channels over a large map): strided, padded, a 3×3 window.
	{name: "Conv/2d-batched-weight-grad", dtype: f32, ins: ins(normal, s(2, 2, 9, 8), s(3, 2, 3, 3)), build: op("Conv", ais("strides", s(1, 2)), ais("pads", s(1, 1, 1, 1)))},
	{name: "Conv/3d-stride-dilation", dtype: f32, ins: ins(normal, s(1, 2, 5, 6, 5), s(3, 2, 3, 3, 2)), build: op("Conv", ais("strides", s(2, 1, 1)), ais("dilations", s(1, 2, 1)), ais("pads", s(1, 2, 0, 1, 2, 1)))},
}

func init() { ruleCases = append(ruleCases, convFormCases...) }

// TestConvFormsAgainstFiniteDifferences runs every Conv and ConvTranspose
// case in each gradient form; TestRulesAgainstFiniteDifferences runs them
// in the default one.
func TestConvFormsAgainstFiniteDifferences(t *testing.T) {
	n := 0
	for i, c := range ruleCases {
		if !strings.HasPrefix(c.name, "Conv/") && !strings.HasPrefix(c.name, "ConvTranspose/") {
			continue
		}
		for _, f := range autodiff.ConvForms {
			c := c
			c.conv = f
			n++
			t.Run(string(f)+"/"+c.name, func(t *testing.T) { checkFD(t, c, uint64(i)) })
		}
		// The offsets form's weight gradient one GEMM per offset, as it
		// is written where the gathered table would be too large.
		c := c
		c.conv = autodiff.ConvFormOffsets
		t.Run("offsets-per-offset/"+c.name, func(t *testing.T) {
			defer autodiff.SetMaxGatherIndices(autodiff.SetMaxGatherIndices(0))
			checkFD(t, c, uint64(i))
		})
		// A strided window's input gradient with its zeros put in by a
		// padded view, as in bfloat16.
		t.Run("offsets-padded-zeros/"+c.name, func(t *testing.T) {
			defer autodiff.SetSpreadZeros(autodiff.SetSpreadZeros(false))
			checkFD(t, c, uint64(i))
		})
		// Sliced along the leading axes, the trailing axes' offsets
		// gathered from each slab: all the trailing axes (a 3-D window's
		// last two), then the last one only.
		for _, slabs := range []int64{9, 2} {
			c := c
			c.conv = autodiff.ConvFormGEMM
			t.Run(fmt.Sprintf("gemm-slabs-%d/%s", slabs, c.name), func(t *testing.T) {
				defer autodiff.SetMaxGatherColumns(autodiff.SetMaxGatherColumns(0))
				defer autodiff.SetMaxGatherSlabs(autodiff.SetMaxGatherSlabs(slabs))
				checkFD(t, c, uint64(i))
			})
		}
		// The gemm form without the per-sample products.
		c.conv = autodiff.ConvFormGEMM
		t.Run("gemm-unbatched/"+c.name, func(t *testing.T) {
			defer autodiff.SetMaxBatchedShare(autodiff.SetMaxBatchedShare(1 << 40))
			checkFD(t, c, uint64(i))
		})
		// No table at all: a volume's offsets one product each, batched
		// over the output's depth.
		t.Run("gemm-per-depth/"+c.name, func(t *testing.T) {
			defer autodiff.SetMaxGatherIndices(autodiff.SetMaxGatherIndices(0))
			checkFD(t, c, uint64(i))
		})
	}
	if n < 2*len(convFormCases) {
		t.Fatalf("only %d conv cases found", n)
	}
}

// TestConvFormsNodes checks what each form writes for a ResNet
// bottleneck's convolutions: the ops form a ConvTranspose per input
// gradient and one Conv or Gemm per weight gradient, no per-offset
// MatMul; the offsets form one Gather and one MatMul for a 3×3 window (one
// MatMul per kernel offset where the gathered table would be too large)
// and one Gemm for a 1×1.
func TestConvFormsNodes(t *testing.T) {
	countIn := func(f autodiff.ConvForm, dt dtype.DType) map[string]int {
		g := graph.New("bottleneck", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dt, Known: true, Shape: []int64{2, 8, 6, 6}})
		var wrt []string
		for _, w := range []struct {
			name  string
			shape []int64
		}{{"w1", s(4, 8, 1, 1)}, {"w2", s(4, 4, 3, 3)}, {"w3", s(8, 4, 1, 1)}} {
			g.AddInput(w.name, graph.Info{DType: dt, Known: true, Shape: w.shape})
			wrt = append(wrt, w.name)
		}
		b := graph.NewBuilder(g, "fwd/")
		h := b.Op("Conv", []string{"x", "w1"})
		h = b.Op("Conv", []string{h, "w2"}, ais("pads", s(1, 1, 1, 1)), ais("strides", s(2, 2)))
		h = b.Op("Conv", []string{h, "w3"})
		wrt = append(wrt, "x")
		if _, err := autodiff.GradientsWith(g, b.ReduceSum(h, false), wrt, "grad/", autodiff.Options{ConvForm: f}); err != nil {
			t.Fatal(err)
		}
		ops := map[string]int{}
		for _, n := range g.Nodes {
			ops[n.Op]++
		}
		return ops
	}
	count := func(f autodiff.ConvForm) map[string]int { return countIn(f, dtype.Float32) }
	ops := count(autodiff.ConvFormOps)
	if ops["ConvTranspose"] != 3 || ops["MatMul"] != 0 || ops["Gemm"] != 2 || ops["Conv"] != 3+1 {
		t.Errorf("ops form: %v; want 3 ConvTranspose, 2 Gemm, 4 Conv, no MatMul", ops)
	}
	// The offsets form: a 3×3 window's weight gradient is one Gather of
	// all offsets' windows and one MatMul; a 1×1 window's one offset is a
	// Gemm on all of X, unsliced, and its weight needs no flip; the
	// strided window's input gradient interleaves zeros along both axes
	// with one ConvTranspose by ones (no Unsqueeze, Pad and Slice).
	if offsets := count(autodiff.ConvFormOffsets); offsets["MatMul"] != 1 || offsets["Gather"] != 1 || offsets["Gemm"] != 2 || offsets["ConvTranspose"] != 1 ||
		offsets["Unsqueeze"] != 0 || offsets["Pad"] != 1 || offsets["Slice"] != 1 || offsets["Concat"] != 0 {
		t.Errorf("offsets form: %v; want 1 Gather, 1 MatMul, 2 Gemm, 1 ConvTranspose, no Unsqueeze, 1 Pad, 1 Slice, no Concat", offsets)
	}
	spread := autodiff.SetSpreadZeros(false)
	if offsets := count(autodiff.ConvFormOffsets); offsets["ConvTranspose"] != 0 || offsets["Unsqueeze"] != 1 || offsets["Pad"] != 1+1 || offsets["Slice"] != 1+1 {
		t.Errorf("offsets form, zeros by a padded view: %v; want no ConvTranspose, 1 Unsqueeze, 2 Pad, 2 Slice", offsets)
	}
	autodiff.SetSpreadZeros(spread)
	// Where the gathered table would be too large: one MatMul per
	// offset, their products stacked without an Unsqueeze each.
	old := autodiff.SetMaxGatherIndices(0)
	offsets := count(autodiff.ConvFormOffsets)
	autodiff.SetMaxGatherIndices(old)
	if offsets["MatMul"] != 9 || offsets["Gather"] != 0 || offsets["Gemm"] != 2 || offsets["Pad"] != 1 || offsets["Slice"] != 9+1 {
		t.Errorf("offsets form, one GEMM per offset: %v; want 9 MatMul, 2 Gemm, 1 Pad, 10 Slice", offsets)
	}
	// The gemm form: the offsets form's weight gradients, a ConvTranspose
	// per input gradient (no zeros interleaved, no flipped weight); in
	// bfloat16, which ONNX Runtime's CUDA ConvTranspose lacks, the offsets
	// form's Convs. The first 1×1 window, over the largest map, has its
	// weight gradient one product per sample and their sum: no Transpose
	// of X or dY but the one its product folds in.
	if gemm := count(autodiff.ConvFormGEMM); gemm["ConvTranspose"] != 3 || gemm["Conv"] != 3 || gemm["MatMul"] != 1+1 || gemm["Gather"] != 1 || gemm["Gemm"] != 1 ||
		gemm["ReduceSum"] != 1+1 || gemm["Transpose"] != 6 || gemm["Unsqueeze"] != 0 || gemm["Slice"] != 0 {
		t.Errorf("gemm form: %v; want 3 ConvTranspose, 3 Conv, 1 Gather, 2 MatMul, 1 Gemm, 2 ReduceSum (one the loss), 6 Transpose, no Unsqueeze or Slice", gemm)
	}
	share := autodiff.SetMaxBatchedShare(1 << 40)
	if gemm := count(autodiff.ConvFormGEMM); gemm["MatMul"] != 1 || gemm["Gemm"] != 2 || gemm["Transpose"] != 7 {
		t.Errorf("gemm form without per-sample products: %v; want 1 MatMul, 2 Gemm, 7 Transpose", gemm)
	}
	autodiff.SetMaxBatchedShare(share)
	if gemm := countIn(autodiff.ConvFormGEMM, dtype.BFloat16); gemm["ConvTranspose"] != 0 || gemm["Conv"] != 6 || gemm["Gather"] != 1 {
		t.Errorf("gemm form in bfloat16: %v; want no ConvTranspose, 6 Conv, 1 Gather", gemm)
	}
	// A volume's 27 offsets gathered would hold 27 times its input. In the
	// gemm form (CUDA): one slab per offset along the depth and height,
	// the three offsets along the width gathered from it; the nine
	// in-plane offsets from a depth slab where nine are allowed; one GEMM
	// per offset where the gathered table would be too large, and in the
	// offsets form (the CPU).
	volume := func(f autodiff.ConvForm, wrt ...string) map[string]int {
		vol := graph.New("volume", graph.EmitOpset)
		vol.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 8, 32, 32, 32}})
		vol.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{8, 8, 3, 3, 3}})
		b := graph.NewBuilder(vol, "fwd/")
		y := b.Op("Conv", []string{"x", "w"}, ais("pads", s(1, 1, 1, 1, 1, 1)))
		if _, err := autodiff.GradientsWith(vol, b.ReduceSum(y, false), append([]string{"w"}, wrt...), "grad/", autodiff.Options{ConvForm: f}); err != nil {
			t.Fatal(err)
		}
		ops := map[string]int{}
		for _, n := range vol.Nodes {
			ops[n.Op]++
		}
		return ops
	}
	if ops := volume(autodiff.ConvFormGEMM); ops["Gather"] != 9 || ops["MatMul"] != 9 || ops["Slice"] != 9 || ops["Concat"] != 1 {
		t.Errorf("gemm form, 3×3×3 window over 32³: %v; want 9 Slice, 9 Gather, 9 MatMul, 1 Concat", ops)
	}
	old = autodiff.SetMaxGatherSlabs(9)
	if ops := volume(autodiff.ConvFormGEMM); ops["Gather"] != 3 || ops["MatMul"] != 3 || ops["Slice"] != 3 {
		t.Errorf("gemm form, 3×3×3 window over 32³, nine offsets a slab: %v; want 3 Slice, 3 Gather, 3 MatMul", ops)
	}
	autodiff.SetMaxGatherSlabs(old)
	if ops := volume(autodiff.ConvFormOffsets); ops["Gather"] != 0 || ops["MatMul"] != 27 {
		t.Errorf("offsets form, 3×3×3 window over 32³: %v; want 27 MatMul, no Gather", ops)
	}
	old = autodiff.SetMaxGatherIndices(0)
	// Without a table, one product per offset, each batched over the
	// output's depth, the 27 summed over it in one ReduceSum.
	if ops := volume(autodiff.ConvFormGEMM); ops["Gather"] != 0 || ops["MatMul"] != 27 || ops["ReduceSum"] != 1+1 || ops["Concat"] != 1 {
		t.Errorf("gemm form, 3×3×3 window over 32³, no table: %v; want 27 MatMul, 1 Concat, 2 ReduceSum (one the loss's), no Gather", ops)
	}
	autodiff.SetMaxGatherIndices(old)
	// One output channel from eight: dY shifted per offset, one product.
	fewer := graph.New("fewer", graph.EmitOpset)
	fewer.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 8, 32, 32, 32}})
	fewer.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 8, 3, 3, 3}})
	fb := graph.NewBuilder(fewer, "fwd/")
	if _, err := autodiff.GradientsWith(fewer, fb.ReduceSum(fb.Op("Conv", []string{"x", "w"}, ais("pads", s(1, 1, 1, 1, 1, 1))), false), []string{"w"}, "grad/",
		autodiff.Options{ConvForm: autodiff.ConvFormGEMM}); err != nil {
		t.Fatal(err)
	}
	ops = map[string]int{}
	for _, n := range fewer.Nodes {
		ops[n.Op]++
	}
	if ops["Gather"] != 0 || ops["MatMul"] != 1 || ops["Slice"] != 27 || ops["Concat"] != 1 {
		t.Errorf("gemm form, 8 channels to 1: %v; want 27 Slices (of dY), 1 Concat, 1 MatMul, no Gather", ops)
	}
	// A volume's input gradient is a Conv in the gemm form too: cuDNN's
	// 3-D backward-data (ConvTranspose) ran slower on an H200.
	if ops := volume(autodiff.ConvFormGEMM, "x"); ops["ConvTranspose"] != 0 || ops["Conv"] != 2 {
		t.Errorf("gemm form, a volume's input gradient: %v; want 2 Conv (forward, input gradient), no ConvTranspose", ops)
	}
	if _, err := autodiff.ParseConvForm("im2col"); err == nil {
		t.Error("an unknown form parsed")
	}
}

// TestStridedInputGradSymmetricPads: a stride-2 3×3×3 window with pads 1
// over even sizes (a VQ-GAN's downsampling) has its input gradient's
// Conv with pads 1 on both sides, the extra end zero put in by the
// interleaving ConvTranspose's output_padding (or the padded view's
// longer Slice): ONNX Runtime's CUDA Conv slices a larger result for
// asymmetric pads, and cuDNN's float16 kernels ran those maps slowly.
func TestStridedInputGradSymmetricPads(t *testing.T) {
	for _, spread := range []bool{true, false} {
		g := graph.New("down", graph.EmitOpset)
		g.AddInput("x", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{1, 4, 8, 8, 8}})
		g.AddInput("w", graph.Info{DType: dtype.Float32, Known: true, Shape: []int64{4, 4, 3, 3, 3}})
		b := graph.NewBuilder(g, "fwd/")
		y := b.Op("Conv", []string{"x", "w"}, ais("strides", s(2, 2, 2)), ais("pads", s(1, 1, 1, 1, 1, 1)))
		old := autodiff.SetSpreadZeros(spread)
		grads, err := autodiff.GradientsWith(g, b.ReduceSum(y, false), []string{"x"}, "grad/", autodiff.Options{ConvForm: autodiff.ConvFormGEMM})
		autodiff.SetSpreadZeros(old)
		if err != nil {
			t.Fatal(err)
		}
		var conv *graph.Node
		for _, n := range g.Nodes {
			if n.Op == "Conv" && n.Outputs[0] == grads["x"] {
				conv = n
			}
		}
		if conv == nil {
			t.Fatalf("spread %v: the input gradient %s is not a Conv's output", spread, grads["x"])
		}
		if pads := conv.Ints("pads"); fmt.Sprint(pads) != "[1 1 1 1 1 1]" {
			t.Errorf("spread %v: the input gradient's pads are %v; want 1 on both sides", spread, pads)
		}
		if spread {
			var spreadOp *graph.Node
			for _, n := range g.Nodes {
				if n.Op == "ConvTranspose" && n.Outputs[0] == conv.Inputs[0] {
					spreadOp = n
				}
			}
			if spreadOp == nil || fmt.Sprint(spreadOp.Ints("output_padding")) != "[1 1 1]" {
				t.Errorf("the interleaving ConvTranspose %v; want output_padding [1 1 1] feeding the Conv", spreadOp)
			}
		}
	}
}
