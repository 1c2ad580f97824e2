#!/usr/bin/python3
"""Writes refs.json, the reference values metrics' tests compare against.

Run from this directory with Debian's Python and scikit-image:

    apt-get install -y python3-skimage
    /usr/bin/python3 make_refs.py

Last run with Debian 12 python3-skimage 0.19.3, scipy 1.10.1, numpy 1.24.2.

Inputs are not stored: each case names a generator (below, mirrored by
genCase in metrics/refs_test.go) built from SplitMix64 and IEEE +, -, *, /
only, so Python and Go produce bit-identical float32 arrays; refs.json keeps
an exact checksum of each array so the test notices if they ever diverge.

SSIM, PSNR and MSE come from scikit-image, given the float32 data cast to
float64, so they are the exact-arithmetic answer for the float32 inputs up to
float64 rounding. "ssim_gaussian_f32" is what scikit-image returns when handed
the float32 arrays themselves: it then filters in float32 and is only accurate
to about 1e-6 (the tests report the gap, they do not require it).

MS-SSIM is not in scikit-image; msssim() below is an independent numpy/scipy
transcription of torchmetrics' multiscale_structural_similarity_index_measure
(>= 1.5) with its defaults: Gaussian sigma 1.5 (11 taps), K1 0.01, K2 0.03,
betas (0.0448, 0.2856, 0.3001, 0.2363, 0.1333), normalize="relu".
"""
import json

import numpy as np
import scipy
import skimage
from scipy import ndimage
from skimage.metrics import mean_squared_error, peak_signal_noise_ratio, structural_similarity

GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def uniform(seed, n):
    """SplitMix64 outputs seed+1..seed+n as float64 in [0, 1)."""
    z = np.uint64(seed) + np.arange(1, n + 1, dtype=np.uint64) * GOLDEN
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(11)).astype(np.float64) * 2.0**-53


def gen(case):
    """Returns float32 x, y of case["shape"] as described in refs_test.go."""
    shape = case["shape"]
    n = int(np.prod(shape))
    noise = uniform(case["seed"] + 1, n).reshape(shape) - 0.5
    if case["kind"] == "noise":
        x = uniform(case["seed"], n).reshape(shape)
    else:  # "smooth": a low-order polynomial in the normalized coordinates
        t = np.meshgrid(*[np.arange(s, dtype=np.float64) / (s - 1) for s in shape], indexing="ij")
        u, v, w = t[0], t[1], t[-1]
        x = 0.5 + 0.25 * u * (1.0 - v) + 0.2 * v * w - 0.15 * u * w
    y = x * case["gain"] + case["amp"] * noise
    x = (x * case["scale"] + case["offset"]).astype(np.float32)
    y = (y * case["scale"] + case["offset"]).astype(np.float32)
    return x, y


def checksum(a):
    """Σ (i+1)·bits(a[i]) mod 2^64 over the float32 bit patterns, in C order."""
    bits = a.reshape(-1).view(np.uint32).astype(np.uint64)
    return int(np.sum(bits * np.arange(1, a.size + 1, dtype=np.uint64), dtype=np.uint64))


def msssim(x, y, data_range):
    betas = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    pad = 5

    def stats(a, b):
        f = lambda v: ndimage.gaussian_filter(v, sigma=1.5, truncate=3.5)
        ux, uy = f(a), f(b)
        vx = np.maximum(f(a * a) - ux * ux, 0)
        vy = np.maximum(f(b * b) - uy * uy, 0)
        vxy = f(a * b) - ux * uy
        cs = (2 * vxy + c2) / (vx + vy + c2)
        s = ((2 * ux * uy + c1) * (2 * vxy + c2)) / ((ux * ux + uy * uy + c1) * (vx + vy + c2))
        return s, cs

    def pool(a):
        a = a[tuple(slice(0, s - s % 2) for s in a.shape)]
        for ax in range(a.ndim):
            a = np.add(a.take(range(0, a.shape[ax], 2), axis=ax), a.take(range(1, a.shape[ax], 2), axis=ax))
        return a / 2**a.ndim

    x, y = x.astype(np.float64), y.astype(np.float64)
    inner = (slice(pad, -pad),) * x.ndim
    value = 1.0
    for beta in betas[:-1]:
        _, cs = stats(x, y)
        value *= max(cs[inner].mean(), 0.0) ** beta
        x, y = pool(x), pool(y)
    # Last scale: SSIM over the whole image, padded by mirroring without
    # repeating the edge (torch's and numpy's "reflect").
    s, _ = stats(np.pad(x, pad, mode="reflect"), np.pad(y, pad, mode="reflect"))
    return value * max(s[inner].mean(), 0.0) ** betas[-1]


def case(name, kind, shape, seed, amp, gain=1.0, scale=1.0, offset=0.0, data_range=1.0, msssim_ref=False):
    return dict(name=name, kind=kind, shape=shape, seed=seed, amp=amp, gain=gain, scale=scale,
                offset=offset, data_range=data_range, ms=msssim_ref)


CASES = [
    case("random2d", "noise", [64, 80], 1, 0.3),
    case("smooth2d", "smooth", [96, 72], 2, 0.05, gain=0.9),
    case("range255_2d", "noise", [50, 53], 3, 0.2, scale=255, data_range=255),
    case("thin2d", "noise", [7, 200], 4, 0.1),
    case("random3d", "noise", [40, 48, 36], 5, 0.2),
    case("ct3d", "smooth", [40, 48, 36], 6, 0.02, gain=0.95, scale=4095, offset=-1024, data_range=4095),
    case("noncubic3d", "noise", [11, 30, 17], 7, 0.1, gain=0.8),
    case("ms_smooth2d", "smooth", [181, 197], 8, 0.05, gain=0.9, msssim_ref=True),
    case("ms_random2d", "noise", [192, 176], 9, 0.4, scale=2, data_range=2, msssim_ref=True),
    case("ms_ct3d", "smooth", [176, 183, 177], 10, 0.03, gain=0.97, scale=4095, offset=-1024,
         data_range=4095, msssim_ref=True),
]


def main():
    out = dict(
        generator="make_refs.py",
        versions=dict(skimage=skimage.__version__, scipy=scipy.__version__, numpy=np.__version__),
        cases=[],
    )
    for c in CASES:
        x, y = gen(c)
        x64, y64 = x.astype(np.float64), y.astype(np.float64)
        r = c["data_range"]
        ref = dict(c, checksum_x=checksum(x), checksum_y=checksum(y))
        ref["psnr"] = float(peak_signal_noise_ratio(x64, y64, data_range=r))
        ref["mse"] = float(mean_squared_error(x64, y64))
        ref["mae"] = float(np.mean(np.abs(x64 - y64)))
        gauss = dict(gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=r)
        if min(x.shape) >= 11:
            ref["ssim_gaussian"] = float(structural_similarity(x64, y64, **gauss))
            ref["ssim_gaussian_f32"] = float(structural_similarity(x, y, **gauss))
        ref["ssim_uniform"] = float(structural_similarity(x64, y64, data_range=r))
        ref["ssim_uniform_population"] = float(
            structural_similarity(x64, y64, data_range=r, use_sample_covariance=False))
        if ref.pop("ms"):
            ref["msssim"] = msssim(x, y, r)
        out["cases"].append(ref)
        print(c["name"], {k: v for k, v in ref.items() if k.startswith(("ssim", "ms", "psnr"))})
    with open("refs.json", "w") as f:
        json.dump(out, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
