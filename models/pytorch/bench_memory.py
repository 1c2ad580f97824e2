"""PyTorch twin of `ortrain bench`: trains a recipe's PyTorch counterpart
for a few steps on random inputs, in eager mode, and prints the process's
peak resident memory in bytes. `ortrain bench` runs it at two batch sizes,
beside `ortrain train` on the same recipe, and compares the slopes.

    /usr/bin/python3 models/pytorch/bench_memory.py RECIPE PARAMS_JSON BATCH OPTIMIZER_JSON [--steps 2]

RECIPE is resnet (torchvision's ResNet of that depth), bd3lm
(export_diffusionlm.DiffusionLM) or vqgan3d (export_vqgan3d.VQGAN3D);
PARAMS_JSON the recipe's parameters (ortrain's names); OPTIMIZER_JSON
{"name": "sgd"|"adamw", "lr": .., "momentum": ..}.
"""

import argparse
import json
import os
import resource
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def build(recipe, params, batch, gen):
    """Returns the model and a function computing the loss on a fresh batch."""
    if recipe == "resnet":
        import torchvision

        depth, classes, size = params.get("depth", 50), params.get("classes", 1000), params.get("image_size", 224)
        model = getattr(torchvision.models, "resnet%d" % depth)(num_classes=classes)
        smoothing = params.get("label_smoothing", 0.0)

        def loss():
            x = torch.randn(batch, params.get("channels", 3), size, size, generator=gen)
            y = torch.randint(0, classes, (batch,), generator=gen)
            return F.cross_entropy(model(x), y, label_smoothing=smoothing)

        return model, loss
    if recipe == "bd3lm":
        import export_diffusionlm as lm

        cfg = dict(lm.DEFAULTS, **params)
        model = lm.DiffusionLM(cfg)
        return model, lambda: model(*lm.example_batch(cfg, batch, gen))[0]
    if recipe == "vqgan3d":
        import export_vqgan3d as vq

        cfg = dict(vq.DEFAULTS, **params)
        model = vq.VQGAN3D(cfg)
        return model, lambda: model(torch.rand(batch, cfg["in_channels"], *cfg["patch_size"], generator=gen) * 2 - 1)[0]
    raise SystemExit("bench_memory.py: unknown recipe %r (resnet, bd3lm, vqgan3d)" % recipe)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    p.add_argument("params")
    p.add_argument("batch", type=int)
    p.add_argument("optimizer")
    p.add_argument("--steps", type=int, default=2)
    a = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model, loss = build(a.recipe, json.loads(a.params), a.batch, gen)
    model.train()
    o = json.loads(a.optimizer)
    if o.get("name", "adamw") == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o.get("lr", 0.1), momentum=o.get("momentum", 0.0))
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o.get("lr", 1e-3))
    for _ in range(a.steps):
        opt.zero_grad(set_to_none=True)
        loss().backward()
        opt.step()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)


if __name__ == "__main__":
    main()
