"""Worked example: a 3D VQ-GAN autoencoder written in PyTorch and exported,
with its loss, for ortrain. The module has the layout, parameter names and
arithmetic of ortrain's built-in recipe `vqgan3d` (models/vqgan), so either
side's weights load into the other; the vector-quantiser shows how to keep
the straight-through estimator and the codebook/commitment losses through
ONNX export with ortrain_export.stop_gradient.

    /usr/bin/python3 models/pytorch/export_vqgan3d.py OUT_DIR [--config '{"channels": 8, ...}']
    ortrain artifacts build --model OUT_DIR/vqgan3d.onnx --out artifacts/

--config takes the recipe's parameter names (patch_size, channels,
channel_mult, res_blocks, z_channels, embed_dim, codebook_size, beta,
groups, l1_weight, and the discriminators' image_gan_weight,
video_gan_weight, gan_feat_weight, discriminator_iter_start,
disc_channels, disc_layers, disc_norm, disc_loss_type); unnamed ones keep
the recipe's defaults. With a discriminator the graph takes the global
step (--step) as input "ortrain.global_step", and the reference gradients
are the anchors' two optimizer steps at the same weights: the
autoencoder's loss with the discriminators frozen, the discriminators'
loss on the detached reconstruction. OUT_DIR gets
vqgan3d.onnx and reference.safetensors: a batch ("volume", and the
step), PyTorch's
"loss" on it in training mode and "grad.<param>" for every parameter.
"""

import argparse
import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ortrain_export as ox  # noqa: E402
from reference_step import write_safetensors  # noqa: E402
import export_lpips  # noqa: E402

DEFAULTS = dict(patch_size=[64, 64, 64], in_channels=1, channels=64, channel_mult=[1, 1, 2, 4], res_blocks=2,
                z_channels=8, embed_dim=8, codebook_size=8192, beta=0.25, groups=32,
                codebook_decay=0.99, restart_thres=1.0, no_random_restart=False, l1_weight=1.0,
                image_gan_weight=0.0, video_gan_weight=0.0, gan_feat_weight=0.0, discriminator_iter_start=0,
                disc_channels=64, disc_layers=3, disc_norm="batch", disc_loss_type="hinge",
                perceptual_weight=0.0, perceptual_model="")
GLOBAL_STEP = "ortrain.global_step"  # the trainer feeds the optimizer step here


def silu(x):
    return x * torch.sigmoid(x)


def norm(groups, c):
    # eps 1e-6 as taming-transformers' VQ-GAN (and the Go recipe).
    return nn.GroupNorm(groups, c, eps=1e-6)


class ResBlock(nn.Module):
    def __init__(self, a, b, groups):
        super().__init__()
        self.norm1, self.conv1 = norm(groups, a), nn.Conv3d(a, b, 3, padding=1)
        self.norm2, self.conv2 = norm(groups, b), nn.Conv3d(b, b, 3, padding=1)
        self.nin_shortcut = nn.Conv3d(a, b, 1) if a != b else None

    def forward(self, x):
        h = self.conv1(silu(self.norm1(x)))
        h = self.conv2(silu(self.norm2(h)))
        return (x if self.nin_shortcut is None else self.nin_shortcut(x)) + h


class Level(nn.Module):
    """One resolution level: residual blocks, then an optional resampler
    named downsample or upsample, holding a conv as taming names it."""

    def __init__(self, blocks):
        super().__init__()
        self.block = nn.ModuleList(blocks)


class Resample(nn.Module):
    def __init__(self, c, down):
        super().__init__()
        self.down = down
        self.conv = nn.Conv3d(c, c, 3, stride=2 if down else 1, padding=1)

    def forward(self, x):
        if not self.down:
            x = F.interpolate(x, scale_factor=2.0, mode="nearest")
        return self.conv(x)


class Mid(nn.Module):
    def __init__(self, c, groups):
        super().__init__()
        self.block_1, self.block_2 = ResBlock(c, c, groups), ResBlock(c, c, groups)

    def forward(self, x):
        return self.block_2(self.block_1(x))


class Encoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ch, mult, g = cfg["channels"], cfg["channel_mult"], cfg["groups"]
        self.conv_in = nn.Conv3d(cfg["in_channels"], ch, 3, padding=1)
        self.down = nn.ModuleList()
        prev = ch
        for i, m in enumerate(mult):
            blocks = []
            for _ in range(cfg["res_blocks"]):
                blocks.append(ResBlock(prev, ch * m, g))
                prev = ch * m
            level = Level(blocks)
            if i < len(mult) - 1:
                level.downsample = Resample(prev, down=True)
            self.down.append(level)
        self.mid = Mid(prev, g)
        self.norm_out = norm(g, prev)
        self.conv_out = nn.Conv3d(prev, cfg["z_channels"], 3, padding=1)

    def forward(self, x):
        h = self.conv_in(x)
        for level in self.down:
            for blk in level.block:
                h = blk(h)
            if hasattr(level, "downsample"):
                h = level.downsample(h)
        return self.conv_out(silu(self.norm_out(self.mid(h))))


class Decoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        ch, mult, g = cfg["channels"], cfg["channel_mult"], cfg["groups"]
        top = ch * mult[-1]
        self.conv_in = nn.Conv3d(cfg["z_channels"], top, 3, padding=1)
        self.mid = Mid(top, g)
        levels = [None] * len(mult)
        prev = top
        for i in reversed(range(len(mult))):
            blocks = []
            for _ in range(cfg["res_blocks"]):
                blocks.append(ResBlock(prev, ch * mult[i], g))
                prev = ch * mult[i]
            levels[i] = Level(blocks)
            if i > 0:
                levels[i].upsample = Resample(prev, down=False)
        self.up = nn.ModuleList(levels)  # indexed by level, run from the top
        self.norm_out = norm(g, prev)
        self.conv_out = nn.Conv3d(prev, cfg["in_channels"], 3, padding=1)

    def forward(self, z):
        h = self.mid(self.conv_in(z))
        for level in reversed(self.up):
            for blk in level.block:
                h = blk(h)
            if hasattr(level, "upsample"):
                h = level.upsample(h)
        return self.conv_out(silu(self.norm_out(h)))


class Quantizer(nn.Module):
    def __init__(self, k, e, decay=0.0, restart_thres=1.0, no_random_restart=False):
        super().__init__()
        self.embedding = nn.Embedding(k, e)
        nn.init.uniform_(self.embedding.weight, -1.0 / k, 1.0 / k)
        self.decay, self.restart_thres, self.no_random_restart = decay, restart_thres, no_random_restart
        if decay > 0:
            # TATS's EMA codebook: the codes move by moving averages, not by
            # a gradient; the statistics are buffers, as in the recipe.
            self.embedding.weight.requires_grad_(False)
            self.register_buffer("cluster_size", torch.zeros(k))
            self.register_buffer("embed_avg", self.embedding.weight.detach().clone())

    def flat(self, z):
        """The latent vectors [M, e] and their nearest codes [M]."""
        zf = z.permute(0, 2, 3, 4, 1).reshape(-1, z.shape[1])
        cb = self.embedding.weight
        dist = (zf * zf).sum(1, keepdim=True) - 2 * (zf @ cb.t()) + (cb * cb).sum(1)
        return zf, dist.argmin(1)

    @torch.no_grad()
    def ema_update(self, z):
        """TATS's update of the codebook from the latents z: the codes'
        moving counts N and sums S, Laplace-smoothed counts, codes = S/N,
        and codes whose N fell below restart_thres replaced by encoder
        vectors of the batch: row (k*7919) mod M (the recipe's choice,
        where TATS draws a random permutation). Returns the new codebook,
        N and S."""
        zf, idx = self.flat(z)
        k, d = self.embedding.weight.shape[0], self.decay
        onehot = F.one_hot(idx, k).float()
        size = d * self.cluster_size + (1 - d) * onehot.sum(0)
        avg = d * self.embed_avg + (1 - d) * (onehot.t() @ zf)
        n = size.sum()
        smoothed = (size + 1e-7) / (n + k * 1e-7) * n
        codes = avg / smoothed.unsqueeze(1)
        if not self.no_random_restart:
            rows = zf[(torch.arange(k, device=zf.device) * 7919) % zf.shape[0]]
            used = (size >= self.restart_thres).float().unsqueeze(1)
            codes = codes * used + rows * (1 - used)
        return codes, size, avg

    def forward(self, z):
        n, e = z.shape[0], z.shape[1]
        grid = z.shape[2:]
        zf = z.permute(0, 2, 3, 4, 1).reshape(-1, e)
        cb = self.embedding.weight
        dist = (zf * zf).sum(1, keepdim=True) - 2 * (zf @ cb.t()) + (cb * cb).sum(1)
        idx = dist.argmin(1)
        zqf = F.embedding(idx, cb)
        # .detach() would vanish from the ONNX graph; stop_gradient does not.
        codebook = ((ox.stop_gradient(zf) - zqf) ** 2).mean()
        commit = ((zf - ox.stop_gradient(zqf)) ** 2).mean()
        zq = zqf.reshape(n, grid[0], grid[1], grid[2], e).permute(0, 4, 1, 2, 3)
        z_st = z + ox.stop_gradient(zq - z)  # straight-through estimator
        return z_st, idx.reshape(n, grid[0], grid[1], grid[2]), codebook, commit


