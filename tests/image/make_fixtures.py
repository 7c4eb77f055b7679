#!/usr/bin/python3
"""Writes the image-decoding fixtures and what PIL makes of them (tests/image/fixtures/).

Each fixture NAME.{png,jpg,webp} gets NAME.rgb: what transformers' load_image gives
(PIL.Image.open, ImageOps.exif_transpose, convert("RGB")) as a little-endian uint32 width, a
uint32 height and [H, W, 3] bytes. manifest.txt lists every fixture with "ok", or "error TEXT"
when PIL refuses it (TEXT: what vlstack's message must contain). Deterministic: a fixed seed,
and PNGs the decoder must see in unusual layouts (2/4/16-bit, Adam7, eXIf after IDAT) are
written by hand here. Usage: make_fixtures.py [OUT_DIR]  (default: the fixtures folder).
"""
import io
import os
import struct
import sys
import zlib

import numpy as np
from PIL import Image, ImageOps

W, H = 37, 23  # odd and non-square: edges of chroma upsampling, visible rotations


def load_image(data):
    """transformers.image_utils.load_image on the bytes of a file."""
    im = Image.open(io.BytesIO(data))
    im = ImageOps.exif_transpose(im)
    return im.convert("RGB")


def dump(im):
    a = np.asarray(im, dtype=np.uint8)
    return struct.pack("<II", im.width, im.height) + a.tobytes()


def picture(w=W, h=H, seed=0):
    """[h, w, 3] uint8: gradients, a bright corner block (shows orientation) and noise."""
    rng = np.random.RandomState(seed)
    y, x = np.mgrid[0:h, 0:w]
    a = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) * 4 % 256], -1)
    a[: h // 3, : w // 4] = (250, 30, 30)
    a = a + rng.randint(-20, 21, size=a.shape)
    return np.clip(a, 0, 255).astype(np.uint8)


def exif_bytes(orientation, endian="<"):
    """A minimal EXIF block: TIFF header and IFD0 holding only Orientation (SHORT)."""
    mark = b"II*\x00" if endian == "<" else b"MM\x00*"
    ifd = struct.pack(endian + "HHHIHHI", 1, 0x0112, 3, 1, orientation, 0, 0)
    return b"Exif\x00\x00" + mark + struct.pack(endian + "I", 8) + ifd


def png_chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


ADAM7 = [(0, 0, 8, 8), (4, 0, 8, 8), (0, 4, 4, 8), (2, 0, 4, 4), (0, 2, 2, 4), (1, 0, 2, 2),
         (0, 1, 1, 2)]


def raw_png(samples, depth, color, palette=None, trns=None, interlace=False, before=(), after=()):
    """A PNG from samples [h, w, channels] (ints < 2**depth), filter 0 on every row."""
    h, w, _ = samples.shape

    def pack_rows(s):
        out = b""
        for row in s:
            flat = row.reshape(-1)
            if depth == 16:
                data = flat.astype(">u2").tobytes()
            elif depth == 8:
                data = flat.astype(np.uint8).tobytes()
            else:
                bits = "".join(format(int(v), "0%db" % depth) for v in flat)
                bits += "0" * (-len(bits) % 8)
                data = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
            out += b"\x00" + data
        return out

    if interlace:
        raw = b"".join(pack_rows(samples[y0::dy, x0::dx]) for x0, y0, dx, dy in ADAM7
                       if samples[y0::dy, x0::dx].size)
    else:
        raw = pack_rows(samples)
    body = png_chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, int(interlace)))
    for c in before:
        body += c
    if palette is not None:
        body += png_chunk(b"PLTE", bytes(palette))
    if trns is not None:
        body += png_chunk(b"tRNS", trns)
    body += png_chunk(b"IDAT", zlib.compress(raw, 9))
    for c in after:
        body += c
    return b"\x89PNG\r\n\x1a\n" + body + png_chunk(b"IEND", b"")


def saved(im, fmt, **kw):
    b = io.BytesIO()
    im.save(b, fmt, **kw)
    return b.getvalue()


