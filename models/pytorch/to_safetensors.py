#!/usr/bin/python3
"""Converts PyTorch weights to the safetensors file ortrain's
model.init_weights starts a run from.

    /usr/bin/python3 models/pytorch/to_safetensors.py IN OUT [--strip-prefix P] [--dtype float32] [--overwrite]

IN is what torch.save wrote: a state_dict (.pt, .pth), a Lightning
checkpoint (.ckpt, whose "state_dict" is taken), or a dict holding one under
"state_dict", "model_state_dict" or "model". Tensors keep their state_dict
names; --strip-prefix drops a prefix they share (a LightningModule's
"model." when it wraps the network as self.model), and --dtype casts
floating tensors (ortrain needs the model's own type). BatchNorm's
num_batches_tracked counters, which ortrain does not keep, are left out.
OUT is not overwritten without --overwrite.
"""

import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from reference_step import write_safetensors  # noqa: E402


def state_dict_of(obj, path):
    if isinstance(obj, torch.nn.Module):
        return obj.state_dict()
    if isinstance(obj, dict):
        for key in ("state_dict", "model_state_dict", "model"):
            if isinstance(obj.get(key), (dict, torch.nn.Module)):
                return state_dict_of(obj[key], path)
        tensors = {k: v for k, v in obj.items() if isinstance(v, torch.Tensor)}
        if tensors:
            return tensors
    print("%s: no state_dict in it (a dict of tensors, or one under state_dict, model_state_dict or model)" % path,
          file=sys.stderr)
    sys.exit(2)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("input")
    p.add_argument("output")
    p.add_argument("--strip-prefix", default="")
    p.add_argument("--dtype", choices=["float32", "float16", "bfloat16", "float64"])
    p.add_argument("--overwrite", action="store_true")
    a = p.parse_args()
    inp, out = os.path.abspath(a.input), os.path.abspath(a.output)
    if os.path.exists(out) and not a.overwrite:
        print("%s exists; pass --overwrite to replace it" % out, file=sys.stderr)
        sys.exit(2)
    try:
        obj = torch.load(inp, map_location="cpu")
    except Exception as e:  # noqa: BLE001 - any unreadable file is the user's to fix
        print("%s: not a PyTorch file torch.load reads: %s" % (inp, e), file=sys.stderr)
        sys.exit(2)
    tensors = {}
    for name, t in state_dict_of(obj, inp).items():
        if name.endswith("num_batches_tracked"):
            continue
        if a.strip_prefix and name.startswith(a.strip_prefix):
            name = name[len(a.strip_prefix):]
        if a.dtype and t.is_floating_point():
            t = t.to(getattr(torch, a.dtype))
        tensors[name] = t
    tmp = out + ".tmp"
    write_safetensors(tmp, tensors)
    os.replace(tmp, out)  # a failed write leaves no half file
    print("wrote %s: %d tensors" % (out, len(tensors)))


if __name__ == "__main__":
    main()
