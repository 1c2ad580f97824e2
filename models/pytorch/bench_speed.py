"""PyTorch twin of `ortrain bench` (speed): trains a recipe's PyTorch
counterpart on one batch made once on the device, and prints one JSON line
with the mean step time of the measured steps and the peak memory.

    /usr/bin/python3 models/pytorch/bench_speed.py RECIPE PARAMS_JSON BATCH OPTIMIZER_JSON \
        --mode eager|amp|compile --device cpu|cuda:N --precision P [--warmup 3] [--steps 10]

RECIPE is resnet (torchvision's ResNet of that depth, channels_last when
the parameters say layout NHWC), bd3lm (export_diffusionlm.DiffusionLM) or
vqgan3d (export_vqgan3d.VQGAN3D); PARAMS_JSON the recipe's parameters
(ortrain's names); OPTIMIZER_JSON {"name": "sgd"|"adamw", "lr": ..,
"momentum": ..}; P ortrain's trainer.precision, which sets the modes:

    eager    float32; TF32 on a GPU unless P is strict "32"
    amp      autocast to float16 with a gradient scaler when P is 16-mixed,
             else to bfloat16 (on the CPU always bfloat16)
    compile  torch.compile of the model, at P (autocast when P is mixed)

A mode PyTorch cannot run (torch.compile before PyTorch 2) prints
{"mode": ..., "unavailable": reason}.

Everything a step reads is made on the device before the first step: the
batch, and the diffusion LM's positions, attention mask and output bias.
The LM's attention is torch.nn.functional.scaled_dot_product_attention
(fused kernels on a GPU) where PyTorch has it, else matmul-softmax; the
JSON line says which ("attention"), and stderr says why.
"""

import argparse
import json
import os
import resource
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

STRICT_FP32 = ("32", "32-true", "fp32", "")


def build(recipe, params, batch, device, gen):
    """Returns the model and a function of the model computing the loss on
    a batch made once, on the device."""
    if recipe == "resnet":
        import torchvision

        depth, classes, size = params.get("depth", 50), params.get("classes", 1000), params.get("image_size", 224)
        model = getattr(torchvision.models, "resnet%d" % depth)(num_classes=classes).to(device)
        x = torch.randn(batch, params.get("channels", 3), size, size, generator=gen).to(device)
        if params.get("layout") == "NHWC":
            model, x = model.to(memory_format=torch.channels_last), x.contiguous(memory_format=torch.channels_last)
        y = torch.randint(0, classes, (batch,), generator=gen).to(device)
        smoothing = params.get("label_smoothing", 0.0)
        return model, lambda m: F.cross_entropy(m(x), y, label_smoothing=smoothing)
    if recipe == "bd3lm":
        import export_diffusionlm as lm

        cfg = dict(lm.DEFAULTS, **params)
        model = lm.DiffusionLM(cfg).to(device)
        inputs = [t.to(device) for t in lm.example_batch(cfg, batch, gen)]
        # The step's constants are made on the device now, once, and not
        # inside a step (nor traced by torch.compile as new tensors).
        model.constants(inputs[0].device)
        why = "" if lm.HAS_SDPA else " (PyTorch %s has no scaled_dot_product_attention)" % torch.__version__
        print("bench_speed.py: bd3lm attention: %s%s" % (lm.ATTENTION, why), file=sys.stderr)
        return model, lambda m: m(*inputs)[0]
    if recipe == "vqgan3d":
        import export_vqgan3d as vq

        cfg = dict(vq.DEFAULTS, **params)
        model = vq.VQGAN3D(cfg).to(device)
        x = (torch.rand(batch, cfg["in_channels"], *cfg["patch_size"], generator=gen) * 2 - 1).to(device)
        return model, lambda m: m(x)[0]
    raise SystemExit("bench_speed.py: unknown recipe %r (resnet, bd3lm, vqgan3d)" % recipe)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("recipe")
    p.add_argument("params")
    p.add_argument("batch", type=int)
    p.add_argument("optimizer")
    p.add_argument("--mode", choices=["eager", "amp", "compile"], default="eager")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="32")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    a = p.parse_args()

    cuda = a.device.startswith("cuda")
    if a.mode == "compile" and not hasattr(torch, "compile"):
        print(json.dumps({"mode": a.mode, "unavailable": "PyTorch %s has no torch.compile" % torch.__version__}))
        return
    if cuda:
        tf32 = a.precision not in STRICT_FP32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        torch.backends.cudnn.allow_tf32 = tf32
        torch.backends.cudnn.benchmark = True

    half = None  # the autocast dtype, None for float32
    if a.mode == "amp" or (a.mode == "compile" and "mixed" in a.precision):
        half = torch.float16 if (a.precision.startswith("16") and cuda) else torch.bfloat16
    if half is None:
        label = "32" if a.precision in STRICT_FP32 or not cuda else "tf32"
    else:
        label = ("bf16" if half == torch.bfloat16 else "fp16") + " autocast"

    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    model, loss_of = build(a.recipe, json.loads(a.params), a.batch, a.device, gen)
    model.train()
    o = json.loads(a.optimizer)
    if o.get("name", "adamw") == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=o.get("lr", 0.1), momentum=o.get("momentum", 0.0))
    else:
        opt = torch.optim.AdamW(model.parameters(), lr=o.get("lr", 1e-3))
    run = torch.compile(model) if a.mode == "compile" else model
    scaler = torch.cuda.amp.GradScaler() if (half == torch.float16) else None

    def step():
        opt.zero_grad(set_to_none=True)
        if half is not None:
            with torch.autocast(device_type="cuda" if cuda else "cpu", dtype=half):
                loss = loss_of(run)
        else:
            loss = loss_of(run)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()

    def sync():
        if cuda:
            torch.cuda.synchronize()

    for _ in range(a.warmup):
        step()
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    total = 0.0
    for _ in range(a.steps):
        t0 = time.perf_counter()
        step()
        sync()
        total += time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated() if cuda else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    row = {"mode": a.mode, "precision": label, "step_ms": 1e3 * total / a.steps, "peak_bytes": peak}
    if a.recipe == "bd3lm":
        import export_diffusionlm as lm

        row["attention"] = lm.ATTENTION
    print(json.dumps(row))


if __name__ == "__main__":
    main()
