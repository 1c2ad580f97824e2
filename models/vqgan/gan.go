package vqgan

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/ortrain/ortrain/dtype"
	"github.com/ortrain/ortrain/models/internal/nn"
	"github.com/ortrain/ortrain/training/graph"
)

// The training-only terms, as TATS and medicaldiffusion train their 3D
// VQ-GANs: a perceptual distance on axial slices (perceptual_weight), a
// 2-D PatchGAN discriminator ("image_discriminator") on those slices (the
// same slice of every volume of a step, chosen from the step) and a 3-D
// one ("video_discriminator") on the whole volume, both
// NLayerDiscriminators (pix2pixHD's, with intermediate features); the
// recipe clips each discriminator's gradients on their own
// (models.Model.ClipGroups). Their PyTorch form alternates two optimizers on one batch; here
// one graph carries both steps and one backward pass computes both
// gradients, kept apart by stop-gradients:
//
//   - the generator's terms read the discriminators through stop-gradient
//     weights, so they train the autoencoder only (Lightning freezes the
//     discriminators for the generator's step);
//   - the discriminators' loss reads the reconstruction through a
//     stop-gradient (the anchors' x_recon.detach()), so it trains them only.
//
// Both read the same forward pass: the discriminator sees the
// reconstruction before this step's autoencoder update, where the
// anchors' second forward pass sees it after. Every adversarial term is
// multiplied by disc_factor = [global step ≥ discriminator_iter_start] and
// is training-only, so validation reports the autoencoder's losses.

// Names of the adversarial outputs, logged as train/<name>.
const (
	GLoss       = "g_loss"        // disc_factor·(image_gan_weight·g_image + video_gan_weight·g_video), g = −mean logit of the fake
	DLoss       = "d_loss"        // disc_factor·(image_gan_weight·d_image + video_gan_weight·d_video)
	DReal       = "d_real"        // mean logit on real inputs, over the discriminators in use
	DFake       = "d_fake"        // mean logit on reconstructions, likewise
	GANFeatLoss = "gan_feat_loss" // disc_factor·gan_feat_weight·(feature-matching L1 of both)
	// PerceptualLoss is perceptual_weight·mean distance of the slices.
	PerceptualLoss = "perceptual_loss"
)

// Perceptual prefixes the perceptual network's (frozen) parameters.
const Perceptual = "perceptual."

// Discriminator norms and losses (disc_norm, disc_loss_type).
const (
	NormBatch   = "batch"
	NormGroup   = "group"
	LossHinge   = "hinge"
	LossVanilla = "vanilla"
)

// GAN reports whether the configuration trains discriminators.
func (c Config) GAN() bool { return c.ImageGANWeight > 0 || c.VideoGANWeight > 0 }

// Discriminators lists the name prefixes of the discriminators in use.
func (c Config) Discriminators() []string {
	var out []string
	if c.ImageGANWeight > 0 {
		out = append(out, ImageDiscriminator)
	}
	if c.VideoGANWeight > 0 {
		out = append(out, VideoDiscriminator)
	}
	return out
}

// Name prefixes of the discriminators' parameters.
const (
	ImageDiscriminator = "image_discriminator."
	VideoDiscriminator = "video_discriminator."
)

