"""vlstack.Batch: the continuous-batch engine (vls_batch_*), its events and streams."""
import collections
import ctypes
import dataclasses
import enum
import json
import threading
import time

from . import _lib
from ._handle import Handle
from ._tensor import descriptor, float32_array, int32_array, ref
from .errors import FailedPreconditionError, NotFoundError, OutOfRangeError, check, invalid
from .session import deepstack_arrays, mode_of, positions_array

_EVENTS = 256  # events moved out of the C buffer per call
_WAIT_SLICE_MS = 50  # the longest one C wait of this package blocks (close() waits for it)


class FinishReason(enum.IntEnum):
    """vls_finish_reason."""
    NONE = 0  # the request goes on
    STOP = 1  # an EOS token or a stop string
    LENGTH = 2  # max_new_tokens reached
    CANCELLED = 3  # Batch.cancel; token -1
    ERROR = 4  # a failure inside the engine; token -1 (Batch.request_error says why)


@dataclasses.dataclass(frozen=True)
class Event:
    """One vls_token_event. `text`: in Batch.stream of a chat request, the text that became
    final with this event (possibly ""); None otherwise."""
    request_id: int
    token: int
    finish_reason: FinishReason
    text: str = None

    @property
    def finished(self):
        return self.finish_reason != FinishReason.NONE


@dataclasses.dataclass(frozen=True)
class Result:
    """A finished request: its tokens (the finish event's included, when it has one), why it
    finished and, for a chat request, its whole text."""
    request_id: int
    tokens: list
    finish_reason: FinishReason
    text: str = None


_INT_FIELDS = ("max_new_tokens", "top_k")
_FLOAT_FIELDS = ("temperature", "top_p", "min_p", "repetition_penalty", "presence_penalty",
                 "frequency_penalty")


def request_options(where, options):
    """vls_request_options from keyword arguments: max_new_tokens, ignore_eos, temperature,
    top_k, top_p, min_p, repetition_penalty, presence_penalty, frequency_penalty, seed (None:
    derived from the request id). Absent ones keep vls_request_default_options(); the engine
    checks the values and names a bad one."""
    o = _lib.lib().vls_request_default_options()
    for name, value in options.items():
        if name in _INT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, int) or not -2**31 <= value < 2**31:
                raise invalid("%s: %s=%r is not an int32" % (where, name, value))
            setattr(o, name, value)
        elif name in _FLOAT_FIELDS:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise invalid("%s: %s=%r is not a number" % (where, name, value))
            setattr(o, name, float(value))
        elif name == "ignore_eos":
            o.ignore_eos = 1 if value else 0
        elif name == "seed":
            if value is not None:
                if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**64:
                    raise invalid("%s: seed=%r is not a uint64" % (where, value))
                o.has_seed, o.seed = 1, value
        else:
            raise TypeError("%s: unknown request option %r" % (where, name))
    o.struct_size = ctypes.sizeof(o)
    return o