def fixtures():
    rgb = Image.fromarray(picture())
    pic = picture()
    rng = np.random.RandomState(7)
    alpha = rng.randint(0, 256, size=(H, W), dtype=np.uint8)
    alpha[:4] = 0  # fully transparent rows keep their colour in PIL's convert
    rgba = Image.fromarray(np.dstack([pic, alpha]), "RGBA")
    grey = rgb.convert("L")
    f = {}
    # PNG written by PIL.
    f["png_rgb.png"] = saved(rgb, "PNG")
    f["png_rgba.png"] = saved(rgba, "PNG")
    f["png_grey.png"] = saved(grey, "PNG")
    f["png_la.png"] = saved(Image.merge("LA", [grey, Image.fromarray(alpha)]), "PNG")
    f["png_bilevel.png"] = saved(grey.point(lambda v: 255 if v > 128 else 0).convert("1"), "PNG")
    pal = rgb.quantize(colors=200, dither=Image.Dither.NONE)
    f["png_palette.png"] = saved(pal, "PNG")
    f["png_palette_trns.png"] = saved(pal, "PNG", transparency=3)
    f["png_exif_orient6.png"] = saved(rgb, "PNG", exif=exif_bytes(6))
    # PNG layouts PIL does not write.
    g = (pic[..., :1].astype(np.int64))
    f["png_grey2.png"] = raw_png(g >> 6, 2, 0)
    f["png_grey4.png"] = raw_png(g >> 4, 4, 0)
    g16 = (pic[..., :1].astype(np.int64) * 3) - 100  # some < 255, most above: PIL clips
    f["png_grey16.png"] = raw_png(np.clip(g16, 0, 65535), 16, 0)
    f["png_la16.png"] = raw_png(np.dstack([pic[..., :1].astype(np.int64) * 257 + 3,
                                           alpha[..., None].astype(np.int64) * 250]), 16, 4)
    wide = pic.astype(np.int64) * 257 + rng.randint(0, 257, size=pic.shape)
    f["png_rgb16.png"] = raw_png(wide, 16, 2)
    f["png_rgba16.png"] = raw_png(np.dstack([wide, alpha.astype(np.int64) * 256]), 16, 6)
    f["png_rgb_interlaced.png"] = raw_png(pic, 8, 2, interlace=True)
    f["png_rgba16_interlaced.png"] = raw_png(np.dstack([wide, alpha.astype(np.int64) * 256]),
                                             16, 6, interlace=True)
    f["png_grey4_interlaced.png"] = raw_png(g >> 4, 4, 0, interlace=True)
    idx = (pic[..., :1].astype(np.int64) >> 6)  # 2-bit indices 0..3, palette of 3: index 3 grey
    f["png_palette2_short.png"] = raw_png(idx, 2, 3, palette=[10, 200, 30, 40, 50, 250, 90, 9, 99],
                                          trns=b"\x00\x80")
    f["png_exif_after_idat.png"] = raw_png(
        pic, 8, 2, after=[png_chunk(b"eXIf", exif_bytes(8, ">")[6:])])
    f["png_gamma_ignored.png"] = raw_png(pic, 8, 2, before=[png_chunk(b"gAMA",
                                                                      struct.pack(">I", 100000))])
    # JPEG.
    for name, kw in {"jpeg_420": dict(quality=90, subsampling=2),
                     "jpeg_444": dict(quality=95, subsampling=0),
                     "jpeg_422": dict(quality=85, subsampling=1),
                     "jpeg_progressive": dict(quality=90, progressive=True),
                     "jpeg_optimized": dict(quality=75, optimize=True)}.items():
        f[name + ".jpg"] = saved(rgb, "JPEG", **kw)
    f["jpeg_grey.jpg"] = saved(grey, "JPEG", quality=90)
    f["jpeg_cmyk.jpg"] = saved(rgb.convert("CMYK"), "JPEG", quality=90)
    for o in range(1, 9):
        f["jpeg_orient%d.jpg" % o] = saved(rgb, "JPEG", quality=90,
                                           exif=exif_bytes(o, "<" if o % 2 else ">"))
    # A non-TIFF EXIF block: PIL ignores it without a JFIF dpi, raises with one (exif.cc).
    f["jpeg_bad_exif_nodpi.jpg"] = saved(rgb, "JPEG", quality=90, exif=b"Exif\x00\x00junkjunk")
    f["jpeg_bad_exif_dpi.jpg"] = saved(rgb, "JPEG", quality=90, dpi=(72, 72),
                                       exif=b"Exif\x00\x00junkjunk")
    # WebP.
    f["webp_lossy.webp"] = saved(rgb, "WEBP", quality=80)
    f["webp_lossless.webp"] = saved(rgb, "WEBP", lossless=True)
    f["webp_lossy_alpha.webp"] = saved(rgba, "WEBP", quality=80)
    f["webp_lossless_alpha.webp"] = saved(rgba, "WEBP", lossless=True, exact=True)
    f["webp_exif_orient6.webp"] = saved(rgb, "WEBP", quality=80, exif=exif_bytes(6))
    frame2 = Image.fromarray(255 - picture(seed=3))
    f["webp_animated.webp"] = saved(rgb, "WEBP", save_all=True, append_images=[frame2],
                                    duration=100, quality=80)
    return f


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "fixtures")
    os.makedirs(out, exist_ok=True)
    manifest = []
    for name, data in sorted(fixtures().items()):
        with open(os.path.join(out, name), "wb") as fh:
            fh.write(data)
        stem = name.rsplit(".", 1)[0]
        try:
            im = load_image(data)
        except Exception as e:  # PIL refuses it: so must vlstack
            manifest.append("%s error EXIF" % name)
            print("%s: PIL raises %s: %s" % (name, type(e).__name__, e))
            continue
        with open(os.path.join(out, stem + ".rgb"), "wb") as fh:
            fh.write(dump(im))
        manifest.append("%s ok" % name)
    with open(os.path.join(out, "manifest.txt"), "w") as fh:
        fh.write("\n".join(manifest) + "\n")


if __name__ == "__main__":
    main()