// validateGAN reports the first adversarial setting Build cannot use.
func (c Config) validateGAN() error {
	for _, w := range []struct {
		key string
		v   float64
	}{{"l1_weight", c.L1Weight}, {"image_gan_weight", c.ImageGANWeight}, {"video_gan_weight", c.VideoGANWeight}, {"gan_feat_weight", c.GANFeatWeight}} {
		if !(w.v >= 0) {
			return fmt.Errorf("vqgan: %s %g must be ≥ 0", w.key, w.v)
		}
	}
	if c.DiscIterStart < 0 {
		return fmt.Errorf("vqgan: discriminator_iter_start %d is negative", c.DiscIterStart)
	}
	if !(c.PerceptualWeight >= 0) {
		return fmt.Errorf("vqgan: perceptual_weight %g must be ≥ 0", c.PerceptualWeight)
	}
	if c.PerceptualWeight > 0 {
		if c.PerceptualModel == "" {
			return fmt.Errorf("vqgan: perceptual_weight %g needs perceptual_model, an LPIPS network as ONNX: export one from the VGG16 and LPIPS weights you have with models/pytorch/export_lpips.py", c.PerceptualWeight)
		}
		if st, err := os.Stat(c.PerceptualModel); err != nil || st.IsDir() {
			abs, _ := filepath.Abs(c.PerceptualModel)
			return fmt.Errorf("vqgan: perceptual_model %s: not a readable file (%v)", abs, err)
		}
	} else if c.PerceptualModel != "" {
		return fmt.Errorf("vqgan: perceptual_model %s is given but perceptual_weight is 0: set a weight or drop the file", c.PerceptualModel)
	}
	if c.GANFeatWeight > 0 && !c.GAN() {
		return fmt.Errorf("vqgan: gan_feat_weight %g matches discriminator features, but no discriminator is on (image_gan_weight and video_gan_weight are 0)", c.GANFeatWeight)
	}
	if !c.GAN() {
		return nil
	}
	if c.DiscChannels < 1 || c.DiscLayers < 1 || c.DiscLayers > 8 {
		return fmt.Errorf("vqgan: disc_channels %d must be ≥ 1 and disc_layers %d in [1, 8]", c.DiscChannels, c.DiscLayers)
	}
	switch c.DiscNorm {
	case NormBatch:
	case NormGroup:
		for _, w := range discWidths(c) {
			if w%c.Groups != 0 {
				return fmt.Errorf("vqgan: disc_norm %q: discriminator width %d does not split into %d groups (groups)", c.DiscNorm, w, c.Groups)
			}
		}
	default:
		return fmt.Errorf("vqgan: disc_norm %q is not %q or %q", c.DiscNorm, NormBatch, NormGroup)
	}
	if c.DiscLossType != LossHinge && c.DiscLossType != LossVanilla {
		return fmt.Errorf("vqgan: disc_loss_type %q is not %q or %q", c.DiscLossType, LossHinge, LossVanilla)
	}
	return nil
}

// discWidths are the normalised layers' widths of a discriminator: layers
// 1..disc_layers, each doubling (at most 512).
func discWidths(c Config) []int {
	var out []int
	nf := c.DiscChannels
	for range c.DiscLayers {
		nf = min(2*nf, 512)
		out = append(out, nf)
	}
	return out
}

// discParams is one discriminator's parameter count with d spatial axes:
// 4^d kernels, a bias on every convolution, an affine norm on every
// layer but the first and last.
func discParams(c Config, d int) int64 {
	k := int64(1) << (2 * d) // 4^d
	in := int64(c.InChannels)
	conv := func(a, b int64) int64 { return b*a*k + b }
	prev := int64(c.DiscChannels)
	total := conv(in, prev)
	for _, w := range discWidths(c) {
		total += conv(prev, int64(w)) + 2*int64(w)
		prev = int64(w)
	}
	return total + conv(prev, 1)
}

// disc builds one discriminator's forward pass. Its parameters are made on
// first use; frozen reads them through stop-gradients.
type disc struct {
	m      *model
	prefix string // "image_discriminator." or "video_discriminator."
	frozen bool
}

func (d disc) param(name string, shape []int64, fanIn int64, init nn.Init) string {
	full := d.prefix + name
	if _, ok := d.m.G.Initializers[full]; !ok {
		d.m.Param(full, shape, fanIn, fanIn, init)
	}
	if d.frozen {
		return d.m.StopGradient(full)
	}
	return full
}

