// Package vqgan builds the forward graph of a 3D VQ-GAN autoencoder for CT
// volumes with its training loss, in the layout of taming-transformers'
// VQModel carried over to 3D (the seeds' model), parameter names included,
// so models/pytorch/export_vqgan3d.py's PyTorch module has the same
// state_dict.
//
// Architecture, with ch = Channels, m = ChannelMult (L levels), r =
// ResBlocks, and ResBlock(a, b) = GN(a)·SiLU·Conv3(a→b)·GN(b)·SiLU·
// Conv3(b→b) plus a 1×1×1 "nin_shortcut" conv when a != b:
//
//	encoder: conv_in Conv3(in→ch); per level i: r ResBlocks to ch·m[i],
//	         then (not on the last level) a stride-2 Conv3 "downsample";
//	         mid: 2 ResBlocks; norm_out GN, SiLU, conv_out Conv3(→z_channels)
//	quant_conv Conv1(z_channels→embed_dim)
//	quantize: codebook [codebook_size, embed_dim]; each latent vector takes
//	         its nearest code by squared distance (ArgMin over
//	         ‖z‖² − 2·z·Eᵀ + ‖E‖², Gather of the row)
//	post_quant_conv Conv1(embed_dim→z_channels)
//	decoder: conv_in Conv3(z_channels→ch·m[L-1]); mid: 2 ResBlocks; per
//	         level i from L-1 down to 0: r ResBlocks to ch·m[i], then (not on
//	         level 0) nearest ×2 Resize + Conv3 "upsample"; norm_out GN,
//	         SiLU, conv_out Conv3(→in)
//
// GN is GroupNorm with Groups groups (32 in the seeds), Conv3 a 3×3×3
// convolution with padding 1, downsampling halves each axis, so the latent
// grid is the patch divided by 2^(L-1). Unlike taming, the decoder has r (not
// r+1) blocks per level and there is no attention block (a 3D attention over
// the full latent grid is the first thing dropped at CT patch sizes).
//
// Loss (scalar output "loss"): mean |x − x̂| (L1 reconstruction) +
// ‖sg(z) − z_q‖² (codebook) + β·‖z − sg(z_q)‖² (commitment), both means over
// the latent elements, with the straight-through estimator z_q^st = z +
// sg(z_q − z) feeding the decoder; sg is ortrain's StopGradient marker.
// l1_weight weighs the L1 term. With image_gan_weight or video_gan_weight
// the graph also holds the discriminators and their training-only
// adversarial terms (gan.go); the perceptual (LPIPS) term is not built.
package vqgan

import (
	"fmt"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/nn"
	"github.com/ortrain/ortrain/training/graph"
)

// Names of the graph's input and outputs. Input matches the tensor
// training/data/volumes produces.
const (
	Input        = "volume"
	Loss         = "loss"
	Recon        = "recon"
	Codes        = "codes"
	RecLoss      = "rec_loss"
	CodebookLoss = "codebook_loss"
	CommitLoss   = "commit_loss"
	// CodebookUsage and CodebookPerplexity describe the batch's codes:
	// the share of the codebook picked, and exp of the entropy of the
	// codes' frequencies (what the anchors log every step).
	CodebookUsage      = "codebook_usage"
	CodebookPerplexity = "codebook_perplexity"
)

