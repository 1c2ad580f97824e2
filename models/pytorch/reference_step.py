"""Writes what ortrain's PyTorch comparison tests need: a model as forward
ONNX (through ortrain_export), and one batch with the loss and the gradient
of every parameter that PyTorch autograd computes on it, in training mode,
as safetensors.

    /usr/bin/python3 models/pytorch/reference_step.py OUT_DIR [--model resnet18|patchnet] [--classes 10 --size 64 --batch 4]

resnet18 is torchvision's, exported without a loss (ortrain adds
cross-entropy with --label-smoothing); vit a small torchvision
VisionTransformer (2 layers, 2 heads, width 32), exported without a loss
(ortrain adds cross-entropy). unet3d is a small 3D U-Net with LeakyReLU
whose loss, the mean squared error against a "target" volume, is inside
the export (torch 1.13 cannot export F.mse_loss itself). patchnet is a small discriminator-like
net (LeakyReLU 0.2, GroupNorm, Hardswish, ELU) whose loss, F.cross_entropy,
is inside the export, as the model's "loss" output. zoo:NAME is one of
torchvision's architectures at a small size (see zoo), exported without a
loss and with its batch size free, or a model with its own inputs and loss
(zoo_task: a torch.nn transformer LM, LSTM/GRU/RNN LMs, a 2-D U-Net, LR-ASPP
segmentation).

OUT_DIR gets model.onnx and reference.safetensors (tensors "images",
"target", "loss" and "grad.<param>" for each parameter).
"""

import argparse
import json
import os
import struct
import sys

import torch
import torch.nn.functional as F
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ortrain_export as ox  # noqa: E402

_DTYPES = {torch.float64: "F64", torch.float32: "F32", torch.float16: "F16", torch.bfloat16: "BF16",
           torch.int64: "I64", torch.int32: "I32", torch.uint8: "U8", torch.bool: "BOOL"}


def write_safetensors(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        t = t.detach().contiguous().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)  # numpy has no bfloat16; the bytes are the same
        b = t.numpy().tobytes()
        t = tensors[name]
        header[name] = {"dtype": _DTYPES[t.dtype], "shape": list(t.shape), "data_offsets": [offset, offset + len(b)]}
        blobs.append(b)
        offset += len(b)
    h = json.dumps(header).encode()
    h += b" " * (-len(h) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)


class PatchNet(torch.nn.Module):
    def __init__(self, classes):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.c2 = torch.nn.Conv2d(8, 8, 3, stride=2, padding=1)
        self.gn = torch.nn.GroupNorm(2, 8)
        self.c3 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, classes)

    def forward(self, x):
        h = F.leaky_relu(self.c1(x), 0.2)
        h = F.hardswish(self.gn(self.c2(h)))
        h = F.elu(self.c3(h))
        return self.fc(h.mean(dim=(2, 3)))


class UNet3D(torch.nn.Module):
    """A small 3D U-Net: LeakyReLU 0.2, a strided down-convolution, a
    transposed up-convolution and a skip connection by concatenation."""

    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Conv3d(1, 4, 3, padding=1)
        self.down = torch.nn.Conv3d(4, 8, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose3d(8, 4, 2, stride=2)
        self.out = torch.nn.Conv3d(8, 1, 3, padding=1)

    def forward(self, x):
        e = F.leaky_relu(self.enc(x), 0.2)
        d = F.leaky_relu(self.down(e), 0.2)
        u = F.leaky_relu(self.up(d), 0.2)
        return self.out(torch.cat([u, e], dim=1))


class TinyGPT(torch.nn.Module):
    """A pre-norm causal transformer LM from torch.nn's own layers (GELU,
    a float causal mask, the head tied to the embedding)."""

    def __init__(self, vocab=100, width=32, layers=2, tokens=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.randn(1, tokens, width) * 0.02)
        layer = torch.nn.TransformerEncoderLayer(width, 2, 2 * width, dropout=0.0, batch_first=True,
                                                 norm_first=True, activation="gelu")
        self.enc = torch.nn.TransformerEncoder(layer, layers)
        self.ln = torch.nn.LayerNorm(width)
        self.head = torch.nn.Linear(width, vocab, bias=False)
        self.head.weight = self.emb.weight
        self.register_buffer("mask", torch.triu(torch.full((tokens, tokens), float("-inf")), 1))

    def forward(self, tokens):
        t = tokens.shape[1]
        h = self.enc(self.emb(tokens) + self.pos[:, :t], mask=self.mask[:t, :t])
        return self.head(self.ln(h))


class UNet2D(torch.nn.Module):
    """A small 2-D segmentation U-Net: BatchNorm, InstanceNorm, a bilinear
    upsample by scale factor and a concatenated skip."""

    def __init__(self, classes):
        super().__init__()
        self.d1 = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU())
        self.d2 = torch.nn.Sequential(torch.nn.MaxPool2d(2), torch.nn.Conv2d(8, 16, 3, padding=1),
                                      torch.nn.InstanceNorm2d(16, affine=True), torch.nn.ReLU())
        self.up = torch.nn.Upsample(scale_factor=2, mode="bilinear", align_corners=False)
        self.out = torch.nn.Conv2d(24, classes, 1)

    def forward(self, x):
        a = self.d1(x)
        return self.out(torch.cat([a, self.up(self.d2(a))], 1))