// conv is PyTorch's Conv{2,3}d(cin, cout, 4, stride, padding=2) with bias,
// as NLayerDiscriminator makes them.
func (d disc) conv(name, x string, spatial int, cin, cout, stride int64) string {
	k := make([]int64, spatial)
	shape := []int64{cout, cin}
	fan := cin
	for i := range k {
		k[i] = 4
		shape = append(shape, 4)
		fan *= 4
	}
	w := d.param(name+".weight", shape, fan, nn.TorchDefault)
	bias := d.param(name+".bias", []int64{cout}, fan, nn.TorchDefault)
	strides, pads := make([]int64, spatial), make([]int64, 2*spatial)
	for i := range strides {
		strides[i] = stride
	}
	for i := range pads {
		pads[i] = 2
	}
	return d.m.B.Op("Conv", []string{x, w, bias}, graph.AInts("kernel_shape", k), graph.AInts("strides", strides), graph.AInts("pads", pads))
}

// norm is the layer's normalisation in training mode. BatchNorm uses the
// batch's statistics (biased variance, ε 1e-5) and keeps no running ones:
// a discriminator is never run in eval mode, where they would be read.
func (d disc) norm(name, x string, spatial int, ch int64) string {
	b := d.m.B
	c := d.m.c
	bshape := []int64{ch}
	axes := []int64{0}
	for i := range spatial {
		bshape = append(bshape, 1)
		axes = append(axes, int64(2+i))
	}
	w := d.param(name+".weight", []int64{ch}, ch, nn.Fill(1))
	bb := d.param(name+".bias", []int64{ch}, ch, nn.Fill(0))
	var y string
	if c.DiscNorm == NormGroup {
		g := int64(c.Groups)
		xr := b.Reshape(x, b.Ints(0, g, -1))
		mean := b.ReduceMean(xr, true, 2)
		dv := b.Sub(xr, mean)
		v := b.ReduceMean(b.Mul(dv, dv), true, 2)
		y = b.ReshapeLike(b.Div(dv, b.Sqrt(b.Add(v, b.Scalar(dtype.Float32, 1e-6)))), x)
	} else {
		mean := b.ReduceMean(x, true, axes...)
		dv := b.Sub(x, mean)
		v := b.ReduceMean(b.Mul(dv, dv), true, axes...)
		y = b.Div(dv, b.Sqrt(b.Add(v, b.Scalar(dtype.Float32, 1e-5))))
	}
	return b.Add(b.Mul(y, b.Reshape(w, b.Ints(bshape...))), b.Reshape(bb, b.Ints(bshape...)))
}

func (d disc) leaky(x string) string {
	return d.m.B.Op("LeakyRelu", []string{x}, graph.AFloat("alpha", 0.2))
}

// forward is NLayerDiscriminator on x ([N, C, spatial...]): it returns the
// patch logits and the outputs of the layers before them (the features
// feature matching compares). Layer n is "model<n>", a Sequential of conv
// (".0"), norm (".1") and LeakyReLU 0.2, as pix2pixHD names them.
func (d disc) forward(x string, spatial int) (logits string, feats []string) {
	c := d.m.c
	nf := int64(c.DiscChannels)
	h := d.leaky(d.conv("model0.0", x, spatial, int64(c.InChannels), nf, 2))
	feats = append(feats, h)
	for i, w := range discWidths(c) {
		stride := int64(2)
		if i == c.DiscLayers-1 {
			stride = 1 // the last normalised layer keeps the size
		}
		name := fmt.Sprintf("model%d", i+1)
		h = d.leaky(d.norm(name+".1", d.conv(name+".0", h, spatial, nf, int64(w), stride), spatial, int64(w)))
		feats = append(feats, h)
		nf = int64(w)
	}
	return d.conv(fmt.Sprintf("model%d.0", c.DiscLayers+1), h, spatial, nf, 1, 1), feats
}

