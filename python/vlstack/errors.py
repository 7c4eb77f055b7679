"""VlsError and one subclass per vls_status.

Every failing C call raises the subclass of its status, carrying .status (the name
vls_status_name gives, e.g. "INVALID_ARGUMENT"), .code (the vls_status value) and .message
(vls_last_error(), read on the calling thread right after the call; it names the C function, the
tensor or field, and the rule that failed). The checks this package makes itself before calling
(dtypes, ranks, shapes, closed objects) raise the same classes with the same attributes.
"""
from . import _lib


class VlsError(Exception):
    """A vlstack call failed. .status: the status name; .code: its value; .message: why."""
    code = -1
    status = "UNKNOWN"

    def __init__(self, message, code=None, status=None):
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        if status is not None:
            self.status = status

    def __str__(self):
        return "%s: %s" % (self.status, self.message)


class InvalidArgumentError(VlsError, ValueError):
    """An argument breaks a documented rule (VLS_ERR_INVALID_ARGUMENT)."""
    code, status = 1, "INVALID_ARGUMENT"


class NotFoundError(VlsError, LookupError):
    """A named file, tensor, key or request is absent (VLS_ERR_NOT_FOUND)."""
    code, status = 2, "NOT_FOUND"


class DataLossError(VlsError):
    """A file is corrupt, truncated or lies about itself (VLS_ERR_DATA_LOSS)."""
    code, status = 3, "DATA_LOSS"


class OutOfRangeError(VlsError):
    """An index or size exceeds a static bound or a buffer (VLS_ERR_OUT_OF_RANGE)."""
    code, status = 4, "OUT_OF_RANGE"


class FailedPreconditionError(VlsError):
    """The object is in the wrong state for the call (VLS_ERR_FAILED_PRECONDITION)."""
    code, status = 5, "FAILED_PRECONDITION"


class ClosedError(FailedPreconditionError):
    """The model, session, batch or chat was closed."""


class UnimplementedError(VlsError, NotImplementedError):
    """A recognised but unsupported feature (VLS_ERR_UNIMPLEMENTED)."""
    code, status = 6, "UNIMPLEMENTED"


class InternalError(VlsError):
    """A bug in vlstack; never caused by input (VLS_ERR_INTERNAL)."""
    code, status = 7, "INTERNAL"


class IoError(VlsError):
    """The operating system refused a file operation (VLS_ERR_IO)."""
    code, status = 8, "IO_ERROR"


class ResourceExhaustedError(VlsError, MemoryError):
    """Out of memory, slots or capacity (VLS_ERR_RESOURCE_EXHAUSTED)."""
    code, status = 9, "RESOURCE_EXHAUSTED"


class CancelledError(VlsError):
    """VLS_ERR_CANCELLED."""
    code, status = 10, "CANCELLED"


_BY_CODE = {c.code: c for c in (InvalidArgumentError, NotFoundError, DataLossError,
                                 OutOfRangeError, FailedPreconditionError, UnimplementedError,
                                 InternalError, IoError, ResourceExhaustedError, CancelledError)}


def status_name(code):
    """vls_status_name(code): "INVALID_ARGUMENT", ..., "UNKNOWN" outside vls_status."""
    return _lib.lib().vls_status_name(code).decode()


def error_for(code, message):
    """The VlsError subclass instance for a non-OK status code."""
    cls = _BY_CODE.get(code, VlsError)
    return cls(message, code=code, status=status_name(code))


def check(code):
    """Raises the error of a vls_status returned by the call just made on this thread."""
    if code != 0:
        raw = _lib.lib().vls_last_error()
        raise error_for(code, raw.decode("utf-8", "replace") if raw else "")


def invalid(message):
    """An InvalidArgumentError raised by the package's own checks."""
    return InvalidArgumentError(message)
