"""vlstack: Python bindings over the vlstack C ABI (libvlstack.so, include/vlstack/vlstack.h).

Pure Python (ctypes and NumPy); the library is found as vlstack._lib describes (VLSTACK_LIBRARY,
else libvlstack.so.1 next to the package, in <prefix>/lib, or on the loader's search path).

    import vlstack
    with vlstack.Model("/models/qwen3-vl-2b", capacity=4096) as model:
        chat = vlstack.Chat(model)
        for piece in chat.generate("Hello!", max_tokens=64):
            print(piece, end="", flush=True)

Thread safety (the C ABI's rules): a Model and a Chat are immutable and may be shared by any
number of threads; a Batch may be used from any number of threads at once; the C ABI allows one
thread at a time per session, and Session serialises its calls with a lock. Errors come from
vls_last_error(), which the C library keeps per thread: each call reads it on its own thread
right after the failing call, so concurrent failures never mix their messages.
"""
from ._lib import ABI_VERSION, LibraryError, library_path, load_library
from .batch import Batch, Event, FinishReason, Result, request_options
from .chat import Chat
from .errors import (CancelledError, ClosedError, DataLossError, FailedPreconditionError,
                     InternalError, InvalidArgumentError, IoError, NotFoundError, OutOfRangeError,
                     ResourceExhaustedError, UnimplementedError, VlsError, status_name)
from .model import (ArtifactMemory, KvCache, Model, ModelInfo, PositionMode, Precision,
                    resolve_model)
from .session import Session

__version__ = "0.1.0"


def abi_version():
    """The loaded library's vls_abi_version() (ABI_VERSION once loaded)."""
    return int(load_library().vls_abi_version())


__all__ = [
    "ABI_VERSION", "ArtifactMemory", "Batch", "CancelledError", "Chat", "ClosedError",
    "DataLossError", "Event", "FailedPreconditionError", "FinishReason", "InternalError", "InvalidArgumentError", "IoError",
    "KvCache", "LibraryError", "Model", "ModelInfo", "NotFoundError", "OutOfRangeError",
    "PositionMode", "Precision", "ResourceExhaustedError", "Result", "Session",
    "UnimplementedError", "VlsError", "abi_version", "library_path", "load_library",
    "request_options", "resolve_model", "status_name",
]
