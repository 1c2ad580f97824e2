"""Worked example: a block-diffusion transformer LM (BD3-LM style) written in
PyTorch and exported, with its masked-diffusion loss, for ortrain. The module
has the layout, parameter names and arithmetic of ortrain's built-in recipe
`bd3lm` (models/diffusionlm), so either side's weights load into the other.

    /usr/bin/python3 models/pytorch/export_diffusionlm.py OUT_DIR [--config '{"hidden": 64, ...}']
    ortrain artifacts build --model OUT_DIR/diffusionlm.onnx --out artifacts/

Training runs x_t and x_0 through the transformer as one sequence of 2L
tokens under BD3-LM's mask (noised tokens see their own block of x_t and the
earlier blocks of x_0; clean tokens are block-causal), and the loss is the
NELBO weighting of masked-token cross-entropy: sum over masked positions of
-log p(x_0) / t, divided by the number of positions to predict. The inputs
are named as ortrain's token loader produces them: noisy_ids, input_ids, t
(per position, its block's noise level) and loss_mask (uint8).

--config takes the recipe's parameter names (vocab, mask_token, hidden,
layers, heads, mlp_ratio, seq_len, block_size, blocks, tie_embeddings;
positions must stay "learned" here). OUT_DIR gets diffusionlm.onnx and
reference.safetensors: a batch, PyTorch's "loss" on it and "grad.<param>".
"""

import argparse
import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import ortrain_export as ox  # noqa: E402
from reference_step import write_safetensors  # noqa: E402

DEFAULTS = dict(vocab=50258, mask_token=50257, hidden=768, layers=12, heads=12, mlp_ratio=4, seq_len=1024,
                block_size=16, blocks=[], positions="learned", tie_embeddings=True)


