package vqgan_test

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/ortrain/ortrain/models"
	"github.com/ortrain/ortrain/models/internal/steptest"
	"github.com/ortrain/ortrain/models/vqgan"
	"github.com/ortrain/ortrain/ort"
	"github.com/ortrain/ortrain/ort/orttest"
	"github.com/ortrain/ortrain/training/artifacts"
)

// tiny is a test size: 8³ patches, two levels (4³ latents), 16 codes.
func tiny() vqgan.Config {
	return vqgan.Config{PatchSize: []int{8, 8, 8}, InChannels: 1, Channels: 8, ChannelMult: []int{1, 2},
		ResBlocks: 1, ZChannels: 4, EmbedDim: 4, CodebookSize: 16, Beta: 0.25, Groups: 4, Seed: 1,
		L1Weight: 1, DiscChannels: 8, DiscLayers: 2, DiscNorm: vqgan.NormBatch, DiscLossType: vqgan.LossHinge}
}

// TestParamCount checks the closed form against the built graph's trained
// scalars on sizes that exercise each term (nin_shortcuts, several blocks
// per level, more levels), and the default (seed) size's count, near 36M
// (its EMA codebook a buffer).
func TestParamCount(t *testing.T) {
	deeper := tiny()
	deeper.ChannelMult, deeper.ResBlocks, deeper.PatchSize = []int{1, 1, 2, 4}, 2, []int{16, 8, 8}
	wide := tiny()
	wide.InChannels, wide.ZChannels, wide.EmbedDim, wide.CodebookSize = 2, 8, 3, 100
	ema := tiny()
	ema.CodebookDecay = 0.99 // the codebook is a buffer then
	gan := tiny()
	gan.ImageGANWeight, gan.VideoGANWeight, gan.GANFeatWeight = 1, 0.5, 4
	group := gan
	group.DiscNorm, group.DiscLayers, group.VideoGANWeight = vqgan.NormGroup, 3, 0
	for _, tc := range []struct {
		name string
		c    vqgan.Config
		want int64 // 0: only compare formula and graph
	}{
		{"tiny", tiny(), 0},
		{"deeper", deeper, 0},
		{"wide", wide, 0},
		{"ema codebook", ema, tiny().ParamCount() - 16*4},
		// Widths 8, 16, 32, 1; 2-D: 8·1·16+8, 16·8·16+16+2·16,
		// 32·16·16+32+2·32, 1·32·16+1; 3-D: kernels of 64.
		{"discriminators", gan, tiny().ParamCount() + (136 + 2096 + 8288 + 513) + (520 + 8240 + 32864 + 2049)},
		{"group-norm image discriminator", group, 0},
		{"default", vqgan.Default(), 36_269_785},
	} {
		g, err := vqgan.Build(tc.c)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		got, formula := models.CountParams(g), tc.c.ParamCount()
		if got != formula {
			t.Errorf("%s: graph has %d parameters, formula says %d", tc.name, got, formula)
		}
		if tc.want != 0 && got != tc.want {
			t.Errorf("%s: %d parameters, documented %d", tc.name, got, tc.want)
		}
	}
}

// TestConfigErrors: sizes the architecture cannot take are refused.
func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		edit func(*vqgan.Config)
		want string // in the error
	}{
		{"patch not divisible by 2^(levels-1)", func(c *vqgan.Config) { c.PatchSize = []int{8, 7, 8} }, "patch_size"},
		{"patch not 3-D", func(c *vqgan.Config) { c.PatchSize = []int{8, 8} }, "patch_size"},
		{"groups do not divide width", func(c *vqgan.Config) { c.Groups = 3 }, "groups"},
		{"no levels", func(c *vqgan.Config) { c.ChannelMult = nil }, "channel_mult"},
		{"negative discriminator_iter_start", func(c *vqgan.Config) { c.ImageGANWeight, c.DiscIterStart = 1, -1 }, "discriminator_iter_start"},
		{"negative video_gan_weight", func(c *vqgan.Config) { c.VideoGANWeight = -0.5 }, "video_gan_weight"},
		{"feature matching without a discriminator", func(c *vqgan.Config) { c.GANFeatWeight = 4 }, "gan_feat_weight"},
		{"unknown disc_norm", func(c *vqgan.Config) { c.ImageGANWeight, c.DiscNorm = 1, "instance" }, "disc_norm"},
		{"unknown disc_loss_type", func(c *vqgan.Config) { c.VideoGANWeight, c.DiscLossType = 1, "wasserstein" }, "disc_loss_type"},
		{"disc_layers too deep", func(c *vqgan.Config) { c.ImageGANWeight, c.DiscLayers = 1, 9 }, "disc_layers"},
		{"group norm that does not divide", func(c *vqgan.Config) {
			c.ImageGANWeight, c.DiscNorm, c.Groups, c.DiscChannels = 1, vqgan.NormGroup, 4, 5
		}, "disc_norm"},
		{"perceptual weight without a model", func(c *vqgan.Config) { c.PerceptualWeight = 0.1 }, "perceptual_model"},
		{"perceptual model that is not there", func(c *vqgan.Config) { c.PerceptualWeight, c.PerceptualModel = 0.1, "/nonexistent/lpips.onnx" }, "/nonexistent/lpips.onnx"},
		{"perceptual model without a weight", func(c *vqgan.Config) { c.PerceptualModel = "lpips.onnx" }, "perceptual_weight is 0"},
	} {
		c := tiny()
		tc.edit(&c)
		if _, err := vqgan.Build(c); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v, want one naming %q", tc.name, err, tc.want)
		}
	}
}

