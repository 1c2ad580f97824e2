"""Exports an LPIPS-style perceptual distance over VGG16 features as ONNX,
for the vqgan3d recipe's perceptual term (model.params.perceptual_model).

    /usr/bin/python3 models/pytorch/export_lpips.py lpips.onnx \
        --vgg16 vgg16-397923af.pth --lin vgg.pth

--vgg16 is torchvision's VGG16 state_dict (features.N.weight/bias: the
ImageNet weights you already have), --lin the LPIPS project's linear
heads for VGG (v0.1 vgg.pth: lin0..lin4, one 1x1 convolution each). ortrain
keeps every weight in the file frozen and differentiates through them.

The graph takes two image batches "x" and "y" ([N, C, H, W], C 1 or 3, in
[-1, 1]; one channel is broadcast to three by the input scaling) and
returns "distance" [N, 1, 1, 1]: for the ReLU outputs ending VGG16's five
stages (relu1_2 ... relu5_3), the features of x and y are unit-normalised
along channels, their squared difference is weighed per channel by the
linear head, averaged over space and summed over stages. The channel norm
is sqrt(sum f^2 + 1e-20) rather than sqrt(sum f^2) + 1e-10, so a position
where every feature is zero has a finite gradient.

--random draws all weights at random (tests only: the distance then means
nothing); --widths shrinks the stages for tests.
"""

import argparse
import os
import sys

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ortrain_export as ox  # noqa: E402

VGG16_WIDTHS = [64, 128, 256, 512, 512]
CONVS_PER_STAGE = [2, 2, 3, 3, 3]
# The LPIPS input scaling (per RGB channel).
SHIFT = [-0.030, -0.088, -0.188]
SCALE = [0.458, 0.448, 0.450]


class LPIPS(nn.Module):
    """VGG16's feature extractor laid out as torchvision's vgg16().features
    (so its state_dict loads as is), the five linear heads, the scaling."""

    def __init__(self, widths=VGG16_WIDTHS):
        super().__init__()
        layers, taps, c = [], [], 3
        for stage, (w, n) in enumerate(zip(widths, CONVS_PER_STAGE)):
            if stage > 0:
                layers.append(nn.MaxPool2d(2, 2))
            for _ in range(n):
                layers += [nn.Conv2d(c, w, 3, padding=1), nn.ReLU(inplace=False)]
                c = w
            taps.append(len(layers) - 1)
        self.features = nn.Sequential(*layers)
        self.taps = taps
        for i, w in enumerate(widths):
            setattr(self, "lin%d" % i, nn.Conv2d(w, 1, 1, bias=False))
        self.register_buffer("shift", torch.tensor(SHIFT).reshape(1, 3, 1, 1))
        self.register_buffer("scale", torch.tensor(SCALE).reshape(1, 3, 1, 1))

    def stages(self, x):
        h, out = (x - self.shift) / self.scale, []
        for i, layer in enumerate(self.features):
            h = layer(h)
            if i in self.taps:
                out.append(h)
            if i == self.taps[-1]:
                break
        return out

    def forward(self, x, y):
        d = 0
        for i, (a, b) in enumerate(zip(self.stages(x), self.stages(y))):
            a = a / torch.sqrt((a * a).sum(1, keepdim=True) + 1e-20)
            b = b / torch.sqrt((b * b).sum(1, keepdim=True) + 1e-20)
            d = d + getattr(self, "lin%d" % i)((a - b) ** 2).mean((2, 3), keepdim=True)
        return d


def export(model, path, size=64):
    """Writes model to path with batch, height and width left free."""
    model.eval()
    x = torch.rand(1, 1, size, size) * 2 - 1
    with torch.no_grad():
        torch.onnx.export(model, (x, x.clone()), path, input_names=["x", "y"], output_names=["distance"],
                          dynamic_axes={"x": {0: "batch", 1: "channels", 2: "height", 3: "width"},
                                        "y": {0: "batch", 1: "channels", 2: "height", 3: "width"}, "distance": {0: "batch"}},
                          opset_version=ox.OPSET, do_constant_folding=False)
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--vgg16", help="torchvision VGG16 state_dict (.pth)")
    p.add_argument("--lin", help="LPIPS linear heads for VGG (.pth, lin0.model.1.weight ...)")
    p.add_argument("--random", action="store_true", help="random weights (tests only)")
    p.add_argument("--widths", default=",".join(map(str, VGG16_WIDTHS)), help="stage widths (tests only)")
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    if os.path.exists(a.out):
        sys.exit("export_lpips.py: %s exists; choose another path" % os.path.abspath(a.out))
    widths = [int(w) for w in a.widths.split(",")]
    torch.manual_seed(a.seed)
    model = LPIPS(widths)
    if not a.random:
        if not a.vgg16 or not a.lin:
            sys.exit("export_lpips.py: give --vgg16 and --lin (the weights you have), or --random for a test network")
        feats = {k[len("features."):]: v for k, v in torch.load(a.vgg16, map_location="cpu").items() if k.startswith("features.")}
        model.features.load_state_dict(feats)
        lin = torch.load(a.lin, map_location="cpu")
        for i in range(5):
            getattr(model, "lin%d" % i).weight.data.copy_(lin["lin%d.model.1.weight" % i])
    else:
        for i in range(len(widths)):
            nn.init.uniform_(getattr(model, "lin%d" % i).weight, 0, 1)  # LPIPS's heads are non-negative
    export(model, a.out)
    print("wrote", a.out)


if __name__ == "__main__":
    main()