class Norm(nn.Module):
    """A discriminator layer's normalisation in training mode, written out
    so that it exports without running statistics (a discriminator never
    runs in eval mode): BatchNorm over the batch and spatial axes (biased
    variance, eps 1e-5, as nn.BatchNorm in train mode computes it) or
    GroupNorm (eps 1e-6)."""

    def __init__(self, c, kind, groups):
        super().__init__()
        self.kind, self.groups = kind, groups
        self.weight, self.bias = nn.Parameter(torch.ones(c)), nn.Parameter(torch.zeros(c))

    def forward(self, x, sg):
        shape = (1, -1) + (1,) * (x.dim() - 2)
        if self.kind == "batch":
            axes = [0] + list(range(2, x.dim()))
            mean = x.mean(axes, keepdim=True)
            d = x - mean
            y = d / torch.sqrt((d * d).mean(axes, keepdim=True) + 1e-5)
        else:
            xr = x.reshape(x.shape[0], self.groups, -1)
            d = xr - xr.mean(2, keepdim=True)
            y = (d / torch.sqrt((d * d).mean(2, keepdim=True) + 1e-6)).reshape(x.shape)
        return y * sg(self.weight).reshape(shape) + sg(self.bias).reshape(shape)


class NLayerDiscriminator(nn.Module):
    """pix2pixHD's PatchGAN with intermediate features, as TATS and
    medicaldiffusion use it (2-D on slices, 3-D on volumes): model0 =
    conv(4, stride 2) + LeakyReLU(0.2); model1..model{L-1} = conv(stride 2)
    + norm + LeakyReLU; model{L} the same with stride 1; model{L+1} a
    conv to one channel. forward(x, frozen) returns the logits and every
    layer's output; frozen reads the weights through stop_gradient (the
    generator's terms, which must not train the discriminator)."""

    def __init__(self, cfg, dims):
        super().__init__()
        Conv = nn.Conv2d if dims == 2 else nn.Conv3d
        self.dims, self.layers = dims, cfg["disc_layers"]
        nf = cfg["disc_channels"]
        self.model0 = nn.Sequential(Conv(cfg["in_channels"], nf, 4, stride=2, padding=2), nn.LeakyReLU(0.2))
        for n in range(1, self.layers + 1):
            prev, nf = nf, min(nf * 2, 512)
            stride = 2 if n < self.layers else 1
            setattr(self, "model%d" % n, nn.Sequential(Conv(prev, nf, 4, stride=stride, padding=2),
                                                        Norm(nf, cfg["disc_norm"], cfg["groups"]), nn.LeakyReLU(0.2)))
        setattr(self, "model%d" % (self.layers + 1), nn.Sequential(Conv(nf, 1, 4, stride=1, padding=2)))

    def forward(self, x, frozen=False):
        sg = ox.stop_gradient if frozen else (lambda t: t)
        conv = F.conv2d if self.dims == 2 else F.conv3d
        feats, h = [], x
        for n in range(self.layers + 2):
            seq = getattr(self, "model%d" % n)
            c = seq[0]
            h = conv(h, sg(c.weight), sg(c.bias), stride=c.stride, padding=c.padding)
            if n == self.layers + 1:
                return h, feats
            if n > 0:
                h = seq[1](h, sg)
            h = F.leaky_relu(h, 0.2)
            feats.append(h)


def axial_slices(x, step):
    """Slice (step*7919) mod D of every volume ([N, C, D, H, W] -> [N, C,
    H, W]), the recipe's stand-in for the anchors' random slice."""
    d = x.shape[2]
    idx = (step.long() * 7919) % d
    mask = (torch.arange(d, device=x.device) == idx).float().reshape(1, 1, d, 1, 1)
    return (x * mask).sum(2)


def disc_loss(kind, real, fake):
    if kind == "hinge":
        return 0.5 * (F.relu(1 - real).mean() + F.relu(1 + fake).mean())
    return 0.5 * (F.softplus(-real).mean() + F.softplus(fake).mean())