// Config sizes the model; toml tags are the [model.params] names.
type Config struct {
	// PatchSize is the [D, H, W] input size; each must divide by
	// 2^(len(ChannelMult)-1).
	PatchSize []int `toml:"patch_size"`
	// InChannels is the number of image channels (1 for CT).
	InChannels int `toml:"in_channels"`
	// Channels is the base channel count ch.
	Channels int `toml:"channels"`
	// ChannelMult multiplies ch per resolution level.
	ChannelMult []int `toml:"channel_mult"`
	// ResBlocks is the number of residual blocks per level.
	ResBlocks int `toml:"res_blocks"`
	// ZChannels is the encoder output width.
	ZChannels int `toml:"z_channels"`
	// EmbedDim is the codebook vector size.
	EmbedDim int `toml:"embed_dim"`
	// CodebookSize is the number of codes.
	CodebookSize int `toml:"codebook_size"`
	// Beta weighs the commitment loss (0.25).
	Beta float64 `toml:"beta"`
	// CodebookDecay > 0 keeps the codebook as TATS and medicaldiffusion do
	// (0.99 there, and the default): not trained by a loss but updated
	// every training step as an exponential moving average of the encoder
	// vectors assigned to each code, and without the codebook loss term.
	// 0 trains it by the codebook loss (VQ-VAE's), which collapses: on the
	// quickstart 6 % of the codes were in use at step 100 against 72 %
	// with 0.99, and which run kept more depended on the data's order.
	CodebookDecay float64 `toml:"codebook_decay"`
	// RestartThres: with CodebookDecay, a code whose moving count of
	// assigned vectors falls below it is restarted at an encoder vector of
	// the batch (1.0, as the anchors), unless NoRandomRestart.
	RestartThres    float64 `toml:"restart_thres"`
	NoRandomRestart bool    `toml:"no_random_restart"`
	// L1Weight weighs the L1 reconstruction term (1; the anchors use 4).
	L1Weight float64 `toml:"l1_weight"`
	// The discriminators (gan.go): ImageGANWeight and VideoGANWeight weigh
	// the 2-D (slices) and 3-D (volume) adversarial terms, 0 leaving that
	// discriminator out (both 0: no GAN, the default); GANFeatWeight the
	// feature-matching term. DiscIterStart is the global step from which
	// the adversarial terms count (the anchors' discriminator_iter_start).
	ImageGANWeight float64 `toml:"image_gan_weight"`
	VideoGANWeight float64 `toml:"video_gan_weight"`
	GANFeatWeight  float64 `toml:"gan_feat_weight"`
	DiscIterStart  int64   `toml:"discriminator_iter_start"`
	// DiscChannels is the first layer's width (64), DiscLayers the number
	// of normalised layers (3), DiscNorm "batch" or "group" (GroupNorm
	// with Groups groups), DiscLossType "hinge" or "vanilla".
	DiscChannels int    `toml:"disc_channels"`
	DiscLayers   int    `toml:"disc_layers"`
	DiscNorm     string `toml:"disc_norm"`
	DiscLossType string `toml:"disc_loss_type"`
	// PerceptualWeight weighs an LPIPS-style distance between the axial
	// slices the 2-D discriminator sees and their reconstructions, computed
	// by PerceptualModel, an ONNX file (models/pytorch/export_lpips.py)
	// whose weights stay frozen (0: no perceptual term).
	PerceptualWeight float64 `toml:"perceptual_weight"`
	PerceptualModel  string  `toml:"perceptual_model"`
	// Groups is GroupNorm's group count; it must divide every width.
	Groups int `toml:"groups"`
	// Seed draws the initial weights.
	Seed uint64 `toml:"seed"`
}

// Default is the seeds' size class: ch 64, levels ×[1, 1, 2, 4] (8× down per
// axis, so a 256×256×128 patch has 32×32×16 codes), 2 ResBlocks per level,
// 8-wide latents and an 8192 × 8 codebook (low-dimensional codes, as 3D
// medical VQ-GANs use) kept as the anchors keep it (EMA, decay 0.99, dead
// codes restarted below a moving count of 1), 32 groups, β 0.25, on 64³
// patches (the presets set their own patch size). ParamCount: 36,269,785
// (the EMA codebook is a buffer, not a parameter).
func Default() Config {
	return Config{PatchSize: []int{64, 64, 64}, InChannels: 1, Channels: 64, ChannelMult: []int{1, 1, 2, 4},
		ResBlocks: 2, ZChannels: 8, EmbedDim: 8, CodebookSize: 8192, Beta: 0.25, Groups: 32, CodebookDecay: 0.99, RestartThres: 1,
		L1Weight: 1, DiscChannels: 64, DiscLayers: 3, DiscNorm: NormBatch, DiscLossType: LossHinge}
}

