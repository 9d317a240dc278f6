"""Non-blocking operations in flight."""

import ctypes
import threading

from . import _lib
from .errors import ShoalError, last_error


class Request:
    """An operation started with async_op=True.

    The request holds the operation's buffers (and its all-to-all-v arrays)
    until it completes, so they stay alive even if the caller drops them.
    wait() blocks until completion (within the operation's deadline) and
    returns the operation's output (None where it has none); test() polls.
    Both raise ShoalError if the operation failed, and keep doing so.
    Either may be called again after completion, from any thread.
    """

    def __init__(self, comm, handle, call, keep, result, finish=None):
        self._comm = comm
        self._handle = handle  # ctypes.c_void_p, NULL once completed
        self._call = call
        self._keep = keep
        self._result = result
        self._finish = finish
        self._error = None
        self._done = False
        self._lock = threading.Lock()

    def _complete(self, status):
        """Record completion (the C request is freed); under self._lock."""
        self._done = True
        if status != 0:
            handle = self._comm._handle if self._comm is not None else None
            self._error = ShoalError(status, last_error(handle), self._call)
        elif self._finish is not None:
            self._finish()
        self._keep = None
        self._finish = None
        if self._comm is not None:
            self._comm._forget(self)

    def _raise_or_result(self):
        if self._error is not None:
            raise self._error
        return self._result

    def wait(self):
        """Block until the operation completes; return its output."""
        with self._lock:
            if not self._done:
                self._complete(_lib.lib().shoal_wait(ctypes.byref(self._handle)))
            return self._raise_or_result()

    def test(self):
        """True once the operation completed (raising if it failed)."""
        with self._lock:
            if not self._done:
                done = ctypes.c_int(0)
                status = _lib.lib().shoal_test(ctypes.byref(self._handle), ctypes.byref(done))
                if not done.value:
                    if status != 0:
                        # The request itself was refused: nothing completes it.
                        self._complete(status)
                    else:
                        return False
                else:
                    self._complete(status)
            self._raise_or_result()
            return True

    @property
    def done(self):
        """Whether completion was seen (by wait or test); does not poll."""
        return self._done

    def __repr__(self):
        state = "failed" if self._error else "done" if self._done else "pending"
        return "<shoal.Request %s %s>" % (self._call, state)
