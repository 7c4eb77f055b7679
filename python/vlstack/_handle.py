"""The life of a C handle: use, close (idempotent, waits for calls in flight), children first."""
import threading
import weakref

from .errors import ClosedError


class Handle:
    """Owns one C handle. Subclasses set _kind and implement _free(handle).

    Every C call runs inside `with self._use() as h:`, which raises ClosedError after close().
    close() refuses new calls at once, waits for the calls in flight (C calls of this package
    never block for long), closes the children (sessions, batches and chats of a model), then
    frees the handle. The C ABI requires every child freed before its parent: a parent whose
    child is still alive but out of its reach (a child being finalized by the garbage
    collector) is freed right after that child instead. Closing twice is a no-op; so is closing
    from a finalizer.

    A child adopts its C handle while it holds its parent's _use() (so a parent closing
    concurrently waits for it and then closes it)."""
    _kind = "handle"

    def __init__(self, parent=None):
        self._h = None
        self._cv = threading.Condition()
        self._busy = 0
        self._children = weakref.WeakSet()
        self._live_children = 0  # adopted and not yet freed
        self._pending = None  # our handle, once closed, while children still live
        self._parent = parent  # a strong reference: the parent outlives the child
        if parent is not None:
            with parent._use():
                parent._children.add(self)

    def _adopt(self, handle):
        """Takes ownership of a created C handle. REQUIRES: the parent's _use() is held."""
        if self._parent is not None:
            with self._parent._cv:
                self._parent._live_children += 1
        self._h = handle

    class _Use:
        __slots__ = ("owner",)

        def __init__(self, owner):
            self.owner = owner

        def __enter__(self):
            o = self.owner
            with o._cv:
                if o._h is None:
                    raise ClosedError("this %s is closed" % o._kind)
                o._busy += 1
                return o._h

        def __exit__(self, *exc):
            o = self.owner
            with o._cv:
                o._busy -= 1
                if o._busy == 0:
                    o._cv.notify_all()
            return False

    def _use(self):
        return Handle._Use(self)

    @property
    def closed(self):
        return self._h is None

    def close(self):
        """Frees the C handle (children first). Safe to call twice, and from any thread."""
        cv = getattr(self, "_cv", None)
        if cv is None:  # __init__ did not get far
            return
        with cv:
            h = self._h
            if h is None:
                return
            self._h = None
            while self._busy:
                cv.wait()
        for child in list(self._children):
            child.close()
        with cv:
            if self._live_children > 0:
                self._pending = h
                return
        self._release(h)

    def _release(self, handle):
        self._free(handle)
        if self._parent is not None:
            self._parent._child_released()

    def _child_released(self):
        with self._cv:
            self._live_children -= 1
            if self._live_children > 0 or self._pending is None:
                return
            h, self._pending = self._pending, None
        self._release(h)

    def _free(self, handle):
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __del__(self):
        try:
            self.close()
        except Exception:  # pylint: disable=broad-except  # never raise from a finalizer
            pass
