"""Minimal safetensors reader/writer in NumPy (independent oracle helper).

Supported dtypes: F64, F32, F16, BF16 (read exactly as float32 via uint16 << 16;
written by round-to-nearest-even from float32), I64, I32, I16, I8, U8, BOOL.
Sharded checkpoints are read through ``model.safetensors.index.json``.

Only the Python 3 standard library and NumPy are used.
"""

import json
import os
import struct

import numpy as np

_NP_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("u1"),
}
_ELEM_SIZE = {"BF16": 2, **{k: v.itemsize for k, v in _NP_DTYPES.items()}}


class SafetensorsError(Exception):
    pass


def bf16_bits_to_f32(bits):
    """uint16 array of bfloat16 bit patterns -> float32 array (exact)."""
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x):
    """float32 array -> uint16 bfloat16 bit patterns, round to nearest even (NaN kept NaN)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32).astype(np.uint64)
    rounded = (u + 0x7FFF + ((u >> 16) & 1)) >> 16
    out = rounded.astype(np.uint16)
    nan = np.isnan(x)
    if nan.any():
        out[nan] = 0x7FC0
    return out


def round_to_bf16(x):
    """float array -> float32 array whose values are exactly representable in bf16."""
    return bf16_bits_to_f32(f32_to_bf16_bits(np.asarray(x, dtype=np.float32)))


def read_header(path):
    with open(path, "rb") as f:
        raw = f.read(8)
        if len(raw) != 8:
            raise SafetensorsError(f"{path}: truncated header length")
        (n,) = struct.unpack("<Q", raw)
        hdr = f.read(n)
        if len(hdr) != n:
            raise SafetensorsError(f"{path}: truncated header")
    header = json.loads(hdr.decode("utf-8"))
    return header, 8 + n


def load_file(path, names=None, raw_bf16=False):
    """Read a .safetensors file into a dict name -> np.ndarray.

    BF16 tensors become float32 (exactly) unless raw_bf16, in which case
    they are returned as uint16 bit patterns.
    """
    header, base = read_header(path)
    with open(path, "rb") as f:
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        if names is not None and name not in names:
            continue
        dt = info["dtype"]
        shape = tuple(int(s) for s in info["shape"])
        b, e = info["data_offsets"]
        if dt not in _ELEM_SIZE:
            raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dt}")
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if e - b != count * _ELEM_SIZE[dt]:
            raise SafetensorsError(f"{path}: tensor {name}: byte length {e - b} != {count}*{_ELEM_SIZE[dt]}")
        buf = data[base + b: base + e]
        if dt == "BF16":
            bits = np.frombuffer(buf, dtype="<u2").reshape(shape)
            arr = bits.copy() if raw_bf16 else bf16_bits_to_f32(bits).reshape(shape)
        else:
            arr = np.frombuffer(buf, dtype=_NP_DTYPES[dt]).reshape(shape).copy()
            if dt == "BOOL":
                arr = arr.astype(bool)
        out[name] = arr
    return out


def load_dtypes(path):
    header, _ = read_header(path)
    return {k: v["dtype"] for k, v in header.items() if k != "__metadata__"}


def load_checkpoint(model_dir):
    """Load all tensors of a (possibly sharded) checkpoint directory."""
    idx = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(idx):
        with open(idx) as f:
            wm = json.load(f)["weight_map"]
        by_file = {}
        for name, fn in wm.items():
            by_file.setdefault(fn, set()).add(name)
        out = {}
        for fn, names in sorted(by_file.items()):
            part = load_file(os.path.join(model_dir, fn), names=names)
            missing = names - set(part)
            if missing:
                raise SafetensorsError(f"{fn}: index lists missing tensors {sorted(missing)[:3]}")
            out.update(part)
        return out
    single = os.path.join(model_dir, "model.safetensors")
    if os.path.exists(single):
        return load_file(single)
    raise SafetensorsError(f"{model_dir}: no model.safetensors or model.safetensors.index.json")


def _dtype_name(arr):
    m = {np.dtype("float64"): "F64", np.dtype("float32"): "F32", np.dtype("float16"): "F16",
         np.dtype("int64"): "I64", np.dtype("int32"): "I32", np.dtype("int16"): "I16",
         np.dtype("int8"): "I8", np.dtype("uint8"): "U8", np.dtype("bool"): "BOOL"}
    dt = arr.dtype.newbyteorder("=") if arr.dtype.byteorder not in ("=", "|") else arr.dtype
    if dt not in m:
        raise SafetensorsError(f"unsupported numpy dtype {arr.dtype}")
    return m[dt]


def save_file(tensors, path, dtypes=None, metadata=None):
    """Write dict name -> array. dtypes optionally maps name -> "BF16"/"F16"/"F32"/...

    For "BF16" the array is rounded (nearest even) from float32.
    """
    dtypes = dtypes or {}
    header = {}
    blobs = []
    off = 0
    for name in sorted(tensors):
        arr = np.asarray(tensors[name])
        dt = dtypes.get(name) or _dtype_name(arr)
        if dt == "BF16":
            payload = f32_to_bf16_bits(arr).astype("<u2").tobytes()
        else:
            payload = np.ascontiguousarray(arr, dtype=_NP_DTYPES[dt]).tobytes()
        header[name] = {"dtype": dt, "shape": list(arr.shape), "data_offsets": [off, off + len(payload)]}
        blobs.append(payload)
        off += len(payload)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hdr = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hdr += b" " * ((8 - len(hdr) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(hdr)))
        f.write(hdr)
        for b in blobs:
            f.write(b)


def save_checkpoint(tensors, model_dir, dtypes=None, shards=1):
    """Write a checkpoint; with shards > 1 writes model-0000i-of-0000n.safetensors + index."""
    os.makedirs(model_dir, exist_ok=True)
    names = sorted(tensors)
    if shards <= 1:
        save_file(tensors, os.path.join(model_dir, "model.safetensors"), dtypes)
        return
    groups = [names[i::shards] for i in range(shards)]
    wm = {}
    for i, g in enumerate(groups):
        fn = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        save_file({n: tensors[n] for n in g}, os.path.join(model_dir, fn),
                  {n: dtypes[n] for n in g if dtypes and n in dtypes})
        for n in g:
            wm[n] = fn
    with open(os.path.join(model_dir, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {}, "weight_map": wm}, f, indent=1, sort_keys=True)