// Validate reports the first size or setting Build cannot use.
func (c Config) Validate() error {
	if len(c.PatchSize) != 3 {
		return fmt.Errorf("vqgan: patch_size %v is not [D, H, W]", c.PatchSize)
	}
	if len(c.ChannelMult) < 1 {
		return fmt.Errorf("vqgan: channel_mult is empty")
	}
	f := 1 << (len(c.ChannelMult) - 1)
	for _, p := range c.PatchSize {
		if p < f || p%f != 0 {
			return fmt.Errorf("vqgan: patch_size %v: every side must be a multiple of %d (2^(levels-1))", c.PatchSize, f)
		}
	}
	if c.InChannels < 1 || c.Channels < 1 || c.ResBlocks < 1 || c.ZChannels < 1 || c.EmbedDim < 1 || c.CodebookSize < 1 || c.Groups < 1 {
		return fmt.Errorf("vqgan: in_channels, channels, res_blocks, z_channels, embed_dim, codebook_size and groups must be >= 1")
	}
	for _, m := range c.ChannelMult {
		if m < 1 || (c.Channels*m)%c.Groups != 0 {
			return fmt.Errorf("vqgan: width %d·%d does not split into %d groups", c.Channels, m, c.Groups)
		}
	}
	if c.Beta < 0 {
		return fmt.Errorf("vqgan: beta %g is negative", c.Beta)
	}
	if !(c.CodebookDecay >= 0 && c.CodebookDecay < 1) || !(c.RestartThres >= 0) {
		return fmt.Errorf("vqgan: codebook_decay %g must be in [0, 1) and restart_thres %g ≥ 0", c.CodebookDecay, c.RestartThres)
	}
	return c.validateGAN()
}

// conv3 is the parameter count of a k³ convolution with bias.
func conv3(cin, cout, k int64) int64 { return cout*cin*k*k*k + cout }

// res is the parameter count of ResBlock(a, b).
func res(a, b int64) int64 {
	n := 2*a + conv3(a, b, 3) + 2*b + conv3(b, b, 3)
	if a != b {
		n += conv3(a, b, 1)
	}
	return n
}

// ParamCount is the closed-form number of trained scalars:
//
//	conv(a, b, k) = b·a·k³ + b;  GN(c) = 2c
//	ResBlock(a, b) = GN(a) + conv(a, b, 3) + GN(b) + conv(b, b, 3) + [a≠b]·conv(a, b, 1)
//	encoder = conv(in, ch, 3) + Σ_i [ResBlock(w_{i-1}, w_i) + (r−1)·ResBlock(w_i, w_i)
//	          + [i<L−1]·conv(w_i, w_i, 3)] + 2·ResBlock(w_top, w_top) + GN(w_top) + conv(w_top, z, 3)
//	quantizer = conv(z, e, 1) + K·e + conv(e, z, 1)
//	decoder = conv(z, w_top, 3) + 2·ResBlock(w_top, w_top) + Σ_i [ResBlock(w_{i+1}, w_i)
//	          + (r−1)·ResBlock(w_i, w_i) + [i>0]·conv(w_i, w_i, 3)] + GN(w_0) + conv(w_0, in, 3)
//
// with w_i = ch·m[i], w_{-1} = ch, w_L = w_top = w_{L−1} (the decoder's
// first level starts from the mid width).
func (c Config) ParamCount() int64 {
	in, ch, r := int64(c.InChannels), int64(c.Channels), int64(c.ResBlocks)
	z, e, K := int64(c.ZChannels), int64(c.EmbedDim), int64(c.CodebookSize)
	L := len(c.ChannelMult)
	w := func(i int) int64 { return ch * int64(c.ChannelMult[i]) }
	top := w(L - 1)
	total := conv3(in, ch, 3)
	prev := ch
	for i := 0; i < L; i++ {
		total += res(prev, w(i)) + (r-1)*res(w(i), w(i))
		if i < L-1 {
			total += conv3(w(i), w(i), 3)
		}
		prev = w(i)
	}
	total += 2*res(top, top) + 2*top + conv3(top, z, 3)
	total += conv3(z, e, 1) + conv3(e, z, 1)
	if c.CodebookDecay == 0 {
		total += K * e // an EMA codebook is a buffer
	}
	total += conv3(z, top, 3) + 2*res(top, top)
	prev = top
	for i := L - 1; i >= 0; i-- {
		total += res(prev, w(i)) + (r-1)*res(w(i), w(i))
		if i > 0 {
			total += conv3(w(i), w(i), 3)
		}
		prev = w(i)
	}
	total += 2*w(0) + conv3(w(0), in, 3)
	if c.ImageGANWeight > 0 {
		total += discParams(c, 2)
	}
	if c.VideoGANWeight > 0 {
		total += discParams(c, 3)
	}
	return total
}

// LatentShape is the [d, h, w] grid of codes for one patch.
func (c Config) LatentShape() []int64 {
	f := 1 << (len(c.ChannelMult) - 1)
	return []int64{int64(c.PatchSize[0] / f), int64(c.PatchSize[1] / f), int64(c.PatchSize[2] / f)}
}

// model carries the builder through the layers.
type model struct {
	*nn.Net
	c Config
}

