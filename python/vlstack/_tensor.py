"""NumPy arrays -> vls_tensor descriptors, checked before any C call.

Integer arguments (token ids, positions, layer indices) accept any integer array or sequence
whose values fit in int32; they are converted to a C-contiguous int32 array. Float arguments
(embeddings, features) must be float32 (any byte order; a non-contiguous array is copied):
another float dtype is refused rather than silently rounded. Ranks and the dims the model fixes
(H, K, Nv, S) are checked here, naming the argument; the C ABI checks everything again, values
included (finite floats, ids in the vocabulary, sorted positions).
"""
import ctypes

import numpy as np

from . import _lib
from .errors import invalid

F32 = 0
I32 = 1

_I32_MIN = np.iinfo(np.int32).min
_I32_MAX = np.iinfo(np.int32).max


def _shape_text(shape):
    return "[" + ", ".join("?" if d is None else str(d) for d in shape) + "]"


def _check_shape(where, name, arr, shape):
    if arr.ndim != len(shape) or any(w is not None and w != g for w, g in zip(shape, arr.shape)):
        raise invalid("%s: %s has shape %s; expected %s" % (
            where, name, list(arr.shape), _shape_text(shape)))


def int32_array(where, name, value, shape):
    """`value` as a C-contiguous int32 array of `shape` (None: any size)."""
    arr = np.asarray(value)
    if arr.size == 0 and arr.dtype == np.float64 and not isinstance(value, np.ndarray):
        arr = arr.astype(np.int32)  # an empty Python list
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise invalid("%s: %s has dtype %s; expected an integer dtype (int32)" % (
            where, name, arr.dtype))
    _check_shape(where, name, arr, shape)
    if arr.dtype != np.int32 and arr.size > 0:
        lo, hi = arr.min(), arr.max()
        if lo < _I32_MIN or hi > _I32_MAX:
            bad = lo if lo < _I32_MIN else hi
            raise invalid("%s: %s holds %d, outside int32" % (where, name, bad))
    return np.ascontiguousarray(arr, dtype=np.int32)


def float32_array(where, name, value, shape):
    """`value` (float32) as a C-contiguous native float32 array of `shape`."""
    arr = np.asarray(value)
    if arr.dtype.kind != "f" or arr.dtype.itemsize != 4:
        raise invalid("%s: %s has dtype %s; expected float32" % (where, name, arr.dtype))
    _check_shape(where, name, arr, shape)
    return np.ascontiguousarray(arr, dtype=np.float32)


def descriptor(arr):
    """The vls_tensor of a C-contiguous int32/float32 array (which must outlive the call)."""
    t = _lib.Tensor()
    t.data = arr.ctypes.data if arr.size > 0 else None
    t.byte_length = arr.nbytes
    t.dtype = I32 if arr.dtype == np.int32 else F32
    t.rank = arr.ndim
    for i, d in enumerate(arr.shape):
        t.dims[i] = d
    return t


def ref(t):
    """ctypes pointer argument for an optional descriptor."""
    return None if t is None else ctypes.byref(t)
