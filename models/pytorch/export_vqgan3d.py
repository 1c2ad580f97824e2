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
groups); unnamed ones keep the recipe's defaults. OUT_DIR gets
vqgan3d.onnx and reference.safetensors: a batch ("volume"), PyTorch's
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

DEFAULTS = dict(patch_size=[64, 64, 64], in_channels=1, channels=64, channel_mult=[1, 1, 2, 4], res_blocks=2,
                z_channels=8, embed_dim=8, codebook_size=8192, beta=0.25, groups=32)


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
    def __init__(self, k, e):
        super().__init__()
        self.embedding = nn.Embedding(k, e)
        nn.init.uniform_(self.embedding.weight, -1.0 / k, 1.0 / k)

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


class VQGAN3D(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.beta = cfg["beta"]
        self.encoder = Encoder(cfg)
        self.quant_conv = nn.Conv3d(cfg["z_channels"], cfg["embed_dim"], 1)
        self.quantize = Quantizer(cfg["codebook_size"], cfg["embed_dim"])
        self.post_quant_conv = nn.Conv3d(cfg["embed_dim"], cfg["z_channels"], 1)
        self.decoder = Decoder(cfg)

    def forward(self, volume):
        z = self.quant_conv(self.encoder(volume))
        z_st, codes, codebook, commit = self.quantize(z)
        recon = self.decoder(self.post_quant_conv(z_st))
        rec = (volume - recon).abs().mean()
        loss = rec + codebook + self.beta * commit
        return loss, recon, codes, rec, codebook, commit


OUTPUTS = ["loss", "recon", "codes", "rec_loss", "codebook_loss", "commit_loss"]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--config", default="{}", help="recipe parameters as JSON")
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    cfg = dict(DEFAULTS, **json.loads(a.config))
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    model = VQGAN3D(cfg)
    x = torch.rand(a.batch, cfg["in_channels"], *cfg["patch_size"]) * 2 - 1
    # The model returns its loss first, so no loss function is passed.
    ox.export(model, {"volume": x}, os.path.join(a.out, "vqgan3d.onnx"), output_names=OUTPUTS)
    model.zero_grad()
    loss = model(x)[0]
    loss.backward()
    tensors = {"volume": x, "loss": loss.detach().reshape(())}
    for name, prm in model.named_parameters():
        tensors["grad." + name] = prm.grad
    write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
