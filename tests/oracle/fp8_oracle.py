#!/usr/bin/env python3
"""Independent FP8 (E4M3) oracle in NumPy, written from the OCP 8-bit floating point
specification (E4M3: 1 sign bit, 4 exponent bits with bias 7, 3 mantissa bits, subnormals,
no infinities, S.1111.111 is NaN, largest finite 448) and from the dequantization the reference
implementations use (transformers Fp8Dequantize, DeepSeek-V3 weight_dequant: the f32 product
code * weight_scale_inv of the code's [128, 128] block) -- never from vlstack's C++.

torch.float8_e4m3fn would be the natural oracle, but the Debian python3-torch (1.13) predates
it, so the decode below is the spec's formula, pinned by values the spec and torch.finfo give.

  fp8_oracle.py table --out FILE          write the 256 decoded codes (the golden file the C++
                                          test tests/fp8/e4m3_golden_test.cc reads)
  fp8_oracle.py check-table FILE          check FILE against the formula and the anchors
  fp8_oracle.py dequant --model DIR --out DIR --dtype f32|bf16
                                          write DIR's FP8 checkpoint dequantized: every
                                          F8_E4M3 weight times its weight_scale_inv blocks, in
                                          f32 (exact) or rounded to bf16 (nearest even);
                                          config.json without quantization_config
  fp8_oracle.py selftest                  the anchors and a hand-made block dequantization
"""
import argparse
import json
import os
import shutil
import struct
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import st  # noqa: E402

# Values the spec (and torch.finfo(torch.float8_e4m3fn)) state.
ANCHORS = {
    0x00: 0.0,
    0x01: 2.0 ** -9,          # smallest subnormal
    0x07: 7 * 2.0 ** -9,      # largest subnormal
    0x08: 2.0 ** -6,          # smallest normal (torch.finfo tiny)
    0x38: 1.0,
    0x39: 1.125,              # 1 + eps (torch.finfo eps = 0.125)
    0x7E: 448.0,              # largest finite (torch.finfo max)
    0x80: -0.0,
    0xFE: -448.0,
    0xB8: -1.0,
}
NAN_CODES = (0x7F, 0xFF)


def decode(code):
    """One E4M3 code -> Python float (NaN for 0x7F / 0xFF), from the bit fields."""
    sign = -1.0 if code & 0x80 else 1.0
    exp = (code >> 3) & 0xF
    mant = code & 0x7
    if exp == 0xF and mant == 0x7:
        return float("nan")
    if exp == 0:
        return sign * mant / 8.0 * 2.0 ** (1 - 7)
    return sign * (1.0 + mant / 8.0) * 2.0 ** (exp - 7)


def table():
    """float32 array of the 256 decoded codes."""
    return np.array([decode(c) for c in range(256)], dtype=np.float32)


def f32_bits(x):
    return int(np.float32(x).view(np.uint32))


def write_table(path):
    t = table()
    with open(path, "w") as f:
        f.write("# E4M3 (float8_e4m3fn) code -> float32 bits, value; written by "
                "tests/oracle/fp8_oracle.py table\n")
        for c in range(256):
            f.write(f"0x{c:02x} 0x{f32_bits(t[c]):08x} {float(t[c])!r}\n")


def read_table(path):
    out = {}
    with open(path) as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            code, bits, _ = line.split()
            out[int(code, 16)] = int(bits, 16)
    return out


def check_anchors():
    t = table()
    for code, value in ANCHORS.items():
        got = float(t[code])
        assert got == value and np.signbit(t[code]) == np.signbit(value), (code, got, value)
    for code in NAN_CODES:
        assert np.isnan(t[code]), code
    assert int(np.isnan(t).sum()) == 2
    finite = t[~np.isnan(t)]
    assert float(np.abs(finite).max()) == 448.0
    # Positive codes increase monotonically (the format is sign-magnitude).
    pos = t[:0x7F]
    assert np.all(np.diff(pos) > 0)
    assert np.array_equal(t[0x80:0xFF], -pos)


def check_table(path):
    check_anchors()
    golden = read_table(path)
    t = table()
    if sorted(golden) != list(range(256)):
        raise SystemExit(f"{path}: expected 256 codes")
    bad = [c for c in range(256)
           if not (np.isnan(t[c]) and golden[c] & 0x7FFFFFFF > 0x7F800000)
           and golden[c] != f32_bits(t[c])]
    if bad:
        raise SystemExit(f"{path}: codes {[hex(c) for c in bad[:8]]} differ from the formula")
    print(f"OK {path}: 256 codes match the E4M3 formula")