func (m *model) conv(name, x string, cin, cout, k, stride int64) string {
	return m.Conv(name, x, cin, cout, k, stride, k/2, true, nn.TorchDefault)
}

func (m *model) norm(name, x string, ch int64) string {
	return m.GroupNorm(name, x, ch, int64(m.c.Groups))
}

// resBlock is ResBlock(a, b) under name.
func (m *model) resBlock(name, x string, a, b int64) string {
	h := m.conv(name+".conv1", m.SiLU(m.norm(name+".norm1", x, a)), a, b, 3, 1)
	h = m.conv(name+".conv2", m.SiLU(m.norm(name+".norm2", h, b)), b, b, 3, 1)
	if a != b {
		x = m.conv(name+".nin_shortcut", x, a, b, 1, 1)
	}
	return m.B.Add(x, h)
}

// Names of the EMA codebook's buffers besides the codebook itself.
const (
	ClusterSize = "quantize.cluster_size" // [K] moving count of vectors per code
	EmbedAvg    = "quantize.embed_avg"    // [K, e] moving sum of those vectors
)

// emaCodebook writes the EMA codebook's updates (TATS's Codebook): with
// n_k the batch's count of vectors assigned to code k and s_k their sum,
// N ← d·N + (1−d)·n, S ← d·S + (1−d)·s, and each code becomes S_k / N̂_k
// with N̂ = (N + ε)/(ΣN + K·ε)·ΣN (Laplace smoothing, ε = 1e-7). Unless
// NoRandomRestart, a code whose N is below RestartThres is replaced by an
// encoder vector of the batch: row (k·7919) mod M of the M flattened
// vectors, a spread over the batch that needs no random draw, so a resumed
// run reproduces it (the anchors draw a random permutation). The counts
// start at 0, so the first step restarts every code from the batch: the
// data-dependent initialisation the anchors do separately. It returns the
// buffer updates' outputs.
func (m *model) emaCodebook(cb, zf, idx string) []string {
	c, b := m.c, m.B
	e, K := int64(c.EmbedDim), int64(c.CodebookSize)
	d := c.CodebookDecay
	// The codebook's initial values seed the moving sum too (count 0).
	raw, err := graph.RawBytes(m.G.Initializers[cb])
	if err != nil {
		b.Err = err
		return nil
	}
	m.G.AddInitializer(graph.Raw(EmbedAvg, dtype.Float32, []int64{K, e}, raw))
	m.G.AddInitializer(graph.Float32s(ClusterSize, []int64{K}, make([]float32, K)))
	f := func(v float64) string { return b.Scalar(dtype.Float32, v) }
	sg := m.StopGradient(zf) // the statistics are not trained through
	// Per-code count and sum of the batch's vectors.
	n := m.codeCounts(idx)                                             // [K]
	rows := b.Op("Expand", []string{b.Unsqueeze(idx, 1), b.Shape(sg)}) // [M, e]: each vector's code
	s := m.scatterAdd([]int64{K, e}, rows, sg)                         // [K, e]
	size := b.Add(b.Mul(ClusterSize, f(d)), b.Mul(n, f(1-d)))
	sum := b.Add(b.Mul(EmbedAvg, f(d)), b.Mul(s, f(1-d)))
	total := b.ReduceSum(size, true, 0)
	smoothed := b.Mul(b.Div(b.Add(size, f(1e-7)), b.Add(total, f(float64(K)*1e-7))), total)
	codes := b.Div(sum, b.Unsqueeze(smoothed, 1))
	if !c.NoRandomRestart {
		M := b.Squeeze(b.Slice(b.Shape(sg), []int64{0}, []int64{1}, []int64{0}, nil), 0)
		k := make([]int64, K)
		for i := range k {
			k[i] = int64(i) * 7919
		}
		rows := b.Op("Gather", []string{sg, b.Op("Mod", []string{b.Ints(k...), M})}, graph.AInt("axis", 0)) // [K, e]
		used := b.Unsqueeze(b.Cast(b.Op("GreaterOrEqual", []string{size, f(c.RestartThres)}), dtype.Float32), 1)
		codes = b.Add(b.Mul(codes, used), b.Mul(rows, b.Sub(f(1), used)))
	}
	return []string{b.UpdateBuffer(cb, codes), b.UpdateBuffer(ClusterSize, size), b.UpdateBuffer(EmbedAvg, sum)}
}