class VQGAN3D(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg, self.beta = cfg, cfg["beta"]
        self.encoder = Encoder(cfg)
        self.quant_conv = nn.Conv3d(cfg["z_channels"], cfg["embed_dim"], 1)
        self.quantize = Quantizer(cfg["codebook_size"], cfg["embed_dim"], cfg["codebook_decay"],
                                  cfg["restart_thres"], cfg["no_random_restart"])
        self.post_quant_conv = nn.Conv3d(cfg["embed_dim"], cfg["z_channels"], 1)
        self.decoder = Decoder(cfg)

        if cfg["image_gan_weight"] > 0:
            self.image_discriminator = NLayerDiscriminator(cfg, 2)
        if cfg["video_gan_weight"] > 0:
            self.video_discriminator = NLayerDiscriminator(cfg, 3)
        if cfg["perceptual_weight"] > 0:
            # Frozen, as the recipe keeps the perceptual network's weights.
            self.perceptual = export_lpips.LPIPS(cfg.get("perceptual_widths", export_lpips.VGG16_WIDTHS))
            self.perceptual.requires_grad_(False)

    def autoencode(self, volume):
        z = self.quant_conv(self.encoder(volume))
        z_st, codes, codebook, commit = self.quantize(z)
        recon = self.decoder(self.post_quant_conv(z_st))
        rec = (volume - recon).abs().mean()
        return recon, codes, rec, codebook, commit

    def ae_loss(self, rec, codebook, commit):
        """The autoencoder's loss: an EMA codebook has no codebook term."""
        loss = self.cfg["l1_weight"] * rec + self.beta * commit
        return loss if self.quantize.decay > 0 else loss + codebook

    def sides(self, volume, recon, step):
        """(weight, discriminator, real, fake) per discriminator in use."""
        out = []
        if hasattr(self, "image_discriminator"):
            out.append((self.cfg["image_gan_weight"], self.image_discriminator,
                        axial_slices(volume, step), axial_slices(recon, step)))
        if hasattr(self, "video_discriminator"):
            out.append((self.cfg["video_gan_weight"], self.video_discriminator, volume, recon))
        return out

    def generator_terms(self, volume, recon, step, frozen):
        """The anchors' generator step: the perceptual term plus
        disc_factor times the adversarial terms, and the feature-matching
        term (the discriminators read through stop_gradient when
        frozen)."""
        cfg = self.cfg
        factor = (step >= cfg["discriminator_iter_start"]).float()
        g, feat, perc = 0, 0, 0
        if cfg["perceptual_weight"] > 0:
            # On the same slices; not scaled by disc_factor, as in the anchors.
            perc = cfg["perceptual_weight"] * self.perceptual(axial_slices(volume, step), axial_slices(recon, step)).mean()
        for w, d, real, fake in self.sides(volume, recon, step):
            logits, fake_feats = d(fake, frozen)
            g = g - w * logits.mean()
            if cfg["gan_feat_weight"] > 0:
                _, real_feats = d(real, frozen)
                for a, b in zip(fake_feats, real_feats):
                    feat = feat + (a - ox.stop_gradient(b)).abs().mean()  # weight 4/(3+1) = 1 per layer
        return perc + factor * g, factor * cfg["gan_feat_weight"] * feat

    def discriminator_terms(self, volume, recon, step):
        """The anchors' discriminator step on the detached reconstruction,
        and the mean logits on real and fake inputs."""
        factor = (step >= self.cfg["discriminator_iter_start"]).float()
        dl, real_mean, fake_mean, sides = 0, 0, 0, self.sides(volume, ox.stop_gradient(recon), step)
        if not sides:
            return 0, 0, 0
        for w, d, real, fake in sides:
            lr, _ = d(real)
            lf, _ = d(fake)
            dl = dl + w * disc_loss(self.cfg["disc_loss_type"], lr, lf)
            real_mean, fake_mean = real_mean + lr.mean(), fake_mean + lf.mean()
        return factor * dl, real_mean / len(sides), fake_mean / len(sides)

    def forward(self, volume, step=None):
        recon, codes, rec, codebook, commit = self.autoencode(volume)
        loss = self.ae_loss(rec, codebook, commit)
        if step is None:
            return loss, recon, codes, rec, codebook, commit
        g, feat = self.generator_terms(volume, recon, step, frozen=True)
        d, d_real, d_fake = self.discriminator_terms(volume, recon, step)
        loss = loss + g + d + (feat if self.cfg["gan_feat_weight"] > 0 else 0)
        # The outputs the recipe logs (their values are not compared).
        extra = (g,) if self.cfg["perceptual_weight"] > 0 else ()
        if self.sides(volume, recon, step):
            extra += (g, d, d_real, d_fake) + ((feat,) if self.cfg["gan_feat_weight"] > 0 else ())
        return (loss, recon, codes, rec, codebook, commit) + extra


OUTPUTS = ["loss", "recon", "codes", "rec_loss", "codebook_loss", "commit_loss"]
GAN_OUTPUTS = ["g_loss", "d_loss", "d_real", "d_fake", "gan_feat_loss"]


def anchor_gradients(model, x, step):
    """Gradients as the anchors' two optimizers see them at these weights:
    the autoencoder's from its loss with the discriminators frozen, the
    discriminators' from theirs with the reconstruction detached."""
    disc = [p for n, p in model.named_parameters() if "discriminator." in n]
    if not disc:  # a perceptual term alone: one optimizer
        recon, codes, rec, codebook, commit = model.autoencode(x)
        g, _ = model.generator_terms(x, recon, step, frozen=False)
        loss = model.ae_loss(rec, codebook, commit) + g
        loss.backward()
        return loss
    for p in disc:
        p.requires_grad_(False)
    recon, codes, rec, codebook, commit = model.autoencode(x)
    g, feat = model.generator_terms(x, recon, step, frozen=False)
    ae_loss = model.ae_loss(rec, codebook, commit) + g + feat
    ae_loss.backward()
    for p in disc:
        p.requires_grad_(True)
    d, _, _ = model.discriminator_terms(x, recon.detach(), step)
    d.backward()
    return ae_loss + d


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--config", default="{}", help="recipe parameters as JSON")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step", type=float, default=0, help="global step fed to a model with discriminators")
    p.add_argument("--perceptual-widths", help="stage widths of the perceptual network (tests; default VGG16's)")
    a = p.parse_args()
    cfg = dict(DEFAULTS, **json.loads(a.config))
    if a.perceptual_widths:
        cfg["perceptual_widths"] = [int(w) for w in a.perceptual_widths.split(",")]
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    model = VQGAN3D(cfg)
    x = torch.rand(a.batch, cfg["in_channels"], *cfg["patch_size"]) * 2 - 1
    gan = cfg["image_gan_weight"] > 0 or cfg["video_gan_weight"] > 0
    inputs, outputs = {"volume": x}, OUTPUTS
    if gan or cfg["perceptual_weight"] > 0:
        inputs[GLOBAL_STEP] = torch.tensor(a.step, dtype=torch.float32)
        outputs = OUTPUTS + (["perceptual_loss"] if cfg["perceptual_weight"] > 0 else [])
        if gan:
            outputs += GAN_OUTPUTS[:4 + (cfg["gan_feat_weight"] > 0)]
    if cfg["perceptual_weight"] > 0:
        # The perceptual network on its own, for the recipe's perceptual_model.
        export_lpips.export(model.perceptual, os.path.join(a.out, "lpips.onnx"), size=cfg["patch_size"][1])
    # The model returns its loss first, so no loss function is passed.
    ox.export(model, inputs, os.path.join(a.out, "vqgan3d.onnx"), output_names=outputs)
    model.zero_grad()
    model.train()
    initial = {}
    if model.quantize.decay > 0:
        # The buffers before the step (an export leaves unused buffers out).
        initial = {"init.quantize.cluster_size": model.quantize.cluster_size.clone(),
                   "init.quantize.embed_avg": model.quantize.embed_avg.clone()}
    if GLOBAL_STEP in inputs:
        loss = anchor_gradients(model, x, inputs[GLOBAL_STEP])
    else:
        loss = model(x)[0]
        loss.backward()
    tensors = dict(inputs, loss=loss.detach().reshape(()), **initial)
    for name, prm in model.named_parameters():
        if prm.grad is not None:  # the frozen perceptual network has none
            tensors["grad." + name] = prm.grad
    if model.quantize.decay > 0:
        # The codebook's buffers after this step's update.
        codes, size, avg = model.quantize.ema_update(model.quant_conv(model.encoder(x)))
        tensors.update({"buffer.quantize.embedding.weight": codes, "buffer.quantize.cluster_size": size,
                        "buffer.quantize.embed_avg": avg})
    write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
