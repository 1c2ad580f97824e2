"""Export a PyTorch model, with its loss, to the forward ONNX graph that
`ortrain artifacts build` takes.

    import ortrain_export as ox
    ox.export(model, {"images": x}, "resnet18.onnx",
              loss=lambda out, labels: F.cross_entropy(out, labels, label_smoothing=0.1),
              targets={"labels": y})
    # then: ortrain artifacts build --model resnet18.onnx --loss output:loss --out artifacts/

The graph's first output is the scalar named "loss", followed by the model's
outputs. Parameters become initializers (ortrain trains those), BatchNorm and
Dropout are exported in training mode, and the batch dimension of every input
is left symbolic ("batch"). PyTorch buffers other than BatchNorm's
statistics (a causal mask, a positional table) and parameters with
requires_grad=False are listed in the model's metadata ("ortrain.frozen"),
and ortrain keeps them fixed.

`.detach()` leaves no trace in ONNX, which breaks straight-through estimators
and codebook/commitment losses: call `stop_gradient(x)` instead. It is
`x.detach()` in PyTorch and exports as the marker op `ortrain::StopGradient`,
which ortrain's autodiff treats as an edge no gradient crosses and strips from
the graphs ONNX Runtime runs.

A GAN's adversarial terms go through `training_only(x)` (the training graph
computes them, validation and export leave them out), and a term that starts
at a step reads the optimizer step from the input named `GLOBAL_STEP`.

Runs on PyTorch 1.13 (Debian's python3-torch) and 2.x.
"""

import json
import warnings

import torch

STOP_GRADIENT_DOMAIN = "ortrain"
OPSET = 17
# The metadata entry listing what PyTorch does not train (buffers, frozen
# parameters): ONNX initializers carry no such mark, and ortrain would
# train them all. ortrain's artifacts build keeps these fixed.
FROZEN_KEY = "ortrain.frozen"


class _StopGradient(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return None

    @staticmethod
    def symbolic(g, x):
        # Same type and shape as x, so the exporter's shape inference goes on.
        return g.op(STOP_GRADIENT_DOMAIN + "::StopGradient", x).setType(x.type())


def stop_gradient(x):
    """x.detach() that survives ONNX export as ortrain::StopGradient."""
    if torch.onnx.is_in_onnx_export():
        return _StopGradient.apply(x)
    return x.detach()


class _TrainingOnly(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad):
        return grad

    @staticmethod
    def symbolic(g, x):
        return g.op(STOP_GRADIENT_DOMAIN + "::TrainingOnly", x).setType(x.type())


def training_only(x):
    """x, a scalar loss term that exists only in training (an adversarial
    term, a discriminator's logits): ortrain's training graph computes it,
    its eval graph (validation, eval, export) replaces it by 0, so what
    only it reads (a discriminator) drops out. Exports as
    ortrain::TrainingOnly; the identity in PyTorch."""
    if torch.onnx.is_in_onnx_export():
        return _TrainingOnly.apply(x)
    return x


GLOBAL_STEP = "ortrain.global_step"
"""The input name through which a model reads the optimizer step (a float
scalar the trainer feeds): pass it among export's inputs for a term that
starts at a step (TATS's discriminator_iter_start)."""


class _WithLoss(torch.nn.Module):
    """Runs model then loss. The model's children, parameters and buffers are
    registered under their own names (the model itself is hidden in a list),
    so the exported initializers are named exactly as model.state_dict()'s
    keys and trained weights load straight back into the PyTorch model."""

    def __init__(self, model, loss, n_inputs):
        super().__init__()
        self._model = [model]
        for name, child in model.named_children():
            self.add_module(name, child)
        for name, p in model.named_parameters(recurse=False):
            self.register_parameter(name, p)
        for name, b in model.named_buffers(recurse=False):
            self.register_buffer(name, b)
        self.loss = loss
        self.n_inputs = n_inputs

    def forward(self, *args):
        inputs, targets = args[: self.n_inputs], args[self.n_inputs:]
        out = self._model[0](*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        if self.loss is None:
            return outs
        return (self.loss(*outs, *targets),) + outs


def export(model, inputs, path, loss=None, targets=None, output_names=None, opset=OPSET):
    """Writes model (and loss(outputs..., targets...), when given) to path.

    inputs and targets map graph input names to example tensors; their first
    dimension is exported as the symbolic "batch". output_names names the
    model's outputs (default output, output_1, ...).
    """
    targets = targets or {}
    names = list(inputs) + list(targets)
    example = tuple(inputs.values()) + tuple(targets.values())
    wrapped = _WithLoss(model, loss, len(inputs))
    with torch.no_grad():
        n_out = len(wrapped(*example)) - (1 if loss is not None else 0)
    outs = list(output_names or ["output"] + ["output_%d" % i for i in range(1, n_out)])
    if loss is not None:
        outs = ["loss"] + outs
    dynamic = {n: {0: "batch"} for n, t in zip(names, example) if t.dim() > 0}
    dynamic.update({n: {0: "batch"} for n in outs if n != "loss"})
    model.train()
    with warnings.catch_warnings():
        # Every BatchNorm's num_batches_tracked update is dropped, with a warning each.
        warnings.filterwarnings("ignore", message=".*num_batches_tracked.*")
        _export(wrapped, example, path, names, outs, dynamic, opset)
    frozen = [n for n, b in model.named_buffers() if b.is_floating_point()]
    frozen += [n for n, p in model.named_parameters() if not p.requires_grad]
    _append_metadata(path, FROZEN_KEY, json.dumps(sorted(frozen)))
    return path


def _append_metadata(path, key, value):
    """Adds a metadata_props entry to the ONNX file at path without the onnx
    package: a protobuf message may be extended by appending fields, and
    ModelProto's metadata_props is field 14 (StringStringEntryProto: key 1,
    value 2)."""

    def varint(n):
        out = bytearray()
        while True:
            b, n = n & 0x7F, n >> 7
            out.append(b | (0x80 if n else 0))
            if not n:
                return bytes(out)

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    with open(path, "ab") as f:
        f.write(field(14, field(1, key.encode()) + field(2, value.encode())))


def _export(wrapped, example, path, names, outs, dynamic, opset):
    torch.onnx.export(
        wrapped, example, path,
        input_names=names, output_names=outs, dynamic_axes=dynamic,
        opset_version=opset,
        training=torch.onnx.TrainingMode.TRAINING,
        do_constant_folding=False,
        export_params=True,
        keep_initializers_as_inputs=False,
        custom_opsets={STOP_GRADIENT_DOMAIN: 1},
    )
