"""Worked example: torchvision's ResNet-18 exported for ortrain, which adds
the cross-entropy with label smoothing itself (PyTorch 1.13 cannot export
label_smoothing):

    /usr/bin/python3 models/pytorch/export_resnet18.py resnet18.onnx [--classes 10 --size 64]
    ortrain artifacts build --model resnet18.onnx --loss cross_entropy --label-smoothing 0.1 --out artifacts/
"""

import argparse
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ortrain_export as ox  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--size", type=int, default=224)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--seed", type=int, default=0)
    a = p.parse_args()
    torch.manual_seed(a.seed)
    model = torchvision.models.resnet18(num_classes=a.classes)
    x = torch.randn(a.batch, 3, a.size, a.size)
    ox.export(model, {"images": x}, a.out, output_names=["logits"])
    print("wrote", a.out)


if __name__ == "__main__":
    main()
