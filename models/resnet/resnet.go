// Package resnet builds ResNet forward graphs in torchvision's layout, so
// that trained weights load into torchvision.models.resnetNN by name: the
// graph's initializers are named exactly as the PyTorch model's state_dict
// keys (conv1.weight, bn1.running_mean, layer1.0.conv1.weight,
// layer2.0.downsample.0.weight, fc.bias...).
//
// Architecture (He et al. 2016, torchvision's v1.5 variant): conv1 7×7
// stride 2 pad 3 without bias, bn1, ReLU, max pool 3×3 stride 2 pad 1; four
// stages of BasicBlocks (depth 18, 34) or Bottlenecks (50, 101, 152) with
// width w, 2w, 4w, 8w (w = 64 in torchvision), the first block of stages
// 2-4 striding by 2 (on the 3×3 convolution in a Bottleneck: v1.5) with a
// 1×1 conv + BN downsample shortcut wherever the shape changes; global
// average pool; fc. Initialisation as torchvision: convolutions
// kaiming-normal (fan_out, ReLU gain), BN weight 1 and bias 0, fc PyTorch's
// default uniform.
//
// The loss is left to artifacts.Build (cross-entropy with label smoothing,
// see Model): the graph stays a pure classifier whose logits the eval graph
// also returns for accuracy.
package resnet

import (
	"fmt"
	"slices"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/nn"
	"github.com/ortrain/ortrain/training/graph"
)

// Input and Output name the graph's image input and logits output. Input
// matches the tensor training/data/images produces.
const (
	Input  = "image"
	Output = "logits"
)

// Config selects a ResNet; the zero values of optional fields take
// torchvision's defaults through Default.
type Config struct {
	// Depth is 18, 34, 50, 101 or 152.
	Depth int `toml:"depth"`
	// Classes is the size of fc's output. torchvision: 1000.
	Classes int `toml:"classes"`
	// Width is the channel count of the stem and the first stage (64 in
	// torchvision; smaller for tests). Stages have Width·2^i planes.
	Width int `toml:"width"`
	// ImageSize is the square input side; the graph's spatial sizes are
	// static because ortrain's gradient rules want them so.
	ImageSize int `toml:"image_size"`
	// Channels is the number of input channels (3).
	Channels int `toml:"channels"`
	// Layout is NCHW or NHWC: with NHWC the input is [batch, H, W, C] and
	// the graph transposes it first, so loaders can hand over
	// channels-last pixels as decoded.
	Layout string `toml:"layout"`
	// ZeroInitResidual starts the last BN of each block at weight 0
	// (torchvision's zero_init_residual), so blocks start as identities.
	ZeroInitResidual bool `toml:"zero_init_residual"`
	// LabelSmoothing is the cross-entropy label smoothing the recipe asks
	// artifacts.Build for.
	LabelSmoothing float64 `toml:"label_smoothing"`
	// Seed draws the initial weights.
	Seed uint64 `toml:"seed"`
}

// Default is ResNet-50 for ImageNet at 224×224 (torchvision's defaults,
// NCHW, no label smoothing).
func Default() Config {
	return Config{Depth: 50, Classes: 1000, Width: 64, ImageSize: 224, Channels: 3, Layout: "NCHW"}
}

// stages gives the blocks per stage and whether blocks are Bottlenecks.
func stages(depth int) ([]int, bool, error) {
	switch depth {
	case 18:
		return []int{2, 2, 2, 2}, false, nil
	case 34:
		return []int{3, 4, 6, 3}, false, nil
	case 50:
		return []int{3, 4, 6, 3}, true, nil
	case 101:
		return []int{3, 4, 23, 3}, true, nil
	case 152:
		return []int{3, 8, 36, 3}, true, nil
	}
	return nil, false, fmt.Errorf("resnet: depth %d is not one of 18, 34, 50, 101, 152", depth)
}

// Validate reports the first size or setting Build cannot use.
func (c Config) Validate() error {
	if _, _, err := stages(c.Depth); err != nil {
		return err
	}
	if c.Classes < 1 || c.Width < 1 || c.Channels < 1 {
		return fmt.Errorf("resnet: classes, width and channels must be >= 1 (have %d, %d, %d)", c.Classes, c.Width, c.Channels)
	}
	// Five halvings (stem conv, max pool, three strided stages) must leave
	// at least one pixel.
	if c.ImageSize < 32 {
		return fmt.Errorf("resnet: image_size %d is below 32, the least that survives the five stride-2 steps", c.ImageSize)
	}
	if !slices.Contains([]string{"NCHW", "NHWC"}, c.Layout) {
		return fmt.Errorf("resnet: layout %q is not NCHW or NHWC", c.Layout)
	}
	if c.LabelSmoothing < 0 || c.LabelSmoothing >= 1 {
		return fmt.Errorf("resnet: label_smoothing %g is not in [0, 1)", c.LabelSmoothing)
	}
	return nil
}

