"""Finding and loading libvlstack.so, and the ctypes declarations of its C ABI
(include/vlstack/vlstack.h, ABI version 1).

The library is found, in this order:
  1. the environment variable VLSTACK_LIBRARY (a path to the .so; nothing else is tried);
  2. libvlstack.so.1 next to this package (a copy placed there);
  3. libvlstack.so.1 in <sys.prefix>/lib and <sys.base_prefix>/lib (a `cmake --install
     --prefix` into the environment);
  4. libvlstack.so.1 on the dynamic loader's search path (LD_LIBRARY_PATH, ld.so.cache:
     /usr/lib, /usr/local/lib after ldconfig), and what ctypes.util.find_library("vlstack")
     names.
The first that loads is used; its vls_abi_version() must be ABI_VERSION.
"""
import ctypes
import ctypes.util
import os
import sys
import threading

ABI_VERSION = 1
SONAME = "libvlstack.so.%d" % ABI_VERSION

c_int32 = ctypes.c_int32
c_uint32 = ctypes.c_uint32
c_uint64 = ctypes.c_uint64
c_size_t = ctypes.c_size_t
c_char_p = ctypes.c_char_p
c_void_p = ctypes.c_void_p
POINTER = ctypes.POINTER


class LibraryError(OSError):
    """libvlstack.so could not be found or loaded, or speaks another ABI version."""


class Tensor(ctypes.Structure):
    """vls_tensor: a borrowed, dense, row-major tensor."""
    _fields_ = [("data", c_void_p), ("byte_length", c_uint64), ("dtype", c_int32),
                ("rank", c_int32), ("dims", ctypes.c_int64 * 4)]


class ModelOptions(ctypes.Structure):
    """vls_model_options."""
    _fields_ = [("struct_size", c_uint32), ("capacity", c_int32), ("slots", c_int32),
                ("nmax", c_int32), ("threads", c_int32), ("precision", c_int32),
                ("artifact", c_char_p), ("kv_cache", c_int32),
                ("artifact_memory", ctypes.c_int64)]


class ModelDesc(ctypes.Structure):
    """vls_model_desc."""
    _fields_ = [("struct_size", c_uint32)] + [(name, c_int32) for name in (
        "hidden", "vocab", "layers", "heads", "kv_heads", "head_dim", "position_mode",
        "has_deepstack", "deepstack_layer_count", "nmax", "capacity", "slots", "image_token_id",
        "video_token_id", "reserved")]


class RequestOptions(ctypes.Structure):
    """vls_request_options."""
    _fields_ = [("struct_size", c_uint32), ("max_new_tokens", c_int32), ("ignore_eos", c_int32),
                ("temperature", ctypes.c_float), ("top_k", c_int32), ("top_p", ctypes.c_float),
                ("min_p", ctypes.c_float), ("repetition_penalty", ctypes.c_float),
                ("presence_penalty", ctypes.c_float), ("frequency_penalty", ctypes.c_float),
                ("has_seed", c_int32), ("reserved", c_uint32), ("seed", c_uint64)]


class TokenEvent(ctypes.Structure):
    """vls_token_event."""
    _fields_ = [("request_id", c_uint64), ("token", c_int32), ("finish_reason", c_int32)]


_T = POINTER(Tensor)
_H = c_void_p  # every handle is opaque
_SZ = POINTER(c_size_t)
_EV = POINTER(TokenEvent)