// phantoms is a batch of n smooth volumes in [-1, 1]: a sphere of random
// centre, radius and intensity on a dark background, like a crude CT.
func phantoms(r *rand.Rand, n int, p []int) []float32 {
	D, H, W := p[0], p[1], p[2]
	v := make([]float32, 0, n*D*H*W)
	for b := 0; b < n; b++ {
		cz, cy, cx := r.Float64()*float64(D), r.Float64()*float64(H), r.Float64()*float64(W)
		rad, val := 1.5+r.Float64()*float64(min(D, H, W))/3, 0.2+0.8*r.Float64()
		for z := 0; z < D; z++ {
			for y := 0; y < H; y++ {
				for x := 0; x < W; x++ {
					d := math.Sqrt(sq(float64(z)-cz) + sq(float64(y)-cy) + sq(float64(x)-cx))
					v = append(v, float32(-0.8+val*(1-math.Tanh(d-rad))/2))
				}
			}
		}
	}
	return v
}

func sq(x float64) float64 { return x * x }

// TestForward runs the tiny model forward on ONNX Runtime (StopGradient read
// as Identity) and checks the outputs: shapes, codes inside the codebook,
// codebook and commitment terms equal in value (they differ only in where
// the gradient is cut) and positive, and loss = rec + codebook + β·commit.
func TestForward(t *testing.T) {
	orttest.Init(t)
	c := tiny()
	g, err := vqgan.Build(c)
	if err != nil {
		t.Fatal(err)
	}
	const n = 2
	x, _ := ort.NewTensor([]int64{n, 1, 8, 8, 8}, phantoms(rand.New(rand.NewPCG(1, 2)), n, c.PatchSize))
	defer x.Close()
	out := steptest.Forward(t, g, map[string]*ort.Value{vqgan.Input: x})
	if s := out[vqgan.Recon].Shape(); !slices.Equal(s, []int64{n, 1, 8, 8, 8}) {
		t.Errorf("recon shape %v, want [2 1 8 8 8]", s)
	}
	if s := out[vqgan.Codes].Shape(); !slices.Equal(s, []int64{n, 4, 4, 4}) {
		t.Errorf("codes shape %v, want [2 4 4 4]", s)
	}
	for _, code := range ort.Data[int64](out[vqgan.Codes]) {
		if code < 0 || code >= int64(c.CodebookSize) {
			t.Fatalf("code %d outside the codebook of %d", code, c.CodebookSize)
		}
	}
	f := func(name string) float64 { return float64(ort.Data[float32](out[name])[0]) }
	// The batch's codebook usage and perplexity, computed here from the codes.
	counts := map[int64]float64{}
	codes := ort.Data[int64](out[vqgan.Codes])
	for _, code := range codes {
		counts[code]++
	}
	h := 0.0
	for _, k := range counts {
		p := k / float64(len(codes))
		h -= p * math.Log(p+1e-10)
	}
	if u, want := f(vqgan.CodebookUsage), float64(len(counts))/float64(c.CodebookSize); math.Abs(u-want) > 1e-6 {
		t.Errorf("codebook_usage %g, want %g (%d of %d codes)", u, want, len(counts), c.CodebookSize)
	}
	if p, want := f(vqgan.CodebookPerplexity), math.Exp(h); math.Abs(p-want) > 1e-4*want {
		t.Errorf("codebook_perplexity %g, want %g", p, want)
	}
	rec, cb, com, loss := f(vqgan.RecLoss), f(vqgan.CodebookLoss), f(vqgan.CommitLoss), f(vqgan.Loss)
	t.Logf("rec %.4f codebook %.4f commit %.4f loss %.4f", rec, cb, com, loss)
	if !(rec > 0) || !(cb > 0) || math.Abs(cb-com) > 1e-6*(1+cb) {
		t.Errorf("rec %g, codebook %g, commit %g: want positive, codebook = commit", rec, cb, com)
	}
	if want := rec + cb + c.Beta*com; math.Abs(loss-want) > 1e-5*(1+want) {
		t.Errorf("loss %g, want rec + codebook + β·commit = %g", loss, want)
	}
}