def block_of(cfg):
    lens = cfg["blocks"] or [cfg["block_size"]] * (cfg["seq_len"] // cfg["block_size"])
    return [b for b, n in enumerate(lens) for _ in range(n)]


def attention_mask(cfg):
    """Additive [2L, 2L] mask over x_t ⊕ x_0: 0 allowed, -1e9 not, as Python
    lists. Export builds it from these so that it is recorded as a Constant
    node, not a buffer (ortrain trains every floating initializer)."""
    of = block_of(cfg)
    L = len(of)
    rows = []
    for q in range(2 * L):
        row = []
        for k in range(2 * L):
            bq, bk = of[q % L], of[k % L]
            if q < L and k < L:
                ok = bq == bk
            elif q < L:
                ok = bk < bq
            elif k >= L:
                ok = bk <= bq
            else:
                ok = False
            row.append(0.0 if ok else -1e9)
        rows.append(row)
    return rows


def allowed_tensor(cfg, device):
    """attention_mask's pattern as a boolean [2L, 2L] tensor (True where a
    query may attend), built on device with tensor ops: what training
    uses, where the Python lists would be rebuilt and copied every step."""
    of = torch.tensor(block_of(cfg), device=device)
    L = of.numel()
    b = torch.cat([of, of])
    i = torch.arange(2 * L, device=device)
    bq, bk = b[:, None], b[None, :]
    q_noisy, k_noisy = (i < L)[:, None], (i < L)[None, :]
    return (q_noisy & k_noisy & (bq == bk)) | (q_noisy & ~k_noisy & (bk < bq)) | (~q_noisy & ~k_noisy & (bk <= bq))


# PyTorch 2 has fused attention (flash or memory-efficient kernels on a
# GPU); PyTorch 1.13 (Debian's python3-torch) has not, and training falls
# back to matmul-softmax, whose [N, heads, 2L, 2L] scores do not fit a GPU
# at the preset's batch.
HAS_SDPA = hasattr(F, "scaled_dot_product_attention")
ATTENTION = "sdpa" if HAS_SDPA else "matmul-softmax"


class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.q, self.k, self.v, self.out = (nn.Linear(d, d) for _ in range(4))

    def forward(self, x, mask, allowed=None):
        """mask is the additive mask; allowed, when given, the same as
        booleans for scaled_dot_product_attention (training with PyTorch
        2). Export always writes the matmul-softmax form."""
        n, t, d = x.shape
        split = lambda y: y.reshape(n, t, self.heads, d // self.heads).transpose(1, 2)  # noqa: E731
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        if allowed is not None:
            o = F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)
        else:
            s = q @ k.transpose(-1, -2) * (1.0 / math.sqrt(d // self.heads)) + mask
            o = torch.softmax(s, dim=-1) @ v
        return self.out(o.transpose(1, 2).reshape(n, t, d))


class MLP(nn.Module):
    def __init__(self, d, f):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, f), nn.Linear(f, d)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, d, heads, f):
        super().__init__()
        self.ln1, self.attn = nn.LayerNorm(d), Attention(d, heads)
        self.ln2, self.mlp = nn.LayerNorm(d), MLP(d, f)

    def forward(self, h, mask, allowed=None):
        h = h + self.attn(self.ln1(h), mask, allowed)
        return h + self.mlp(self.ln2(h))


class DiffusionLM(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        assert cfg["positions"] == "learned", "this example has learned positions only"
        self.cfg = cfg
        d, V, L = cfg["hidden"], cfg["vocab"], cfg["seq_len"]
        self.tok_emb = nn.Embedding(V, d)
        self.pos_emb = nn.Embedding(L, d)
        self.blocks = nn.ModuleList(Block(d, cfg["heads"], d * cfg["mlp_ratio"]) for _ in range(cfg["layers"]))
        self.ln_f = nn.LayerNorm(d)
        self.lm_head = None if cfg["tie_embeddings"] else nn.Linear(d, V, bias=False)
        # GPT-2's initialisation, as the Go recipe: N(0, 0.02), residual
        # projections scaled by 1/sqrt(2·layers), zero biases.
        for name, p in self.named_parameters():
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg["layers"]) if name.endswith(("attn.out.weight", "mlp.fc2.weight")) else 0.02
                nn.init.normal_(p, 0.0, std)
        # The step's constants (positions, attention mask, the bias that
        # keeps the mask token from being predicted), per device. A plain
        # dict, not buffers: the exported graph and the state_dict stay as
        # they were, and the constants never reach an optimizer.
        self._consts = {}

    def constants(self, device):
        """(positions, additive mask, allowed or None, never-bias) for a
        step on device. In training they are built there once; export
        builds them from Python lists so that they are Constant nodes."""
        cfg = self.cfg
        L, V, mask_id = cfg["seq_len"], cfg["vocab"], cfg["mask_token"]
        if torch.onnx.is_in_onnx_export():
            pos = torch.tensor([i % L for i in range(2 * L)])
            never = torch.tensor([-1e9 if v == mask_id else 0.0 for v in range(V)])
            return pos, torch.tensor(attention_mask(cfg)), None, never
        c = self._consts.get(device)
        if c is None:
            pos = torch.arange(2 * L, device=device) % L
            never = torch.zeros(V, device=device)
            never[mask_id] = -1e9
            allowed = allowed_tensor(cfg, device)
            if HAS_SDPA:
                mask = None
            else:
                mask = torch.zeros(allowed.shape, device=device).masked_fill_(~allowed, -1e9)
                allowed = None
            c = self._consts[device] = (pos, mask, allowed, never)
        return c

    def forward(self, noisy_ids, input_ids, t, loss_mask):
        cfg = self.cfg
        L = cfg["seq_len"]
        ids = torch.cat([noisy_ids, input_ids], dim=1)
        pos, mask, allowed, never = self.constants(ids.device)
        h = self.tok_emb(ids) + self.pos_emb(pos)
        for blk in self.blocks:
            h = blk(h, mask, allowed)
        hx = self.ln_f(h)[:, :L]
        w = self.tok_emb.weight if self.lm_head is None else self.lm_head.weight
        logits = hx @ w.t() + never  # the mask token is never predicted
        nll = -torch.log_softmax(logits, dim=-1).gather(-1, input_ids.unsqueeze(-1)).squeeze(-1)
        masked = (noisy_ids == cfg["mask_token"]).float()
        loss = (nll * masked / t).sum() / loss_mask.float().sum().clamp(min=1.0)
        return loss, logits


def example_batch(cfg, n, gen):
    """Prompt block clean, later blocks masked at their block's level t."""
    L, of = cfg["seq_len"], block_of(cfg)
    x0 = torch.randint(0, cfg["mask_token"], (n, L), generator=gen)
    levels = 0.1 + 0.9 * torch.rand(n, max(of) + 1, generator=gen)
    t = levels[:, of]
    answer = torch.tensor([b > 0 for b in of]).expand(n, L)
    masked = answer & (torch.rand(n, L, generator=gen) < t)
    xt = torch.where(masked, torch.full_like(x0, cfg["mask_token"]), x0)
    return xt, x0, t, answer.to(torch.uint8)


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
    model = DiffusionLM(cfg)
    xt, x0, t, lm = example_batch(cfg, a.batch, torch.Generator().manual_seed(a.seed))
    inputs = {"noisy_ids": xt, "input_ids": x0, "t": t, "loss_mask": lm}
    ox.export(model, inputs, os.path.join(a.out, "diffusionlm.onnx"), output_names=["loss", "logits"])
    model.zero_grad()
    loss = model(xt, x0, t, lm)[0]
    loss.backward()
    tensors = dict(inputs, loss=loss.detach().reshape(()))
    for name, prm in model.named_parameters():
        tensors["grad." + name] = prm.grad
    write_safetensors(os.path.join(a.out, "reference.safetensors"), tensors)
    print("loss", float(loss))


if __name__ == "__main__":
    main()
