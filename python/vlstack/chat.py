"""vlstack.Chat: a model's front end (tokenizer.json, chat template, end-of-turn ids, images and
videos)."""
import ctypes
import json
import os

import numpy as np

from . import _lib
from ._handle import Handle
from ._tensor import int32_array
from .errors import NotFoundError, OutOfRangeError, UnimplementedError, check


def _need(name):
    if not _lib.has(name):
        raise UnimplementedError("%s lacks %s (a build from before it was added to ABI 1)"
                                 % (_lib.library_path(), name))
    return getattr(_lib.lib(), name)


def _text_call(fn, h, *args):
    """Calls a vls_* function with the (buf, len, needed) text protocol; returns the text."""
    needed = ctypes.c_size_t()
    size = 4096
    while True:
        buf = ctypes.create_string_buffer(size)
        st = fn(h, *args, buf, size, ctypes.byref(needed))
        if st == OutOfRangeError.code and needed.value > size:
            size = needed.value
            continue
        check(st)
        return buf.raw[:needed.value - 1].decode("utf-8")


class Chat(Handle):
    """The front end read from a model folder (vls_chat_create): tokenize, detokenize, render
    the chat template, and generate text with Batch.submit_chat. Immutable: one Chat may serve
    any number of batches of its model from any thread. `path` defaults to model.path."""
    _kind = "vlstack.Chat"

    def __init__(self, model, path=None):
        super().__init__(model)
        self.model = model
        self.path = os.fspath(model.path if path is None else path)
        h = ctypes.c_void_p()
        with model._use() as mh:
            check(_lib.lib().vls_chat_create(mh, os.fsencode(self.path), ctypes.byref(h)))
            self._adopt(h)

    def _free(self, handle):
        _lib.lib().vls_chat_free(handle)

    def tokenize(self, text):
        """The token ids of `text` (str, or bytes: UTF-8, invalid sequences become U+FFFD) as
        an int32 ndarray, exactly as Hugging Face tokenizers encodes it; special tokens written
        in the text are recognised and nothing is added around it."""
        fn = _need("vls_chat_tokenize")
        data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
        count = ctypes.c_size_t()
        capacity = len(data) + 16
        with self._use() as h:
            while True:
                ids = np.empty(capacity, dtype=np.int32)
                st = fn(h, data, len(data), ids.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                        capacity, ctypes.byref(count))
                if st == OutOfRangeError.code and count.value > capacity:
                    capacity = count.value
                    continue
                check(st)
                return ids[:count.value].copy()

    def detokenize(self, ids, skip_special_tokens=False):
        """The text of token ids (each in [0, V)); special tokens kept unless
        skip_special_tokens."""
        fn = _need("vls_chat_detokenize")
        arr = int32_array("Chat.detokenize", "ids", ids, (None,))
        with self._use() as h:
            return _text_call(fn, h, arr.ctypes.data_as(ctypes.POINTER(ctypes.c_int32)),
                              arr.shape[0], 1 if skip_special_tokens else 0)

    def render(self, request):
        """The prompt text submit_chat tokenizes for `request` (a dict or its JSON text)."""
        fn = _need("vls_chat_render")
        text = request if isinstance(request, str) else json.dumps(request, ensure_ascii=False)
        with self._use() as h:
            return _text_call(fn, h, text.encode("utf-8", "surrogatepass"))

    @staticmethod
    def request(prompt, system=None, **fields):
        """A chat request dict: `prompt` is a str (one user message) or a list of messages;
        `fields` are the request's other keys (max_tokens, temperature, stop, ...)."""
        if isinstance(prompt, str):
            messages = [{"role": "user", "content": prompt}]
        else:
            messages = list(prompt)
        if system is not None:
            messages.insert(0, {"role": "system", "content": system})
        return dict(fields, messages=messages)

    def generate(self, prompt, *, batch=None, system=None, **fields):
        """Yields the reply's text as it is produced (non-empty pieces). `prompt`, `system`
        and `fields` as Chat.request. `batch`: a Batch of this chat's model to run on (its own
        thread, if started, else this thread drives it); None makes a temporary one."""
        own = batch is None
        if own:
            from .batch import Batch  # pylint: disable=import-outside-toplevel
            batch = Batch(self.model)
        rid, done = None, False
        try:
            rid = batch.submit_chat(self, self.request(prompt, system, **fields))
            for e in batch.stream(rid):
                done = e.finished
                if e.text:
                    yield e.text
        finally:
            if own:
                batch.close()
            elif rid is not None and not done and not batch.closed:
                try:  # the consumer stopped early: free the request's slot
                    batch.cancel(rid)
                except NotFoundError:
                    pass
