"""vlstack.Session: one sequence, prefilled then decoded token by token (vls_session_*)."""
import ctypes
import threading

import numpy as np

from . import _lib
from ._handle import Handle
from ._tensor import descriptor, float32_array, int32_array, ref
from .errors import check, invalid
from .model import PositionMode


def positions_array(where, info, positions, S):
    """The optional RoPE positions: int32 [S] (1-D models) or [3, S] (M-RoPE models)."""
    if positions is None:
        return None
    shape = (S,) if info.position_mode == PositionMode.POSITIONS_1D else (3, S)
    return int32_array(where, "positions", positions, shape)


def mode_of(info, position_mode):
    return int(info.position_mode if position_mode is None else position_mode)


def deepstack_arrays(where, model, embeddings, visual_positions, features, layers, token_ids):
    """The checked arrays of a DeepStack prefill or submit (see Session.prefill_deepstack)."""
    info = model.info
    if not info.has_deepstack:
        # The C ABI refuses it too; checked here so that the layer query below makes sense.
        raise invalid("%s: the model has no DeepStack" % where)
    emb = float32_array(where, "embeddings", embeddings, (None, info.hidden))
    S = emb.shape[0]
    vis = int32_array(where, "visual_positions", visual_positions, (None,))
    if layers is None:
        layers = model.deepstack_layers
    lay = int32_array(where, "layers", layers, (None,))
    feat = float32_array(where, "features", features, (lay.shape[0], vis.shape[0], info.hidden))
    ids = None if token_ids is None else int32_array(where, "token_ids", token_ids, (S,))
    return emb, vis, feat, lay, ids


class Session(Handle):
    """A single sequence over a Model (vls_session_*), with the model's context capacity.

    Every prefill replaces the sequence; decode appends one token. position_mode defaults to
    the model's (the C ABI refuses any other); positions default to 0..S-1 on every axis.
    A failed call changes nothing. The C ABI allows one thread at a time on a session: this
    class serialises its calls with a lock, so it may be shared between threads."""
    _kind = "vlstack.Session"

    def __init__(self, model):
        super().__init__(model)
        self.model = model
        self._lock = threading.Lock()
        h = ctypes.c_void_p()
        with model._use() as mh:
            check(_lib.lib().vls_session_create(mh, ctypes.byref(h)))
            self._adopt(h)

    def _free(self, handle):
        _lib.lib().vls_session_free(handle)

    def _call(self, name, *args):
        with self._use() as h, self._lock:
            check(getattr(_lib.lib(), name)(h, *args))

    def prefill_tokens(self, tokens, *, positions=None, rope_delta=0, position_mode=None):
        """Prefills token ids: int [S], each in [0, V), 1 <= S <= capacity."""
        where = "Session.prefill_tokens"
        info = self.model.info
        tok = int32_array(where, "tokens", tokens, (None,))
        pos = positions_array(where, info, positions, tok.shape[0])
        tt, pt = descriptor(tok), None if pos is None else descriptor(pos)
        self._call("vls_session_prefill_tokens", ctypes.byref(tt), mode_of(info, position_mode),
                   ref(pt), int(rope_delta))

    def prefill_embeddings(self, embeddings, *, positions=None, rope_delta=0,
                           position_mode=None):
        """Prefills input embeddings: float32 [S, H], every value finite."""
        where = "Session.prefill_embeddings"
        info = self.model.info
        emb = float32_array(where, "embeddings", embeddings, (None, info.hidden))
        pos = positions_array(where, info, positions, emb.shape[0])
        et, pt = descriptor(emb), None if pos is None else descriptor(pos)
        self._call("vls_session_prefill_embeddings", ctypes.byref(et),
                   mode_of(info, position_mode), ref(pt), int(rope_delta))

    def prefill_deepstack(self, embeddings, visual_positions, features, layers=None, *,
                          token_ids=None, positions=None, rope_delta=0, position_mode=None):
        """The DeepStack prefill (docs/contracts.md §2):
          embeddings:       float32 [S, H], finite
          visual_positions: int [Nv], strictly increasing, each in [0, S), Nv <= Nmax
          features:         float32 [K, Nv, H], finite
          layers:           int [K], equal to model.deepstack_layers (the default)
          token_ids:        None, or the prompt's int [S] ids; then visual_positions must be
                            exactly the positions of its image/video pad tokens."""
        where = "Session.prefill_deepstack"
        info = self.model.info
        emb, vis, feat, lay, ids = deepstack_arrays(where, self.model, embeddings,
                                                    visual_positions, features, layers, token_ids)
        pos = positions_array(where, info, positions, emb.shape[0])
        ts = [descriptor(a) for a in (emb, vis, feat, lay)]
        pt = None if pos is None else descriptor(pos)
        it = None if ids is None else descriptor(ids)
        self._call("vls_session_prefill_deepstack", ctypes.byref(ts[0]),
                   mode_of(info, position_mode), ref(pt), int(rope_delta), ctypes.byref(ts[1]),
                   ctypes.byref(ts[2]), ctypes.byref(ts[3]), ref(it))

    def decode(self, token):
        """Appends `token` (in [0, V)) after a successful prefill."""
        if isinstance(token, bool) or not isinstance(token, (int, np.integer)):
            raise invalid("Session.decode: token %r is not an integer" % (token,))
        if not -2**31 <= int(token) < 2**31:
            raise invalid("Session.decode: token %d is outside int32" % token)
        self._call("vls_session_decode", int(token))

    @property
    def logits(self):
        """A copy of the last prefill's or decode's logits: float32 [V]."""
        data = ctypes.POINTER(ctypes.c_float)()
        count = ctypes.c_uint64()
        with self._use() as h, self._lock:
            check(_lib.lib().vls_session_logits(h, ctypes.byref(data), ctypes.byref(count)))
            return np.ctypeslib.as_array(data, (count.value,)).copy()

    def _int(self, name):
        out = ctypes.c_int32()
        self._call(name, ctypes.byref(out))
        return out.value

    @property
    def length(self):
        """The physical KV length (0 before any prefill)."""
        return self._int("vls_session_length")

    @property
    def rope_delta(self):
        """The committed rope_delta (0 before any prefill)."""
        return self._int("vls_session_rope_delta")
