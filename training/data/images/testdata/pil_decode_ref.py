"""Image files and PIL's decoding of them for TestDecodeMatchesPIL.

usage: pil_decode_ref.py DIR

Writes DIR/<name> for each format and alpha case torchvision's loader
(PIL's Image.open(f).convert("RGB")) meets in class folders, DIR/<name>.rgb
the RGB bytes that loader gives, and DIR/cases.json the names with
[width, height].
"""
import json
import os
import sys

import numpy as np
from PIL import Image, features

d = sys.argv[1]
W, H = 37, 23
y, x = np.mgrid[0:H, 0:W]
rgb = np.stack([x * 255 // (W - 1), y * 255 // (H - 1), (x * 7 + y * 13) % 256], -1).astype(np.uint8)
# Alpha from 0 (transparent, colour still stored) to 255 across the width.
alpha = (x * 255 // (W - 1)).astype(np.uint8)
rgba = np.dstack([rgb, alpha])
grey = rgb[..., 0] // 2 + rgb[..., 1] // 3

cases = {}


def save(name, img, **kw):
    img.save(os.path.join(d, name), **kw)
    cases[name] = list(img.size)


save("rgba.png", Image.fromarray(rgba, "RGBA"))
save("la.png", Image.fromarray(np.dstack([grey, alpha]), "LA"))
pal = Image.fromarray(rgb, "RGB").quantize(64)
save("p_trns.png", pal, transparency=5)
save("rgb.png", Image.fromarray(rgb, "RGB"))
save("rgb.bmp", Image.fromarray(rgb, "RGB"))
save("grey.bmp", Image.fromarray(grey, "L"))
save("rgb.tif", Image.fromarray(rgb, "RGB"))
save("rgba.tif", Image.fromarray(rgba, "RGBA"))
save("deflate.tif", Image.fromarray(rgb, "RGB"), compression="tiff_adobe_deflate")
save("pal.gif", pal)
save("rgb.ppm", Image.fromarray(rgb, "RGB"))
save("grey.pgm", Image.fromarray(grey, "L"))
save("bits.pbm", Image.fromarray(grey, "L").convert("1"))
if features.check("webp"):
    save("lossless.webp", Image.fromarray(rgb, "RGB"), lossless=True)
    save("lossless_rgba.webp", Image.fromarray(rgba, "RGBA"), lossless=True, exact=True)
    save("lossy.webp", Image.fromarray(rgb, "RGB"), quality=90)
    # Even sizes: libwebp's upsampler treats the last column and row apart.
    save("lossy_even.webp", Image.fromarray(rgb[:22, :36], "RGB"), quality=70)
    save("lossy_rgba.webp", Image.fromarray(rgba, "RGBA"), quality=90)

# Netpbm variants PIL cannot write: maxval 100 binary and 16-bit, plain
# (ASCII) grey and colour with comments, a plain bitmap without spaces.
s100 = (rgb.astype(np.uint32) * 100 // 255).astype(np.uint8)
with open(os.path.join(d, "max100.ppm"), "wb") as f:
    f.write(b"P6\n# a comment\n%d %d\n100\n" % (W, H) + s100.tobytes())
cases["max100.ppm"] = [W, H]
s16 = (rgb.astype(np.uint32) * 256 + x[..., None] * 7).astype(">u2")
with open(os.path.join(d, "rgb16.ppm"), "wb") as f:
    f.write(b"P6 %d %d 65535\n" % (W, H) + s16.tobytes())
cases["rgb16.ppm"] = [W, H]
with open(os.path.join(d, "plain.pgm"), "wb") as f:
    f.write(b"P2\n%d %d # size\n200\n" % (W, H))
    for row in grey.astype(np.uint32) * 200 // 255:
        f.write(b" ".join(b"%d" % v for v in row) + b" # row\n")
cases["plain.pgm"] = [W, H]
with open(os.path.join(d, "plain.ppm"), "wb") as f:
    f.write(b"P3 %d %d 255\n" % (W, H))
    for row in rgb:
        f.write(b"  ".join(b"%d %d %d" % tuple(p) for p in row) + b"\n")
cases["plain.ppm"] = [W, H]
with open(os.path.join(d, "plain.pbm"), "wb") as f:
    f.write(b"P1\n%d %d\n" % (W, H))
    for row in grey > 100:
        f.write(b"".join(b"1" if v else b"0" for v in row) + b"\n")
cases["plain.pbm"] = [W, H]

for name in cases:
    im = Image.open(os.path.join(d, name))
    assert list(im.size) == cases[name], (name, im.size)
    with open(os.path.join(d, name + ".rgb"), "wb") as f:
        f.write(im.convert("RGB").tobytes())
with open(os.path.join(d, "cases.json"), "w") as f:
    json.dump(cases, f)
