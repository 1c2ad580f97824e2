"""Reference outputs of torchvision's autoaugment ops for TestOpsMatchTorchvision.

usage: autoaugment_ref.py DIR

DIR/cases.json holds {"h": H, "w": W, "cases": [[op, magnitude], ...]} and
DIR/image.u8 a uint8 CHW image of 3 x H x W. Writes DIR/out.u8, the image
after each case's op (torchvision.transforms.autoaugment._apply_op, the
function TrivialAugmentWide and RandAugment call: nearest interpolation, no
fill) one after another, and DIR/space.json, the magnitudes of both
policies' augmentation spaces for an H x W image.
"""
import json
import os
import sys

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.autoaugment import RandAugment, TrivialAugmentWide, _apply_op

d = sys.argv[1]
with open(os.path.join(d, "cases.json")) as f:
    spec = json.load(f)
h, w = spec["h"], spec["w"]
img = torch.from_numpy(np.fromfile(os.path.join(d, "image.u8"), dtype=np.uint8).reshape(3, h, w).copy())

outs = []
for op, mag in spec["cases"]:
    out = _apply_op(img, op, float(mag), interpolation=InterpolationMode.NEAREST, fill=None)
    assert out.dtype == torch.uint8 and out.shape == img.shape, (op, out.dtype, out.shape)
    outs.append(out.numpy().tobytes())
with open(os.path.join(d, "out.u8"), "wb") as f:
    f.write(b"".join(outs))


def space(meta):
    return {op: [float(v) for v in (m.tolist() if m.ndim > 0 else [m.item()])] for op, (m, _) in meta.items()}


with open(os.path.join(d, "space.json"), "w") as f:
    json.dump({
        "trivialaugment": space(TrivialAugmentWide()._augmentation_space(31)),
        "randaugment": space(RandAugment()._augmentation_space(31, (h, w))),
    }, f)