class RecurrentLM(torch.nn.Module):
    """An embedding, a torch.nn recurrent layer (LSTM, GRU or RNN; batch
    first) and a linear head over the vocabulary."""

    def __init__(self, kind, vocab=50, width=16, **kw):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width)
        self.rnn = getattr(torch.nn, kind)(width, width, batch_first=True, **kw)
        self.fc = torch.nn.Linear(width * (2 if kw.get("bidirectional") else 1), vocab)

    def forward(self, tokens):
        h, _ = self.rnn(self.emb(tokens))
        return self.fc(h)


class Volume3D(torch.nn.Module):
    """3-D pieces medical models use: GroupNorm, SiLU, a strided Conv3d, a
    ConvTranspose3d, InstanceNorm3d and a trilinear upsample, regressed to a
    target volume."""

    def __init__(self):
        super().__init__()
        self.enc = torch.nn.Sequential(torch.nn.Conv3d(1, 8, 3, padding=1), torch.nn.GroupNorm(4, 8), torch.nn.SiLU(),
                                       torch.nn.Conv3d(8, 8, 3, stride=2, padding=1))
        self.up = torch.nn.ConvTranspose3d(8, 4, 2, stride=2)
        self.norm = torch.nn.InstanceNorm3d(4, affine=True)
        self.down = torch.nn.Conv3d(4, 4, 2, stride=2)
        self.out = torch.nn.Conv3d(4, 1, 1)

    def forward(self, x):
        h = self.norm(self.up(self.enc(x)))
        h = F.interpolate(self.down(h), scale_factor=2, mode="trilinear", align_corners=False)
        return self.out(F.leaky_relu(h, 0.2))


class PaddedAttention(torch.nn.Module):
    """Token classification over padded sequences: an embedding with a
    padding index, torch.nn.MultiheadAttention with a key padding mask, a
    weight-normalised head, cross-entropy ignoring the padding."""

    def __init__(self, vocab=40, width=16):
        super().__init__()
        self.emb = torch.nn.Embedding(vocab, width, padding_idx=0)
        self.attn = torch.nn.MultiheadAttention(width, 2, batch_first=True)
        self.head = torch.nn.utils.weight_norm(torch.nn.Linear(width, vocab))

    def forward(self, tokens):
        h = self.emb(tokens)
        a, _ = self.attn(h, h, h, key_padding_mask=tokens == 0, need_weights=False)
        return self.head(h + a)