// slices picks one axial slice of the volumes x ([N, C, D, H, W]) as the
// 2-D discriminator's input ([N, C, H, W]): slice (s·7919) mod D at global
// step s, the same for the whole batch. The anchors draw one at random per
// volume; a function of the step keeps a resumed run bit-exact and still
// visits every slice.
func (m *model) slices(x, step string) string {
	b := m.B
	D := int64(m.c.PatchSize[0])
	all := make([]int64, D)
	for i := range all {
		all[i] = int64(i)
	}
	idx := b.Op("Mod", []string{b.Mul(b.Cast(step, dtype.Int64), b.Ints(7919)), b.Ints(D)}) // [1]
	mask := b.Reshape(b.Cast(b.Op("Equal", []string{b.Ints(all...), idx}), dtype.Float32), b.Ints(1, 1, D, 1, 1))
	return b.ReduceSum(b.Mul(x, mask), false, 2)
}

// trainingTerms adds the perceptual term and the discriminators and
// returns the training-only sum of their terms (to add to the loss) and
// the outputs to log.
func (m *model) trainingTerms(x, recon string) (extra string, outs []string) {
	c, b := m.c, m.B
	f := func(v float64) string { return b.Scalar(dtype.Float32, v) }
	step := m.Input(graph.GlobalStepInput, dtype.Float32, []int64{}, nil)
	mean := func(v string) string { return b.ReduceMean(v, false) }
	frames, framesRecon := m.slices(x, step), m.slices(recon, step)
	var total string
	if c.PerceptualWeight > 0 {
		d := m.perceptual(frames, framesRecon)
		p := b.Mul(f(c.PerceptualWeight), mean(d))
		b.OpInto(PerceptualLoss, "Identity", []string{b.TrainingOnly(p)})
		total, outs = p, append(outs, PerceptualLoss)
	}
	if c.GAN() {
		adv, aouts := m.adversarial(x, recon, frames, framesRecon, step)
		outs = append(outs, aouts...)
		if total == "" {
			total = adv
		} else {
			total = b.Add(total, adv)
		}
	}
	return b.TrainingOnly(total), outs
}

// perceptual inlines the perceptual network (its parameters named
// Perceptual + its own names, frozen by the recipe) on the slices and
// their reconstructions, and returns its distance.
func (m *model) perceptual(frames, framesRecon string) string {
	c, b := m.c, m.B
	src, err := graph.Load(c.PerceptualModel)
	if err != nil {
		b.Err = fmt.Errorf("vqgan: perceptual_model: %w", err)
		return ""
	}
	if len(src.Inputs) != 2 || len(src.Outputs) != 1 {
		b.Fail("vqgan: perceptual_model %s has inputs %v and outputs %v; want two image batches in and one distance out (models/pytorch/export_lpips.py)", c.PerceptualModel, src.Inputs, src.Outputs)
		return ""
	}
	want := b.Info(frames)
	for _, in := range src.Inputs {
		info := src.Info(in)
		if !info.Float() || !info.Known || len(info.Shape) != 4 || !fits(info.Shape[1:], want.Shape[1:]) {
			b.Fail("vqgan: perceptual_model %s: input %s is %v; the slices it must take are %v ([N, C, H, W] of the patch)", c.PerceptualModel, in, info, want)
			return ""
		}
	}
	outs, err := m.G.Inline(src, Perceptual, map[string]string{src.Inputs[0]: frames, src.Inputs[1]: framesRecon})
	if err != nil {
		b.Err = fmt.Errorf("vqgan: perceptual_model %s: %w", c.PerceptualModel, err)
		return ""
	}
	if info := b.Info(outs[0]); !info.Float() {
		b.Fail("vqgan: perceptual_model %s: its output is %v, not a floating distance", c.PerceptualModel, info)
		return ""
	}
	return outs[0]
}

// fits reports whether a declared shape (-1 free) admits the sizes.
func fits(declared, sizes []int64) bool {
	for i, d := range declared {
		if d >= 0 && d != sizes[i] {
			return false
		}
	}
	return true
}

