#!/usr/bin/python3
"""Checks the committed image fixtures against PIL (the ctest image_fixtures_oracle).

For every fixture in tests/image/fixtures/manifest.txt, runs transformers' load_image semantics
(PIL.Image.open, ImageOps.exif_transpose, convert("RGB")) on the committed file and compares the
result with the committed NAME.rgb, byte for byte; a fixture marked "error" must make PIL raise.
Also pins the EXIF orientation rules decode_test.cc's ExifOrientationFollowsPil assumes. Exits 1
on any difference (regenerate with make_fixtures.py after a deliberate change).
"""
import io
import os
import struct
import sys

from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures  # noqa: E402

DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fixtures")


def exif_cases():
    """(EXIF block, the orientation PIL's exif_transpose acts on) as in decode_test.cc."""
    def ifd(typ, count, value, tail=b""):
        return (b"II*\x00\x08\x00\x00\x00\x01\x00\x12\x01" + struct.pack("<HI", typ, count) +
                value.ljust(4, b"\x00")[:4] + b"\x00" * 4 + tail)
    return [
        (ifd(3, 1, b"\x06"), 6), (ifd(4, 1, b"\x06"), 6), (ifd(1, 1, b"\x06"), 1),
        (ifd(7, 1, b"\x06"), 1), (ifd(2, 2, b"6"), 1), (ifd(3, 2, b"\x06\x00\x06"), 6),
        (ifd(3, 0, b"\x06"), 1), (ifd(3, 1, b"\x09"), 1), (ifd(99, 1, b"\x06"), 1),
        (ifd(5, 1, b"\x1a", struct.pack("<II", 12, 2)), 6),
        (ifd(5, 1, b"\x1a", struct.pack("<II", 6, 0)), 1),
        (ifd(11, 1, struct.pack("<f", 6.0)), 6), (ifd(11, 1, struct.pack("<f", 5.5)), 1),
        (ifd(4, 2, b"\x64"), 1), (b"Exif\x00\x00" + ifd(3, 1, b"\x03"), 3), (b"", 1),
        (b"II*\x00\xff\x00\x00\x00", 1),
    ]


def main():
    failures = []
    with open(os.path.join(DIR, "manifest.txt")) as fh:
        entries = [line.split(None, 1) for line in fh.read().splitlines() if line]
    if len(entries) < 40:
        failures.append("manifest lists only %d fixtures" % len(entries))
    for name, verdict in entries:
        with open(os.path.join(DIR, name), "rb") as fh:
            data = fh.read()
        try:
            got = make_fixtures.dump(make_fixtures.load_image(data))
        except Exception as e:
            if not verdict.startswith("error"):
                failures.append("%s: PIL raises %s" % (name, e))
            continue
        if verdict.startswith("error"):
            failures.append("%s: PIL decodes it, the manifest says error" % name)
            continue
        with open(os.path.join(DIR, name.rsplit(".", 1)[0] + ".rgb"), "rb") as fh:
            want = fh.read()
        if got != want:
            failures.append("%s: PIL's pixels differ from the committed .rgb" % name)
    for block, want in exif_cases():
        ex = Image.Exif()
        ex.load(block)
        o = ex.get(0x0112)
        got = o if o in (2, 3, 4, 5, 6, 7, 8) else 1
        if got != want:
            failures.append("EXIF %r: PIL gives %r, expected %d" % (block, o, want))
    for f in failures:
        print("FAIL", f)
    print("%d fixtures, %d EXIF cases, %d failures" % (len(entries), len(exif_cases()),
                                                        len(failures)))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