def dequantize(codes, scale_inv, block):
    """codes uint8 [R, C], scale_inv float32 [ceil(R/bh), ceil(C/bw)] -> float32 [R, C]."""
    bh, bw = block
    r, c = codes.shape
    want = (-(-r // bh), -(-c // bw))
    assert scale_inv.shape == want, (scale_inv.shape, want)
    values = table()[codes]
    full = np.repeat(np.repeat(scale_inv.astype(np.float32), bh, axis=0), bw, axis=1)[:r, :c]
    return (values * full).astype(np.float32)  # one f32 multiplication per element


def read_raw(path):
    """name -> (dtype, shape, bytes) of every tensor of one safetensors file."""
    header, base = st.read_header(path)
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        b, e = info["data_offsets"]
        out[name] = (info["dtype"], tuple(info["shape"]), data[base + b:base + e])
    return out


def checkpoint_files(model):
    idx = os.path.join(model, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            return sorted(set(json.load(f)["weight_map"].values()))
    return ["model.safetensors"]


def to_f32(dtype, shape, raw):
    if dtype == "F32":
        return np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float32)
    if dtype == "BF16":
        return st.bf16_bits_to_f32(np.frombuffer(raw, dtype="<u2")).reshape(shape)
    if dtype == "F16":
        return np.frombuffer(raw, dtype="<f2").reshape(shape).astype(np.float32)
    raise SystemExit(f"unexpected dtype {dtype}")


def dequant_checkpoint(model, out, dtype):
    with open(os.path.join(model, "config.json")) as f:
        cfg = json.load(f)
    q = cfg.pop("quantization_config", None)
    if q is None or q.get("quant_method") != "fp8":
        raise SystemExit(f"{model}: not an fp8 checkpoint")
    block = tuple(q["weight_block_size"])
    tensors, dtypes = {}, {}
    fp8 = 0
    for fn in checkpoint_files(model):
        raw = read_raw(os.path.join(model, fn))
        for name, (dt, shape, data) in raw.items():
            if name.endswith("_scale_inv"):
                assert name[:-len("_scale_inv")] in raw, name
                continue
            if dt == "F8_E4M3":
                sdt, sshape, sdata = raw[name + "_scale_inv"]
                codes = np.frombuffer(data, dtype=np.uint8).reshape(shape)
                w = dequantize(codes, to_f32(sdt, sshape, sdata), block)
                assert not np.isnan(w).any(), name
                tensors[name] = w
                dtypes[name] = "F32" if dtype == "f32" else "BF16"
                fp8 += 1
            else:
                tensors[name] = to_f32(dt, shape, data)
                dtypes[name] = dt
    os.makedirs(out, exist_ok=True)
    st.save_checkpoint(tensors, out, dtypes)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    for extra in os.listdir(model):
        if extra.endswith(".json") and not extra.startswith(("config", "model.safetensors")):
            shutil.copy(os.path.join(model, extra), os.path.join(out, extra))
    print(f"dequantized {fp8} FP8 weights of {model} into {out} ({dtype})")


def selftest():
    check_anchors()
    # A [3, 5] matrix in [2, 2] blocks: the edge blocks are 1 row and 1 column wide.
    codes = np.array([[0x38, 0x39, 0x7E, 0x01, 0x80],
                      [0xB8, 0x00, 0x08, 0x07, 0xFE],
                      [0x40, 0x48, 0x30, 0x3C, 0xC0]], dtype=np.uint8)
    scales = np.array([[0.5, 2.0, 4.0], [0.25, 1.0, 8.0]], dtype=np.float32)
    got = dequantize(codes, scales, (2, 2))
    want = np.array([[1.0 * 0.5, 1.125 * 0.5, 448 * 2.0, 2.0 ** -9 * 2.0, -0.0 * 4.0],
                     [-1.0 * 0.5, 0.0, 2.0 ** -6 * 2.0, 7 * 2.0 ** -9 * 2.0, -448 * 4.0],
                     [2.0 * 0.25, 4.0 * 0.25, 0.5 * 1.0, 1.5 * 1.0, -2.0 * 8.0]], dtype=np.float32)
    assert np.array_equal(got, want), got
    assert struct.pack("<f", got[0, 4]) == struct.pack("<f", -0.0)
    print("OK fp8_oracle selftest")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("table")
    t.add_argument("--out", required=True)
    c = sub.add_parser("check-table")
    c.add_argument("file")
    d = sub.add_parser("dequant")
    d.add_argument("--model", required=True)
    d.add_argument("--out", required=True)
    d.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    sub.add_parser("selftest")
    a = ap.parse_args()
    if a.cmd == "table":
        check_anchors()
        write_table(a.out)
    elif a.cmd == "check-table":
        check_table(a.file)
    elif a.cmd == "dequant":
        dequant_checkpoint(a.model, a.out, a.dtype)
    else:
        selftest()


if __name__ == "__main__":
    main()