// ParamCount is the closed-form number of trained scalars (BN running
// statistics excluded, as in PyTorch's parameters()). With w = Width,
// C = Channels, K = Classes and planes p_i = w·2^i:
//
//	stem: 49·C·w + 2w
//	BasicBlock(in, p, down):  9·in·p + 9·p² + 4p + down·(in·p + 2p)
//	Bottleneck(in, p, down):  in·p + 9p² + 4p·p + 2p + 2p + 8p + down·(in·4p + 8p)
//	                        = in·p + 13p² + 12p + down·(4·in·p + 8p)
//	fc: (8w·e)·K + K, e = 1 (basic) or 4 (bottleneck)
//
// where the first block of each stage has down = 1 when it strides or
// in != p·e.
func (c Config) ParamCount() int64 {
	counts, bottle, err := stages(c.Depth)
	if err != nil {
		return 0
	}
	w, C, K := int64(c.Width), int64(c.Channels), int64(c.Classes)
	e := int64(1)
	if bottle {
		e = 4
	}
	total := 49*C*w + 2*w
	in := w
	for s, nb := range counts {
		p := w << s
		for i := 0; i < nb; i++ {
			down := int64(0)
			if i == 0 && (s > 0 || in != p*e) {
				down = 1
			}
			if bottle {
				total += in*p + 13*p*p + 12*p + down*(4*in*p+8*p)
			} else {
				total += 9*in*p + 9*p*p + 4*p + down*(in*p+2*p)
			}
			in = p * e
		}
	}
	return total + in*K + K
}

// Build returns the forward graph: input Input (float32 [batch, C, S, S],
// or [batch, S, S, C] with NHWC; batch symbolic) and output Output
// (float32 [batch, Classes]).
func Build(c Config) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	counts, bottle, _ := stages(c.Depth)
	n := nn.New(fmt.Sprintf("resnet%d", c.Depth), c.Seed)
	b := n.B
	C, S := int64(c.Channels), int64(c.ImageSize)
	x := ""
	if c.Layout == "NHWC" {
		x = b.Transpose(n.Input(Input, dtype.Float32, []int64{-1, S, S, C}, []string{"batch", "", "", ""}), 0, 3, 1, 2)
	} else {
		x = n.Input(Input, dtype.Float32, []int64{-1, C, S, S}, []string{"batch", "", "", ""})
	}
	conv := func(name, x string, cin, cout, k, stride int64) string {
		return n.Conv(name, x, cin, cout, k, stride, k/2, false, nn.KaimingNormalFanOut)
	}
	w := int64(c.Width)
	x = b.Relu(n.BatchNorm("bn1", conv("conv1", x, C, w, 7, 2), w, false))
	x = b.Op("MaxPool", []string{x}, graph.AInts("kernel_shape", []int64{3, 3}), graph.AInts("strides", []int64{2, 2}), graph.AInts("pads", []int64{1, 1, 1, 1}))
	e := int64(1)
	if bottle {
		e = 4
	}
	in := w
	for s, nb := range counts {
		p := w << s
		for i := 0; i < nb; i++ {
			name := fmt.Sprintf("layer%d.%d", s+1, i)
			stride := int64(1)
			if i == 0 && s > 0 {
				stride = 2
			}
			short := x
			if stride != 1 || in != p*e {
				short = n.BatchNorm(name+".downsample.1", conv(name+".downsample.0", x, in, p*e, 1, stride), p*e, false)
			}
			var h string
			if bottle {
				h = b.Relu(n.BatchNorm(name+".bn1", conv(name+".conv1", x, in, p, 1, 1), p, false))
				h = b.Relu(n.BatchNorm(name+".bn2", conv(name+".conv2", h, p, p, 3, stride), p, false))
				h = n.BatchNorm(name+".bn3", conv(name+".conv3", h, p, p*e, 1, 1), p*e, c.ZeroInitResidual)
			} else {
				h = b.Relu(n.BatchNorm(name+".bn1", conv(name+".conv1", x, in, p, 3, stride), p, false))
				h = n.BatchNorm(name+".bn2", conv(name+".conv2", h, p, p, 3, 1), p, c.ZeroInitResidual)
			}
			x = b.Relu(b.Add(h, short))
			in = p * e
		}
	}
	x = b.Op("Flatten", []string{b.Op("GlobalAveragePool", []string{x})})
	K := int64(c.Classes)
	fw := n.Param("fc.weight", []int64{K, in}, in, K, nn.TorchDefault)
	fb := n.Param("fc.bias", []int64{K}, in, K, nn.TorchDefault)
	b.OpInto(Output, "Gemm", []string{x, fw, fb}, graph.AInt("transB", 1))
	n.G.Outputs = []string{Output}
	if b.Err != nil {
		return nil, b.Err
	}
	return n.G, nil
}