// scatterAdd sums the rows of values into a zero tensor of shape at the
// positions idx gives along axis 0: per-code sums without the M×K one-hot
// a matrix product would need (GBs at the presets' sizes).
func (m *model) scatterAdd(shape []int64, idx, values string) string {
	zeros := m.Constant(graph.Float32s("", shape, make([]float32, dtype.Numel(shape))))
	return m.B.Op("ScatterElements", []string{zeros, idx, values}, graph.AInt("axis", 0), graph.AString("reduction", "add"))
}

// codeCounts is how many of the code indices idx ([M]) pick each code ([K]).
func (m *model) codeCounts(idx string) string {
	b := m.B
	ones := b.Op("Expand", []string{b.Scalar(dtype.Float32, 1), b.Shape(idx)})
	return m.scatterAdd([]int64{int64(m.c.CodebookSize)}, idx, ones)
}

// codebookStats writes CodebookUsage and CodebookPerplexity of the code
// indices idx ([M]).
func (m *model) codebookStats(idx string) {
	b := m.B
	f := func(v float64) string { return b.Scalar(dtype.Float32, v) }
	counts := m.codeCounts(idx)
	p := b.Div(counts, b.ReduceSum(counts, false))
	entropy := b.Neg(b.ReduceSum(b.Mul(p, b.Op("Log", []string{b.Add(p, f(1e-10))})), false))
	b.OpInto(CodebookPerplexity, "Exp", []string{entropy})
	b.OpInto(CodebookUsage, "ReduceMean", []string{b.Cast(b.Op("Greater", []string{counts, f(0)}), dtype.Float32)}, graph.AInt("keepdims", 0))
}

// decode writes the decoder from the quantised latent zq ([N, e, d, h, w])
// to Recon.
func (m *model) decode(zq string) {
	c := m.c
	in, ch := int64(c.InChannels), int64(c.Channels)
	z, e := int64(c.ZChannels), int64(c.EmbedDim)
	L := len(c.ChannelMult)
	w := func(i int) int64 { return ch * int64(c.ChannelMult[i]) }
	top := w(L - 1)
	h := m.conv("post_quant_conv", zq, e, z, 1, 1)
	h = m.conv("decoder.conv_in", h, z, top, 3, 1)
	h = m.resBlock("decoder.mid.block_1", h, top, top)
	h = m.resBlock("decoder.mid.block_2", h, top, top)
	prev := top
	for i := L - 1; i >= 0; i-- {
		for j := 0; j < c.ResBlocks; j++ {
			h = m.resBlock(fmt.Sprintf("decoder.up.%d.block.%d", i, j), h, prev, w(i))
			prev = w(i)
		}
		if i > 0 {
			h = m.conv(fmt.Sprintf("decoder.up.%d.upsample.conv", i), m.Upsample2x(h), w(i), w(i), 3, 1)
		}
	}
	m.B.OpInto(Recon, "Identity", []string{m.conv("decoder.conv_out", m.SiLU(m.norm("decoder.norm_out", h, w(0))), w(0), in, 3, 1)})
}

// BuildDecoder returns the decoder alone, for inference: input Codes (int64
// [batch, d, h, w] code indices, as Build outputs them), output Recon; its
// parameters are named as Build's (the codebook and the decoder's).
func BuildDecoder(c Config) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &model{Net: nn.New("vqgan3d_decoder", c.Seed), c: c}
	b := m.B
	e, K := int64(c.EmbedDim), int64(c.CodebookSize)
	lat := c.LatentShape()
	codes := m.Input(Codes, dtype.Int64, []int64{-1, lat[0], lat[1], lat[2]}, []string{"batch", "", "", ""})
	cb := m.Param("quantize.embedding.weight", []int64{K, e}, e, K, nn.Uniform(1/float64(K)))
	zq := b.Transpose(b.Op("Gather", []string{cb, codes}, graph.AInt("axis", 0)), 0, 4, 1, 2, 3)
	m.decode(zq)
	m.G.Outputs = []string{Recon}
	if b.Err != nil {
		return nil, b.Err
	}
	return m.G, nil
}

