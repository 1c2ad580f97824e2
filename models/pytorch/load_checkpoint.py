"""Loads an ortrain checkpoint into the PyTorch twin of its recipe: the
vqgan3d model of export_vqgan3d.py or the bd3lm model of
export_diffusionlm.py, built from the model.params the checkpoint's own
configuration records, with the trained weights (or, with --ema, their
moving average, where the run kept one: optimizer.ema_decay).

    /usr/bin/python3 models/pytorch/load_checkpoint.py CHECKPOINT_DIR [--ema]
    /usr/bin/python3 models/pytorch/load_checkpoint.py CHECKPOINT_DIR --run IN.safetensors OUT.safetensors

The first form loads and prints what it loaded. --run also feeds the
tensors of IN (the model's inputs by name: "volume" for the VQ-GAN;
"noisy_ids", "input_ids", "t", "loss_mask" for the LM) to the model in
eval mode and writes its outputs to OUT ("recon" and "codes"; "logits"
and "loss", the NELBO per predicted token). For the VQ-GAN OUT also holds,
per latent position, the second-nearest code ("second") and how much
farther it is, relative to the nearest ("gap"): where the gap is at float
rounding, another implementation may pick either code. With "codes" in IN
too, "recon_of_codes" is the decoder's reconstruction of those codes.
From Python:

    sys.path.insert(0, "models/pytorch")
    from load_checkpoint import load
    model, cfg = load("outputs/vq/version_0/checkpoints/best")

Parameters a checkpoint does not store (frozen ones: a perceptual network)
come from the initial weights of the run's artifacts built for the same
configuration. A tensor the twin has and neither holds is an error.
"""

import argparse
import glob
import json
import os
import struct
import sys
import tomllib

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_step import write_safetensors  # noqa: E402

_DTYPES = {"F32": torch.float32, "F64": torch.float64, "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8,
           "BF16": torch.bfloat16, "F16": torch.float16, "BOOL": torch.bool}


def read_safetensors(path):
    """Every tensor of a safetensors file, by name."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        t = torch.frombuffer(bytearray(data[a:b]), dtype=_DTYPES[info["dtype"]]) if b > a else torch.empty(0, dtype=_DTYPES[info["dtype"]])
        out[name] = t.reshape(info["shape"])
    return out


def twin(recipe, params):
    """The PyTorch twin of a recipe with the given model.params."""
    if recipe == "vqgan3d":
        import export_vqgan3d as m
        cfg = dict(m.DEFAULTS, **params)
        return m.VQGAN3D(cfg), cfg
    if recipe == "bd3lm":
        import export_diffusionlm as m
        cfg = dict(m.DEFAULTS, **params)
        return m.DiffusionLM(cfg), cfg
    sys.exit("load_checkpoint.py: recipe %r has no PyTorch twin here (vqgan3d and bd3lm have)" % recipe)


def initial_weights(ckpt, config_hash):
    """The run's initial weights for this configuration (frozen tensors)."""
    version = os.path.dirname(os.path.dirname(os.path.abspath(ckpt)))
    for d in sorted(glob.glob(os.path.join(version, "artifacts*"))):
        try:
            with open(os.path.join(d, "manifest.json")) as f:
                manifest = json.load(f)
        except OSError:
            continue
        if manifest.get("config_hash", config_hash) == config_hash:
            return read_safetensors(os.path.join(d, manifest["files"]["weights"]))
    return {}


def load(ckpt, ema=False):
    """The twin of the checkpoint's recipe holding its weights, and its
    configuration (the recipe's parameters over the twin's defaults)."""
    with open(os.path.join(ckpt, "state.json")) as f:
        state = json.load(f)
    config = tomllib.loads(state["config"])
    model_cfg = config.get("model", {})
    if "recipe" not in model_cfg:
        sys.exit("load_checkpoint.py: %s was not trained from a recipe (model.recipe): load its ONNX model instead" % os.path.abspath(ckpt))
    params = dict(model_cfg.get("params", {}))
    initial = None
    if params.get("perceptual_weight", 0) > 0:
        # The perceptual network's stage widths, from its frozen weights
        # (export_lpips.py --widths may have narrowed them).
        initial = initial_weights(ckpt, state.get("config_hash"))
        first = [0, 5, 10, 17, 24]  # each stage's first convolution in VGG16's features
        params["perceptual_widths"] = [int(initial["perceptual.features.%d.weight" % i].shape[0]) for i in first]
    model, cfg = twin(model_cfg["recipe"], params)
    saved = read_safetensors(os.path.join(ckpt, "tensors.safetensors"))
    sd = {}
    for name, ref in model.state_dict().items():
        t = saved.get("ema." + name) if ema else None
        if t is None:
            t = saved.get(name)
        if t is None:
            if initial is None:
                initial = initial_weights(ckpt, state.get("config_hash"))
            t = initial.get(name)
        if t is None:
            sys.exit("load_checkpoint.py: %s holds no tensor %s (nor do the run's initial weights)" % (os.path.abspath(ckpt), name))
        if tuple(t.shape) != tuple(ref.shape):
            sys.exit("load_checkpoint.py: %s: %s is %s there, %s in the twin" % (os.path.abspath(ckpt), name, list(t.shape), list(ref.shape)))
        sd[name] = t.to(ref.dtype)
    if ema and not any(k.startswith("ema.") for k in saved):
        sys.exit("load_checkpoint.py: --ema: %s keeps no weight average (optimizer.ema_decay was 0)" % os.path.abspath(ckpt))
    model.load_state_dict(sd)
    return model, cfg


def near_ties(model, feeds):
    """The VQ-GAN's second-nearest codes and their relative distance gaps
    for feeds["volume"], and the reconstruction of feeds["codes"]."""
    q = model.quantize
    zf, _ = q.flat(model.quant_conv(model.encoder(feeds["volume"])))
    cb = q.embedding.weight
    dist = (zf * zf).sum(1, keepdim=True) - 2 * (zf @ cb.t()) + (cb * cb).sum(1)
    top = dist.topk(2, dim=1, largest=False)
    gap = (top.values[:, 1] - top.values[:, 0]) / top.values[:, 0].abs().clamp_min(1e-30)
    out = {"second": top.indices[:, 1].contiguous(), "gap": gap.contiguous()}
    if "codes" in feeds:
        codes = feeds["codes"]
        zq = F.embedding(codes, cb).permute(0, 4, 1, 2, 3)
        out["recon_of_codes"] = model.decoder(model.post_quant_conv(zq))
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("checkpoint")
    p.add_argument("--ema", action="store_true", help="load the weights' moving average")
    p.add_argument("--run", nargs=2, metavar=("IN", "OUT"), help="run the model on IN's tensors, write OUT")
    a = p.parse_args()
    model, cfg = load(a.checkpoint, a.ema)
    n = sum(t.numel() for t in model.state_dict().values())
    print("loaded %s: %s, %d tensors, %d values" % (a.checkpoint, type(model).__name__, len(model.state_dict()), n))
    if a.run:
        model.eval()
        feeds = read_safetensors(a.run[0])
        with torch.no_grad():
            if hasattr(model, "autoencode"):
                recon, codes, _, _, _ = model.autoencode(feeds["volume"])
                outs = {"recon": recon, "codes": codes}
                outs.update(near_ties(model, feeds))
            else:
                loss, logits = model(feeds["noisy_ids"], feeds["input_ids"], feeds["t"], feeds["loss_mask"])
                outs = {"logits": logits, "loss": loss.reshape(())}
        write_safetensors(a.run[1], outs)
        print("wrote", a.run[1])


if __name__ == "__main__":
    main()