# name: (restype, argtypes). Every function of the ABI the package uses.
_FUNCTIONS = {
    "vls_abi_version": (c_uint32, []),
    "vls_last_error": (c_char_p, []),
    "vls_status_name": (c_char_p, [c_int32]),
    "vls_model_default_options": (ModelOptions, []),
    "vls_model_load": (c_int32, [c_char_p, POINTER(ModelOptions), POINTER(_H)]),
    "vls_model_write_artifact": (c_int32, [_H, c_char_p]),
    "vls_model_free": (None, [_H]),
    "vls_model_identity": (c_int32, [_H, c_char_p, c_size_t]),
    "vls_model_info": (c_int32, [_H, POINTER(ModelDesc)]),
    "vls_model_deepstack_layers": (c_int32, [_H, POINTER(c_int32), c_size_t, _SZ]),
    "vls_session_create": (c_int32, [_H, POINTER(_H)]),
    "vls_session_free": (None, [_H]),
    "vls_session_prefill_tokens": (c_int32, [_H, _T, c_int32, _T, c_int32]),
    "vls_session_prefill_embeddings": (c_int32, [_H, _T, c_int32, _T, c_int32]),
    "vls_session_prefill_deepstack": (c_int32, [_H, _T, c_int32, _T, c_int32, _T, _T, _T, _T]),
    "vls_session_decode": (c_int32, [_H, c_int32]),
    "vls_session_logits": (c_int32, [_H, POINTER(POINTER(ctypes.c_float)), POINTER(c_uint64)]),
    "vls_session_length": (c_int32, [_H, POINTER(c_int32)]),
    "vls_session_rope_delta": (c_int32, [_H, POINTER(c_int32)]),
    "vls_request_default_options": (RequestOptions, []),
    "vls_batch_create": (c_int32, [_H, POINTER(_H)]),
    "vls_batch_free": (None, [_H]),
    "vls_batch_submit_tokens": (c_int32, [_H, _T, c_int32, _T, c_int32, POINTER(RequestOptions),
                                          POINTER(c_uint64)]),
    "vls_batch_submit_embeddings": (c_int32, [_H, _T, c_int32, _T, c_int32, _T,
                                              POINTER(RequestOptions), POINTER(c_uint64)]),
    "vls_batch_submit_deepstack": (c_int32, [_H, _T, c_int32, _T, c_int32, _T, _T, _T, _T,
                                             POINTER(RequestOptions), POINTER(c_uint64)]),
    "vls_batch_cancel": (c_int32, [_H, c_uint64]),
    "vls_batch_step": (c_int32, [_H, _EV, c_size_t, _SZ]),
    "vls_batch_admit": (c_int32, [_H, _EV, c_size_t, _SZ]),
    "vls_batch_run_until_idle": (c_int32, [_H]),
    "vls_batch_poll": (c_int32, [_H, _EV, c_size_t, _SZ]),
    "vls_batch_wait": (c_int32, [_H, c_int32, _EV, c_size_t, _SZ]),
    "vls_batch_start": (c_int32, [_H]),
    "vls_batch_stop": (c_int32, [_H]),
    "vls_batch_pending_count": (c_int32, [_H, _SZ]),
    "vls_batch_active_count": (c_int32, [_H, _SZ]),
    "vls_batch_pending_bytes": (c_int32, [_H, POINTER(c_uint64)]),
    "vls_batch_buffered_count": (c_int32, [_H, _SZ]),
    "vls_batch_next_coordinate": (c_int32, [_H, c_uint64, POINTER(c_int32)]),
    "vls_batch_slot_of": (c_int32, [_H, c_uint64, POINTER(c_int32)]),
    "vls_batch_request_error": (c_int32, [_H, c_uint64, c_void_p, c_size_t, _SZ]),
    "vls_chat_create": (c_int32, [_H, c_char_p, POINTER(_H)]),
    "vls_chat_free": (None, [_H]),
    "vls_batch_submit_chat": (c_int32, [_H, _H, c_char_p, POINTER(c_uint64)]),
    "vls_batch_take_text": (c_int32, [_H, c_uint64, c_void_p, c_size_t, _SZ, POINTER(c_int32)]),
}
# Added to ABI 1 later: a library built before them lacks them (the calls then raise
# UnimplementedError); everything else is required.
_OPTIONAL = {
    "vls_chat_tokenize": (c_int32, [_H, c_void_p, c_size_t, POINTER(c_int32), c_size_t, _SZ]),
    "vls_chat_detokenize": (c_int32, [_H, POINTER(c_int32), c_size_t, c_int32, c_void_p, c_size_t,
                                      _SZ]),
    "vls_chat_render": (c_int32, [_H, c_char_p, c_void_p, c_size_t, _SZ]),
    "vls_resolve_model": (c_int32, [c_char_p, c_void_p, c_size_t, _SZ]),
}