// TestTinyVQGANTrains trains the tiny model, with the recipe's default (EMA)
// codebook, through artifacts.Build's three graphs with AdamW (lr 3e-3, batch 4) on fresh phantoms: the loss must
// fall by half within 150 steps (it starts near 0.7, the mean distance of
// untrained output from the phantoms). It skips while autodiff lacks a
// rule the model needs (Gather, Resize, StopGradient...).
func TestTinyVQGANTrains(t *testing.T) {
	c := tiny()
	c.CodebookDecay = vqgan.Default().CodebookDecay // the registry lays the params over Default's
	m, err := models.Build("vqgan3d", map[string]any{"patch_size": []int{8, 8, 8}, "channels": 8, "channel_mult": []int{1, 2},
		"res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4, "seed": 1})
	if err != nil {
		t.Fatal(err)
	}
	if m.ParamCount != c.ParamCount() {
		t.Fatalf("registry built %d parameters, tiny() has %d", m.ParamCount, c.ParamCount())
	}
	_, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss})
	tr := steptest.Open(t, dir)
	r := rand.New(rand.NewPCG(7, 8))
	batch := func() map[string]*ort.Value {
		x, _ := ort.NewTensor([]int64{4, 1, 8, 8, 8}, phantoms(r, 4, c.PatchSize))
		t.Cleanup(x.Close)
		return map[string]*ort.Value{vqgan.Input: x}
	}
	var first, last float64
	for step := 0; step < 150; step++ {
		l := tr.Step(batch(), 3e-3)
		if step == 0 {
			first = l
		}
		last = l
	}
	ev := tr.Eval(batch())
	t.Logf("tiny VQ-GAN (%d parameters): loss %.3f at step 1, %.3f at step 150, eval %.3f", m.ParamCount, first, last, ev)
	if !(last < first/2) || !(ev < first/2) {
		t.Errorf("loss %.3f -> %.3f (eval %.3f), want it halved", first, last, ev)
	}
}

// TestEMACodebookTrains: with codebook_decay the codebook and its two
// moving statistics are buffers (not trained parameters) that the training
// graph updates every step and the eval graph only reads: after one step
// the moving count holds (1−d)·M over the M latent vectors of the batch,
// the codebook has moved, and training lowers the loss.
func TestEMACodebookTrains(t *testing.T) {
	c := tiny()
	m, err := models.Build("vqgan3d", map[string]any{"patch_size": []int{8, 8, 8}, "channels": 8, "channel_mult": []int{1, 2},
		"res_blocks": 1, "z_channels": 4, "embed_dim": 4, "codebook_size": 16, "groups": 4, "seed": 1, "codebook_decay": 0.9})
	if err != nil {
		t.Fatal(err)
	}
	man, dir := steptest.BuildOrSkip(t, artifacts.Options{Graph: m.Graph, Loss: m.Loss})
	var buffers []string
	for _, b := range man.Buffers {
		buffers = append(buffers, b.Name)
	}
	for _, want := range []string{"quantize.embedding.weight", vqgan.ClusterSize, vqgan.EmbedAvg} {
		if !slices.Contains(buffers, want) {
			t.Errorf("buffers %v lack %s", buffers, want)
		}
	}
	for _, p := range man.Params {
		if p.Name == "quantize.embedding.weight" {
			t.Error("the EMA codebook is trained by gradients too")
		}
	}
	tr := steptest.Open(t, dir)
	cb0 := slices.Clone(tr.State("quantize.embedding.weight"))
	r := rand.New(rand.NewPCG(7, 8))
	batch := func() map[string]*ort.Value {
		x, _ := ort.NewTensor([]int64{4, 1, 8, 8, 8}, phantoms(r, 4, c.PatchSize))
		t.Cleanup(x.Close)
		return map[string]*ort.Value{vqgan.Input: x}
	}
	first := tr.Step(batch(), 3e-3)
	total := 0.0
	for _, v := range tr.State(vqgan.ClusterSize) {
		total += float64(v)
	}
	if M := 4.0 * 4 * 4 * 4; math.Abs(total-0.1*M) > 1e-4*M {
		t.Errorf("moving count sums to %g after one step, want (1−0.9)·%g", total, M)
	}
	if slices.Equal(cb0, tr.State("quantize.embedding.weight")) {
		t.Error("the codebook did not move")
	}
	last := first
	for range 30 {
		last = tr.Step(batch(), 3e-3)
	}
	if !(last < first) {
		t.Errorf("loss %.3f -> %.3f over 30 steps, want lower", first, last)
	}
}