// adversarial adds the discriminators and returns the sum of the
// adversarial terms and the outputs to log.
func (m *model) adversarial(x, recon, frames, framesRecon, step string) (extra string, outs []string) {
	c, b := m.c, m.B
	f := func(v float64) string { return b.Scalar(dtype.Float32, v) }
	factor := b.Cast(b.Op("GreaterOrEqual", []string{step, f(float64(c.DiscIterStart))}), dtype.Float32)
	mean := func(v string) string { return b.ReduceMean(v, false) }

	type side struct {
		weight       float64
		prefix       string
		spatial      int
		real, fake   string
		gLoss, dLoss string
		realLogit    string
		fakeLogit    string
		feat         string
	}
	var sides []*side
	if c.ImageGANWeight > 0 {
		sides = append(sides, &side{weight: c.ImageGANWeight, prefix: ImageDiscriminator, spatial: 2, real: frames, fake: framesRecon})
	}
	if c.VideoGANWeight > 0 {
		sides = append(sides, &side{weight: c.VideoGANWeight, prefix: VideoDiscriminator, spatial: 3, real: x, fake: recon})
	}
	var gSum, dSum, featSum, realSum, fakeSum string
	add := func(acc *string, v string) {
		if *acc == "" {
			*acc = v
		} else {
			*acc = b.Add(*acc, v)
		}
	}
	for _, s := range sides {
		// The discriminator's own step: real against the detached fake.
		trained := disc{m: m, prefix: s.prefix}
		realLogits, _ := trained.forward(s.real, s.spatial)
		fakeLogits, _ := trained.forward(m.StopGradient(s.fake), s.spatial)
		var dl string
		if c.DiscLossType == LossHinge {
			dl = b.Add(mean(b.Relu(b.Sub(f(1), realLogits))), mean(b.Relu(b.Add(f(1), fakeLogits))))
		} else {
			dl = b.Add(mean(b.Op("Softplus", []string{b.Neg(realLogits)})), mean(b.Op("Softplus", []string{fakeLogits})))
		}
		add(&dSum, b.Mul(f(0.5*s.weight), dl))
		add(&realSum, mean(realLogits))
		add(&fakeSum, mean(fakeLogits))

		// The generator's: the frozen discriminator on the reconstruction.
		frozen := disc{m: m, prefix: s.prefix, frozen: true}
		gLogits, gFeats := frozen.forward(s.fake, s.spatial)
		add(&gSum, b.Mul(f(-s.weight), mean(gLogits)))
		if c.GANFeatWeight > 0 {
			// pix2pixHD's feature matching, with the anchors' weight
			// 4/(3+1) = 1 per layer; the real features are targets.
			_, rFeats := frozen.forward(s.real, s.spatial)
			for i := range gFeats {
				add(&featSum, mean(b.Abs(b.Sub(gFeats[i], m.StopGradient(rFeats[i])))))
			}
		}
	}
	k := f(1 / float64(len(sides)))
	gLoss := b.Mul(factor, gSum)
	dLoss := b.Mul(factor, dSum)
	total := b.Add(gLoss, dLoss)
	outs = []string{GLoss, DLoss, DReal, DFake}
	b.OpInto(GLoss, "Identity", []string{b.TrainingOnly(gLoss)})
	b.OpInto(DLoss, "Identity", []string{b.TrainingOnly(dLoss)})
	b.OpInto(DReal, "Identity", []string{b.TrainingOnly(b.Mul(realSum, k))})
	b.OpInto(DFake, "Identity", []string{b.TrainingOnly(b.Mul(fakeSum, k))})
	if featSum != "" {
		feat := b.Mul(b.Mul(factor, f(c.GANFeatWeight)), featSum)
		total = b.Add(total, feat)
		b.OpInto(GANFeatLoss, "Identity", []string{b.TrainingOnly(feat)})
		outs = append(outs, GANFeatLoss)
	}
	return total, outs
}