def zoo_task(name, a):
    """A zoo model with its inputs, targets and loss: (model, inputs,
    targets, loss). Classifiers are exported without the loss (ortrain adds
    cross-entropy against "target"); the others with it."""
    x = torch.randn(a.batch, 3, a.size, a.size)
    if name == "gpt":
        tok = lambda: torch.randint(0, 100, (a.batch, 16))  # noqa: E731
        return (TinyGPT(), {"tokens": tok()}, {"targets": tok()},
                lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1)))
    recurrent = {"lstm": ("LSTM", {"num_layers": 2, "bidirectional": True}), "gru": ("GRU", {}), "rnn": ("RNN", {})}
    if name in recurrent:
        kind, kw = recurrent[name]
        tok = lambda: torch.randint(0, 50, (a.batch, 12))  # noqa: E731
        return (RecurrentLM(kind, **kw), {"tokens": tok()}, {"targets": tok()},
                lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1)))
    if name == "volume3d":
        v = torch.randn(a.batch, 1, 8, 8, 8)
        return Volume3D(), {"images": v}, {"target": torch.randn(a.batch, 1, 8, 8, 8)}, lambda out, t: ((out - t) ** 2).mean()
    if name == "padded_attention":
        tokens = torch.randint(1, 40, (a.batch, 10))
        tokens[:, 7:] = 0  # padding at the end of every sequence
        tokens[0, 4:] = 0
        return (PaddedAttention(), {"tokens": tokens}, {"targets": tokens.clone()},
                lambda out, t: F.cross_entropy(out.reshape(-1, out.shape[-1]), t.reshape(-1), ignore_index=0))
    masks = {"masks": torch.randint(0, a.classes, (a.batch, a.size, a.size))}
    if name == "unet2d":
        return UNet2D(a.classes), {"images": x}, masks, F.cross_entropy
    if name == "lraspp":
        model = torchvision.models.segmentation.lraspp_mobilenet_v3_large(num_classes=a.classes, weights_backbone=None)
        return model, {"images": x}, masks, lambda out, t: F.cross_entropy(out["out"], t)
    return zoo(name, a.classes), {"images": x}, {"target": torch.randint(0, a.classes, (a.batch,))}, None


def zoo_step(a, path):
    """Exports zoo model a.model, takes one gradient step in float32 and in
    float64 (the exact gradient, to judge both float32 runs by: deep stacks
    of batch norms over few values are ill-conditioned, and PyTorch's own
    float32 gradient can be a few % off it), and returns the tensors."""
    model, inputs, targets, loss = zoo_task(a.model[4:], a)
    # Export first: tracing runs the model once, which must not move the
    # BatchNorm statistics the gradient step below starts from.
    state = {k: v.clone() for k, v in model.state_dict().items()}
    if loss is None:
        ox.export(model, inputs, path, output_names=["logits"])
        loss = F.cross_entropy
    else:
        ox.export(model, inputs, path, loss=loss, targets=targets)
    model.load_state_dict(state)
    # A second instance rather than a deep copy: weight_norm's weight is a
    # computed tensor, which deepcopy refuses.
    m64 = zoo_task(a.model[4:], a)[0]
    m64.load_state_dict(state)
    m64.double().train()
    as64 = lambda v: v.double() if v.is_floating_point() else v  # noqa: E731
    loss(m64(*[as64(v) for v in inputs.values()]), *[as64(v) for v in targets.values()]).backward()
    model.train()
    value = loss(model(*inputs.values()), *targets.values())
    value.backward()
    tensors = {**inputs, **targets, "loss": value.detach().reshape(())}
    for name, prm in model.named_parameters():
        tensors["grad." + name] = prm.grad
    for name, prm in m64.named_parameters():
        tensors["grad64." + name] = prm.grad
    return tensors