class Batch(Handle):
    """Many requests over one Model: B slots (the model's `slots`) and a FIFO queue.

    Submit requests (submit_tokens, submit_embeddings, submit_deepstack, submit_chat), then
    either drive the engine on the calling thread (step, admit, run_until_idle) or let the
    batch's own thread run it (start/stop), and read events: low-level with step/admit/poll/
    wait, or per request with stream(id) / result(id) / generate(...).

    Events are moved out of the C handle once. stream(id) readers and the low-level calls share
    them: a stream pumps the engine (step, or a short wait when the batch's thread runs) and
    keeps the events of other requests for their own streams or for the next step/poll/wait,
    which return every event no stream is reading. Every method may be called from any thread.
    """
    _kind = "vlstack.Batch"

    def __init__(self, model):
        super().__init__(model)
        self.model = model
        self._ev = threading.Condition()
        self._queue = collections.deque()  # moved out of C, not yet delivered
        self._readers = collections.Counter()  # request id -> open streams
        self._live = set()  # submitted here, no finish event moved out yet
        self._chats = set()  # chat requests whose text is not all taken
        self._pumping = False
        self._threaded = False
        self._chat_users = []  # the Chats submitted to: each is freed only after this batch
        h = ctypes.c_void_p()
        with model._use() as mh:
            check(_lib.lib().vls_batch_create(mh, ctypes.byref(h)))
            self._adopt(h)

    def _free(self, handle):
        _lib.lib().vls_batch_free(handle)

    def _release(self, handle):
        users, self._chat_users = self._chat_users, []
        super()._release(handle)
        for chat in users:
            chat._child_released()

    # ---- submissions ------------------------------------------------------------------------

    def _submitted(self, rid, chat=False):
        with self._ev:
            self._live.add(rid)
            if chat:
                self._chats.add(rid)
        return rid

    def _submit(self, name, *args):
        out = ctypes.c_uint64()
        with self._use() as h:
            check(getattr(_lib.lib(), name)(h, *args, ctypes.byref(out)))
        return out.value

    def submit_tokens(self, tokens, *, positions=None, rope_delta=0, position_mode=None,
                      **options):
        """Queues token ids int [S] (1 <= S <= C); returns the request id. Options: see
        request_options (max_new_tokens, temperature, ...)."""
        where = "Batch.submit_tokens"
        info = self.model.info
        tok = int32_array(where, "tokens", tokens, (None,))
        pos = positions_array(where, info, positions, tok.shape[0])
        o = request_options(where, options)
        tt, pt = descriptor(tok), None if pos is None else descriptor(pos)
        with self._ev:  # the id is live before a running engine can finish it
            return self._submitted(self._submit(
                "vls_batch_submit_tokens", ctypes.byref(tt), mode_of(info, position_mode),
                ref(pt), int(rope_delta), ctypes.byref(o)))

    def submit_embeddings(self, embeddings, *, token_ids=None, positions=None, rope_delta=0,
                          position_mode=None, **options):
        """Queues input embeddings float32 [S, H] (token_ids: None, or the prompt's int [S]
        ids, which the repetition penalty then sees); returns the request id."""
        where = "Batch.submit_embeddings"
        info = self.model.info
        emb = float32_array(where, "embeddings", embeddings, (None, info.hidden))
        S = emb.shape[0]
        pos = positions_array(where, info, positions, S)
        ids = None if token_ids is None else int32_array(where, "token_ids", token_ids, (S,))
        o = request_options(where, options)
        et = descriptor(emb)
        pt = None if pos is None else descriptor(pos)
        it = None if ids is None else descriptor(ids)
        with self._ev:
            return self._submitted(self._submit(
                "vls_batch_submit_embeddings", ctypes.byref(et), mode_of(info, position_mode),
                ref(pt), int(rope_delta), ref(it), ctypes.byref(o)))

    def submit_deepstack(self, embeddings, visual_positions, features, layers=None, *,
                         token_ids=None, positions=None, rope_delta=0, position_mode=None,
                         **options):
        """Queues a DeepStack request (arguments as Session.prefill_deepstack); returns its id."""
        where = "Batch.submit_deepstack"
        info = self.model.info
        emb, vis, feat, lay, ids = deepstack_arrays(where, self.model, embeddings,
                                                    visual_positions, features, layers, token_ids)
        pos = positions_array(where, info, positions, emb.shape[0])
        o = request_options(where, options)
        ts = [descriptor(a) for a in (emb, vis, feat, lay)]
        pt = None if pos is None else descriptor(pos)
        it = None if ids is None else descriptor(ids)
        with self._ev:
            return self._submitted(self._submit(
                "vls_batch_submit_deepstack", ctypes.byref(ts[0]), mode_of(info, position_mode),
                ref(pt), int(rope_delta), ctypes.byref(ts[1]), ctypes.byref(ts[2]),
                ctypes.byref(ts[3]), ref(it), ctypes.byref(o)))

    def submit_chat(self, chat, request):
        """Queues a chat request: a dict (or its JSON text) as vls_batch_submit_chat takes it,
        {"messages": [...], "max_tokens": N, "temperature": T, "stop": [...], ...}; returns its
        id. Its text comes from take_text, or with its events from stream()."""
        text = request if isinstance(request, str) else json.dumps(request, ensure_ascii=False)
        if "\0" in text:
            raise invalid("Batch.submit_chat: the request holds a NUL character")
        with chat._use() as ch, self._ev:
            if all(c is not chat for c in self._chat_users):
                # The C chat must outlive this batch (its requests decode with its tokenizer).
                with chat._cv:
                    chat._live_children += 1
                self._chat_users.append(chat)
            return self._submitted(self._submit("vls_batch_submit_chat", ch,
                                                text.encode("utf-8", "surrogatepass")), chat=True)

    def cancel(self, request_id):
        """Cancels a queued or active request (one CANCELLED event follows). NotFoundError
        when the id is unknown or already finished."""
        with self._use() as h:
            check(_lib.lib().vls_batch_cancel(h, int(request_id)))

    # ---- stepping and events ----------------------------------------------------------------

    def _move(self, name, *args):
        """One event-moving C call (step, admit, poll, wait): the events it moved."""
        buf = (_lib.TokenEvent * _EVENTS)()
        n = ctypes.c_size_t()
        with self._use() as h:
            check(getattr(_lib.lib(), name)(h, *args, buf, _EVENTS, ctypes.byref(n)))
        return [Event(e.request_id, e.token, FinishReason(e.finish_reason))
                for e in buf[:n.value]]

    def _pump(self, name, *args):
        """Runs _move as the only mover, queues what it moved. REQUIRES: self._ev held."""
        while self._pumping:
            self._ev.wait()
        self._pumping = True
        moved = []
        self._ev.release()
        try:
            moved = self._move(name, *args)
        finally:
            self._ev.acquire()
            self._pumping = False
            self._queue.extend(moved)
            for e in moved:
                if e.finished:
                    self._live.discard(e.request_id)
            self._ev.notify_all()
        return moved

    def _unread(self):
        """Takes the queued events no stream reads. REQUIRES: self._ev held."""
        out = [e for e in self._queue if e.request_id not in self._readers]
        if out:
            self._queue = collections.deque(e for e in self._queue
                                            if e.request_id in self._readers)
        return out

    def step(self):
        """One engine step on this thread (admit queued requests, then one shared decode);
        returns the events no stream reads. FailedPreconditionError while the thread runs."""
        with self._ev:
            self._pump("vls_batch_step")
            return self._unread()

    def admit(self):
        """The admission half of a step alone (prefill and first token); returns events."""
        with self._ev:
            self._pump("vls_batch_admit")
            return self._unread()

    def poll(self):
        """The buffered events no stream reads, without stepping."""
        with self._ev:
            self._pump("vls_batch_poll")
            return self._unread()

    def wait(self, timeout=None):
        """As poll, but first waits up to `timeout` seconds (None: no limit) for an event; for
        a batch whose thread runs. Returns [] on timeout."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        with self._ev:
            while True:
                got = self._unread()
                if got:
                    return got
                left = 1.0 if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    self._pump("vls_batch_poll")
                    return self._unread()
                self._pump("vls_batch_wait", int(min(left * 1000, _WAIT_SLICE_MS)))

    def run_until_idle(self):
        """Steps until nothing is queued or active; the events stay buffered for poll/stream."""
        with self._use() as h:
            check(_lib.lib().vls_batch_run_until_idle(h))

    def start(self):
        """Starts the batch's own stepping thread (a no-op when it runs)."""
        with self._use() as h:
            check(_lib.lib().vls_batch_start(h))
        with self._ev:
            self._threaded = True
            self._ev.notify_all()

    def stop(self):
        """Stops and joins the batch's thread; requests stay, synchronous stepping resumes."""
        with self._use() as h:
            check(_lib.lib().vls_batch_stop(h))
        with self._ev:
            self._threaded = False
            self._ev.notify_all()

    # ---- per-request reading ----------------------------------------------------------------

    def _next_for(self, rid):
        """The next event of request rid, pumping the engine as needed; None once it has no
        more (finished and delivered, or unknown). REQUIRES: rid has a reader."""
        with self._ev:
            while True:
                for i, e in enumerate(self._queue):
                    if e.request_id == rid:
                        del self._queue[i]
                        return e
                if rid not in self._live:
                    return None
                if self._pumping:
                    self._ev.wait()
                    continue
                if self._threaded:
                    self._pump("vls_batch_wait", _WAIT_SLICE_MS)
                    continue
                try:
                    self._pump("vls_batch_step")
                except FailedPreconditionError:
                    if not self._threaded:  # not the thread started meanwhile: a real error
                        raise

    def stream(self, request_id):
        """Yields the request's events as they come (an Event per token; the last one
        finished). For a chat request each event carries the text that became final with it.
        Drives the engine on this thread unless the batch's thread runs."""
        rid = int(request_id)
        with self._ev:
            if rid not in self._live and all(e.request_id != rid for e in self._queue):
                raise NotFoundError("Batch.stream: request %d is unknown, finished or read" % rid)
        return self._stream(rid)

    def _stream(self, rid):
        with self._ev:
            self._readers[rid] += 1
            chat = rid in self._chats
        try:
            while True:
                e = self._next_for(rid)
                if e is None:
                    return
                if chat:
                    text, done = self.take_text(rid)
                    e = dataclasses.replace(e, text=text)
                    chat = not done
                yield e
                if e.finished:
                    return
        finally:
            with self._ev:
                self._readers[rid] -= 1
                if self._readers[rid] <= 0:
                    del self._readers[rid]

    def result(self, request_id):
        """Reads the request to its end: a Result (tokens, finish_reason, text)."""
        tokens, texts, finish = [], [], FinishReason.NONE
        for e in self.stream(request_id):
            if e.token >= 0:
                tokens.append(e.token)
            if e.text is not None:
                texts.append(e.text)
            finish = e.finish_reason
        chat = bool(texts) or int(request_id) in self._chats
        return Result(int(request_id), tokens, finish, "".join(texts) if chat else None)

    def generate(self, tokens, **options):
        """Submits token ids (options as submit_tokens) and yields the generated ids."""
        for e in self.stream(self.submit_tokens(tokens, **options)):
            if e.token >= 0:
                yield e.token

    def take_text(self, request_id):
        """Moves out a chat request's text produced so far: (text, finished). NotFoundError
        for ids that are not chat requests, or once all the text has been taken."""
        rid = int(request_id)
        lib = _lib.lib()
        needed = ctypes.c_size_t()
        finished = ctypes.c_int32()
        size = 1024
        with self._use() as h:
            while True:
                buf = ctypes.create_string_buffer(size)
                st = lib.vls_batch_take_text(h, rid, buf, size, ctypes.byref(needed),
                                             ctypes.byref(finished))
                if st == OutOfRangeError.code and needed.value > size:
                    size = needed.value + 1024  # it may grow before the next call
                    continue
                check(st)
                break
        if finished.value:
            with self._ev:
                self._chats.discard(rid)
        return buf.raw[:needed.value - 1].decode("utf-8"), bool(finished.value)

    # ---- queries ----------------------------------------------------------------------------

    def _query(self, name, ctype):
        out = ctype()
        with self._use() as h:
            check(getattr(_lib.lib(), name)(h, ctypes.byref(out)))
        return out.value

    @property
    def pending_count(self):
        """Queued requests."""
        return self._query("vls_batch_pending_count", ctypes.c_size_t)

    @property
    def active_count(self):
        """Admitted, unfinished requests."""
        return self._query("vls_batch_active_count", ctypes.c_size_t)

    @property
    def pending_bytes(self):
        """Bytes the queued requests own."""
        return self._query("vls_batch_pending_bytes", ctypes.c_uint64)

    @property
    def buffered_count(self):
        """Events buffered in the C handle, not yet moved out."""
        return self._query("vls_batch_buffered_count", ctypes.c_size_t)

    def next_coordinate(self, request_id):
        """The (t, h, w) RoPE coordinate of an active request's next decode."""
        out = (ctypes.c_int32 * 3)()
        with self._use() as h:
            check(_lib.lib().vls_batch_next_coordinate(h, int(request_id), out))
        return tuple(out)

    def slot_of(self, request_id):
        """The slot in [0, B) an active request occupies."""
        out = ctypes.c_int32()
        with self._use() as h:
            check(_lib.lib().vls_batch_slot_of(h, int(request_id), ctypes.byref(out)))
        return out.value

    def request_error(self, request_id):
        """The message of a request that finished with ERROR (NotFoundError when none)."""
        lib = _lib.lib()
        needed = ctypes.c_size_t()
        with self._use() as h:
            st = lib.vls_batch_request_error(h, int(request_id), None, 0, ctypes.byref(needed))
            if st != OutOfRangeError.code:
                check(st)
            buf = ctypes.create_string_buffer(needed.value)
            check(lib.vls_batch_request_error(h, int(request_id), buf, needed.value, None))
        return buf.value.decode("utf-8", "replace")