// Build returns the forward graph with the loss: input Input (float32
// [batch, in, D, H, W], batch symbolic); outputs Loss, Recon (the
// reconstruction, shaped like the input), Codes (int64 [batch, d, h, w]
// code indices), RecLoss, CodebookLoss and CommitLoss (the loss terms, for
// logging).
func Build(c Config) (*graph.Graph, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	m := &model{Net: nn.New("vqgan3d", c.Seed), c: c}
	b := m.B
	in, ch := int64(c.InChannels), int64(c.Channels)
	z, e, K := int64(c.ZChannels), int64(c.EmbedDim), int64(c.CodebookSize)
	L := len(c.ChannelMult)
	w := func(i int) int64 { return ch * int64(c.ChannelMult[i]) }
	top := w(L - 1)
	D, H, W := int64(c.PatchSize[0]), int64(c.PatchSize[1]), int64(c.PatchSize[2])
	x := m.Input(Input, dtype.Float32, []int64{-1, in, D, H, W}, []string{"batch", "", "", "", ""})

	// Encoder.
	h := m.conv("encoder.conv_in", x, in, ch, 3, 1)
	prev := ch
	for i := 0; i < L; i++ {
		for j := 0; j < c.ResBlocks; j++ {
			h = m.resBlock(fmt.Sprintf("encoder.down.%d.block.%d", i, j), h, prev, w(i))
			prev = w(i)
		}
		if i < L-1 {
			h = m.conv(fmt.Sprintf("encoder.down.%d.downsample.conv", i), h, w(i), w(i), 3, 2)
		}
	}
	h = m.resBlock("encoder.mid.block_1", h, top, top)
	h = m.resBlock("encoder.mid.block_2", h, top, top)
	h = m.conv("encoder.conv_out", m.SiLU(m.norm("encoder.norm_out", h, top)), top, z, 3, 1)
	ze := m.conv("quant_conv", h, z, e, 1, 1) // [N, e, d, h, w]

	// Vector quantisation over the flattened latent vectors [M, e].
	lat := c.LatentShape()
	zf := b.Reshape(b.Transpose(ze, 0, 2, 3, 4, 1), b.Ints(-1, e))
	cb := m.Param("quantize.embedding.weight", []int64{K, e}, e, K, nn.Uniform(1/float64(K)))
	dist := b.Add(b.Sub(b.ReduceSum(b.Mul(zf, zf), true, 1), b.Mul(b.ScalarLike(zf, 2), b.MatMul(zf, b.Transpose(cb, 1, 0)))),
		b.ReduceSum(b.Mul(cb, cb), false, 1))
	idx := b.Op("ArgMin", []string{dist}, graph.AInt("axis", 1), graph.AInt("keepdims", 0))
	zqf := b.Op("Gather", []string{cb, idx}, graph.AInt("axis", 0))
	sq := func(v string) string { return b.ReduceMean(b.Mul(v, v), false) }
	var updates []string
	if c.CodebookDecay > 0 {
		updates = m.emaCodebook(cb, zf, idx)
	}
	b.OpInto(CodebookLoss, "Identity", []string{sq(b.Sub(m.StopGradient(zf), zqf))})
	b.OpInto(CommitLoss, "Identity", []string{sq(b.Sub(zf, m.StopGradient(zqf)))})
	zq := b.Transpose(b.Reshape(zqf, b.Ints(-1, lat[0], lat[1], lat[2], e)), 0, 4, 1, 2, 3)
	zst := b.Add(ze, m.StopGradient(b.Sub(zq, ze)))
	b.OpInto(Codes, "Reshape", []string{idx, b.Ints(-1, lat[0], lat[1], lat[2])})
	m.codebookStats(idx)

	m.decode(zst)

	b.OpInto(RecLoss, "Identity", []string{b.ReduceMean(b.Abs(b.Sub(x, Recon)), false)})
	commit := b.Mul(b.Scalar(dtype.Float32, c.Beta), CommitLoss)
	total := b.Add(b.Mul(b.Scalar(dtype.Float32, c.L1Weight), RecLoss), commit)
	if c.CodebookDecay == 0 {
		// Otherwise the moving averages move the codes and CodebookLoss
		// is only logged.
		total = b.Add(total, CodebookLoss)
	}
	outs := []string{Loss, Recon, Codes, RecLoss, CodebookLoss, CommitLoss, CodebookUsage, CodebookPerplexity}
	if c.GAN() || c.PerceptualWeight > 0 {
		extra, eouts := m.trainingTerms(x, Recon)
		total = b.Add(total, extra)
		outs = append(outs, eouts...)
	}
	b.OpInto(Loss, "Identity", []string{total})
	m.G.Outputs = append(outs, updates...)
	if b.Err != nil {
		return nil, b.Err
	}
	return m.G, nil
}
