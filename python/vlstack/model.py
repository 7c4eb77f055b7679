"""vlstack.Model: a loaded checkpoint (vls_model_*)."""
import ctypes
import dataclasses
import enum
import os

from . import _lib
from ._handle import Handle
from .errors import OutOfRangeError, check, invalid


class PositionMode(enum.IntEnum):
    """vls_position_mode: positions are int32 [S] (1-D) or [3, S] (M-RoPE: t, h, w rows)."""
    POSITIONS_1D = 0
    MROPE = 1


class Precision(enum.IntEnum):
    """VLS_PRECISION_*: F32 is the exact reference path."""
    F32 = 0
    BF16 = 1
    INT8 = 2
    INT4 = 3


class KvCache(enum.IntEnum):
    """VLS_KV_CACHE_*: DEFAULT is f32 at F32 precision, BF16 otherwise."""
    DEFAULT = 0
    F32 = 1
    BF16 = 2


class ArtifactMemory(enum.IntEnum):
    """VLS_ARTIFACT_MEMORY_*: how an artifact is held. COPY (the default) reads it into huge
    pages, the faster decode; MAP serves it from the file's mapping, shared through the page
    cache by processes on one node."""
    COPY = 0
    MAP = 1


@dataclasses.dataclass(frozen=True)
class ModelInfo:
    """vls_model_desc."""
    hidden: int  # H
    vocab: int  # V
    layers: int  # L
    heads: int
    kv_heads: int
    head_dim: int
    position_mode: PositionMode
    has_deepstack: bool
    deepstack_layer_count: int  # K; 0 without DeepStack
    nmax: int  # DeepStack Nmax; 0 without DeepStack
    capacity: int  # C: per-session (and per-slot) context
    slots: int  # B: batch slots
    image_token_id: int  # -1 when the config has none
    video_token_id: int  # -1 when the config has none


def _enum_option(name, value, cls):
    if isinstance(value, str):
        try:
            return int(cls[value.upper()])
        except KeyError:
            raise invalid("Model: %s=%r is not one of %s" % (
                name, value, ", ".join(m.name.lower() for m in cls))) from None
    return int(cls(value))


def resolve_model(path):
    """The folder `path` names (vls_resolve_model): itself when it exists, else the snapshot of
    the Hugging Face repository id "Org/Name[@revision]" in the local cache (offline). Raises
    NotFoundError naming every place looked. Paths that exist, and paths that cannot be an id
    (absolute, or not of the form Org/Name), come back as they are, so vls_model_load reports
    them; so does every path with a library without the call."""
    path = os.fspath(path)
    could_be_id = (not os.path.isabs(path) and path.split("@")[0].count("/") == 1
                   and not path.startswith("."))
    if os.path.exists(path) or not could_be_id or not _lib.has("vls_resolve_model"):
        return path
    fn = _lib.lib().vls_resolve_model
    needed = ctypes.c_size_t()
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        st = fn(os.fsencode(path), buf, size, ctypes.byref(needed))
        if st == OutOfRangeError.code and needed.value > size:
            size = needed.value
            continue
        check(st)
        return os.fsdecode(buf.raw[:needed.value - 1])