def zoo(name, classes):
    """Small configurations of torchvision's architectures, each exercising
    what an export of it asks of ortrain: channel shuffles and window
    partitions reshaped through the batch size, padding computed from
    shapes, squeeze-excitation, grouped and depthwise convolutions, layer
    scale, ceil-mode pooling, relative position biases."""
    M = torchvision.models
    build = {
        "shufflenet": lambda: M.shufflenet_v2_x0_5(num_classes=classes),
        "swin": lambda: M.swin_transformer.SwinTransformer(
            patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
            stochastic_depth_prob=0.0, num_classes=classes),
        "vit": lambda: M.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2,
                                           hidden_dim=32, mlp_dim=64, num_classes=classes),
        "maxvit": lambda: M.maxvit.MaxVit(input_size=(32, 32), stem_channels=16, partition_size=2,
                                          block_channels=[16, 32], block_layers=[1, 1], head_dim=8,
                                          stochastic_depth_prob=0.0, num_classes=classes),
        "convnext": lambda: M.convnext.ConvNeXt(
            [M.convnext.CNBlockConfig(16, 32, 1), M.convnext.CNBlockConfig(32, None, 1)],
            stochastic_depth_prob=0.0, num_classes=classes),
        "mobilenet_v3": lambda: M.mobilenet_v3_small(num_classes=classes),
        "efficientnet": lambda: M.efficientnet_b0(num_classes=classes, stochastic_depth_prob=0.0),
        "regnet": lambda: M.regnet_x_400mf(num_classes=classes),
        "densenet": lambda: M.DenseNet(growth_rate=8, block_config=(2, 2, 2, 2), num_init_features=16,
                                       num_classes=classes),
        "googlenet": lambda: M.googlenet(num_classes=classes, aux_logits=False, init_weights=True),
        "squeezenet": lambda: M.squeezenet1_1(num_classes=classes),
    }[name]
    model = build()
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0  # dropout draws differ between the two runtimes
        if isinstance(m, torch.nn.Linear) and not m.weight.detach().any():
            # a zeroed head would zero every other gradient
            torch.nn.init.normal_(m.weight, std=0.5)
    return model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--model", default="resnet18",
                   help="resnet18, patchnet, vit, unet3d, or zoo:NAME (shufflenet, swin, vit, maxvit, convnext, "
                        "mobilenet_v3, efficientnet, regnet, densenet, googlenet, squeezenet; with their own loss: gpt, lstm, gru, "
                        "rnn, unet2d, lraspp)")
    p.add_argument("--classes", type=int, default=10)
    p.add_argument("--size", type=int, default=64)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--label-smoothing", type=float, default=0.1)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    torch.manual_seed(a.seed)
    x = torch.randn(a.batch, 3, a.size, a.size)
    y = torch.randint(0, a.classes, (a.batch,))
    path = os.path.join(a.out, "model.onnx")
    if a.model == "unet3d":
        model = UNet3D()
        x = torch.randn(a.batch, 1, a.size, a.size, a.size)
        y = torch.randn(a.batch, 1, a.size, a.size, a.size)
        ox.export(model, {"images": x}, path, loss=lambda out, t: ((out - t) ** 2).mean(), targets={"target": y}, output_names=["recon"])
        model.train()
        model.zero_grad()
        loss = F.mse_loss(model(x), y)
        loss.backward()
        tensors = {"images": x, "target": y, "loss": loss.detach().reshape(())}
        for name, prm in model.named_parameters():
            tensors["grad." + name] = prm.grad
        write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
        print("loss", float(loss))
        return
    if a.model.startswith("zoo:"):
        tensors = zoo_step(a, path)
        write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
        print("loss", float(tensors["loss"]))
        return
    if a.model == "vit":
        model = torchvision.models.VisionTransformer(image_size=a.size, patch_size=8, num_layers=2, num_heads=2,
                                                     hidden_dim=32, mlp_dim=64, num_classes=a.classes)
        # torchvision zeroes the head, which would zero every other
        # gradient: a random head makes the comparison reach the encoder.
        torch.nn.init.normal_(model.heads.head.weight, std=0.5)
        ox.export(model, {"images": x}, path, output_names=["logits"])
        smoothing = 0.0
    elif a.model == "patchnet":
        model = PatchNet(a.classes)
        ox.export(model, {"images": x}, path, loss=lambda out, t: F.cross_entropy(out, t),
                  targets={"target": y}, output_names=["logits"])
        smoothing = 0.0
    else:
        model = torchvision.models.resnet18(num_classes=a.classes)
        # Export first: tracing runs the model once, which must not move the
        # BatchNorm statistics the gradient step below starts from.
        state = {k: v.clone() for k, v in model.state_dict().items()}
        ox.export(model, {"images": x}, path, output_names=["logits"])
        model.load_state_dict(state)
        smoothing = a.label_smoothing
    model.train()
    model.zero_grad()
    loss = F.cross_entropy(model(x), y, label_smoothing=smoothing)
    loss.backward()
    tensors = {"images": x, "target": y, "loss": loss.detach().reshape(())}
    for name, prm in model.named_parameters():
        tensors["grad." + name] = prm.grad
    write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