_lock = threading.Lock()
_lib = None
_path = None


def _candidates():
    """(description, argument for ctypes.CDLL) in search order, when VLSTACK_LIBRARY is unset."""
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, SONAME)]
    # Installed by `cmake --install` / the DEB: <prefix>/lib/python3/dist-packages/vlstack, the
    # library in <prefix>/lib.
    out.append(os.path.normpath(os.path.join(here, "..", "..", "..", SONAME)))
    for prefix in dict.fromkeys((sys.prefix, sys.base_prefix)):
        out.append(os.path.join(prefix, "lib", SONAME))
    out.append(SONAME)  # the dynamic loader's own search
    found = ctypes.util.find_library("vlstack")
    if found and found not in out:
        out.append(found)
    return out


def _declare(lib):
    for name, (restype, argtypes) in _FUNCTIONS.items():
        try:
            fn = getattr(lib, name)
        except AttributeError:
            raise LibraryError("%s lacks %s: not a vlstack C ABI library" % (_path, name)) from None
        fn.restype = restype
        fn.argtypes = argtypes
    for name, (restype, argtypes) in _OPTIONAL.items():
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes


def load_library(path=None):
    """Loads libvlstack (once per process) and returns the ctypes.CDLL.

    path: a library to load instead of searching (else VLSTACK_LIBRARY, else the search in the
    module docstring). Raises LibraryError naming every place it looked and why each failed, or
    when the library's vls_abi_version() is not ABI_VERSION. A later call with another path
    than the loaded one raises LibraryError too (one library per process)."""
    global _lib, _path
    with _lock:
        explicit = path or os.environ.get("VLSTACK_LIBRARY") or None
        if _lib is not None:
            if explicit is not None and os.path.realpath(explicit) != os.path.realpath(_path):
                raise LibraryError("libvlstack is already loaded from %s; cannot load %s too"
                                   % (_path, explicit))
            return _lib
        candidates = [explicit] if explicit else _candidates()
        tried = []
        for c in candidates:
            if os.sep in c and not os.path.exists(c):
                tried.append("%s: no such file" % c)
                continue
            try:
                lib = ctypes.CDLL(c)
            except OSError as e:
                tried.append("%s: %s" % (c, e))
                continue
            try:
                version = lib.vls_abi_version
            except AttributeError:
                tried.append("%s: not a vlstack library (no vls_abi_version)" % c)
                continue
            version.restype = c_uint32
            version.argtypes = []
            got = version()
            if got != ABI_VERSION:
                raise LibraryError("%s speaks vlstack C ABI version %d; this package needs %d"
                                   % (c, got, ABI_VERSION))
            _path = c
            _declare(lib)
            _lib = lib
            return lib
        how = ("VLSTACK_LIBRARY / the path given" if explicit else
               "set VLSTACK_LIBRARY to the library's path, or install it (cmake --install) into "
               "a folder the dynamic loader searches")
        raise LibraryError("libvlstack (%s) not found; looked in:\n  %s\n(%s)"
                           % (SONAME, "\n  ".join(tried), how))


def lib():
    """The loaded library (loading it on first use)."""
    return _lib if _lib is not None else load_library()


def library_path():
    """The path or name the library was loaded from (loading it on first use)."""
    lib()
    return _path


def has(name):
    """Whether the loaded library exports `name` (for the functions added to ABI 1 later)."""
    return getattr(lib(), name, None) is not None