class Model(Handle):
    """A Qwen3 / Qwen3-VL checkpoint loaded from a Hugging Face folder (vls_model_load), or
    from a repository id ("Qwen/Qwen3-VL-2B-Instruct") found in the local Hugging Face cache
    (resolve_model); .path is the folder.

    Options (vls_model_options; None keeps the library's default):
      capacity: per-session context C (default 4096); slots: batch slots B (default 1);
      nmax: DeepStack Nmax (0: the config's); threads (0: all cores);
      precision: "f32" (default), "bf16", "int8" or "int4" (or a Precision);
      artifact: a prepared-weights artifact to load instead of preparing (`vlstack compile`);
      kv_cache: "default", "f32" or "bf16" (or a KvCache);
      artifact_memory: "copy" (default) or "map" (or an ArtifactMemory): how `artifact` is held.

    A model is immutable once loaded and may be shared by any number of threads, sessions,
    batches and chats. close() (or leaving the `with` block) closes them all, then frees it.
    """
    _kind = "vlstack.Model"

    def __init__(self, path, *, capacity=None, slots=None, nmax=None, threads=None,
                 precision=None, artifact=None, kv_cache=None, artifact_memory=None):
        super().__init__()
        lib = _lib.lib()
        self.path = resolve_model(path)
        opts = lib.vls_model_default_options()
        for name, value in (("capacity", capacity), ("slots", slots), ("nmax", nmax),
                            ("threads", threads)):
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int):
                    raise invalid("Model: %s=%r is not an integer" % (name, value))
                if not -2**31 <= value < 2**31:
                    raise invalid("Model: %s=%d is outside int32" % (name, value))
                setattr(opts, name, value)
        if precision is not None:
            opts.precision = _enum_option("precision", precision, Precision)
        if kv_cache is not None:
            opts.kv_cache = _enum_option("kv_cache", kv_cache, KvCache)
        if artifact_memory is not None:
            opts.artifact_memory = _enum_option("artifact_memory", artifact_memory, ArtifactMemory)
        self._artifact = os.fsencode(artifact) if artifact is not None else None
        opts.artifact = self._artifact
        opts.struct_size = ctypes.sizeof(opts)
        h = ctypes.c_void_p()
        check(lib.vls_model_load(os.fsencode(self.path), ctypes.byref(opts), ctypes.byref(h)))
        self._adopt(h)
        self._identity = None
        self._info = None

    def _free(self, handle):
        _lib.lib().vls_model_free(handle)

    @property
    def info(self):
        """The model's dimensions and bounds (a ModelInfo)."""
        with self._use():  # ClosedError after close, cached or not
            pass
        if self._info is None:
            d = _lib.ModelDesc()
            d.struct_size = ctypes.sizeof(d)
            with self._use() as h:
                check(_lib.lib().vls_model_info(h, ctypes.byref(d)))
            self._info = ModelInfo(
                hidden=d.hidden, vocab=d.vocab, layers=d.layers, heads=d.heads,
                kv_heads=d.kv_heads, head_dim=d.head_dim,
                position_mode=PositionMode(d.position_mode), has_deepstack=bool(d.has_deepstack),
                deepstack_layer_count=d.deepstack_layer_count, nmax=d.nmax, capacity=d.capacity,
                slots=d.slots, image_token_id=d.image_token_id, video_token_id=d.video_token_id)
        return self._info

    @property
    def identity(self):
        """The artifact identity: 64 lowercase hex digits (the first call hashes every weight)."""
        with self._use():
            pass
        if self._identity is None:
            buf = ctypes.create_string_buffer(65)
            with self._use() as h:
                check(_lib.lib().vls_model_identity(h, buf, len(buf)))
            self._identity = buf.value.decode()
        return self._identity

    @property
    def deepstack_layers(self):
        """The DeepStack target layers as a list of K ints ([] without DeepStack)."""
        lib = _lib.lib()
        count = ctypes.c_size_t()
        with self._use() as h:
            k = self.info.deepstack_layer_count
            layers = (ctypes.c_int32 * max(k, 1))()
            check(lib.vls_model_deepstack_layers(h, layers, k, ctypes.byref(count)))
        return list(layers[:count.value])

    def write_artifact(self, path):
        """Writes the prepared weights as an artifact (vls_model_write_artifact)."""
        with self._use() as h:
            check(_lib.lib().vls_model_write_artifact(h, os.fsencode(path)))

    def session(self):
        """A new Session (one sequence) over this model."""
        from .session import Session  # pylint: disable=import-outside-toplevel
        return Session(self)

    def batch(self):
        """A new Batch engine over this model."""
        from .batch import Batch  # pylint: disable=import-outside-toplevel
        return Batch(self)

    def chat(self, path=None):
        """A new Chat front end (tokenizer, template) read from `path` (default: self.path)."""
        from .chat import Chat  # pylint: disable=import-outside-toplevel
        return Chat(self, path)

    def __repr__(self):
        return "vlstack.Model(%r%s)" % (self.path, ", closed" if self.closed else "")
