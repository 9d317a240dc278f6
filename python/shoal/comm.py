"""Communicators: how one is formed, split, closed and aborted.

The collectives themselves are in collectives.py, which this class mixes
in; each checks its arguments in Python before calling shoal, so that a bad
argument raises on its rank without any rank entering the collective.
"""

import ctypes
import threading

from . import _lib
from .closing import Closing
from .collectives import Collectives
from .errors import ShoalError, Status, check, last_error
from .request import Request

SPLIT_NOCOLOR = -1


def get_unique_id():
    """A new rendezvous id (bytes). The calling process becomes the root: it
    must be the one that joins with rank 0 (Communicator.from_unique_id).
    Treat the id as a password: whoever holds it may join."""
    uid = _lib.UniqueId()
    check(_lib.lib().shoal_get_unique_id(ctypes.byref(uid)), None, "get_unique_id")
    return bytes(uid.bytes)


class Communicator(Collectives, Closing):
    """A group of ranks that run collectives together (shoal_comm_t).

    Make one with from_unique_id or from_env (or split); release it with
    close() (or a with block) or abort(). Calls on one communicator may come
    from several threads (shoal queues them in issue order, which every rank
    must agree on); abort() may come from any thread at any time.
    """

    def __init__(self, handle):
        """Private: use from_unique_id, from_env or split."""
        self._handle = handle
        self._pending = set()
        self._lock = threading.Lock()
        lib = _lib.lib()
        value = ctypes.c_int()
        check(lib.shoal_comm_rank(handle, ctypes.byref(value)), handle, "comm_rank")
        self._rank = value.value
        check(lib.shoal_comm_size(handle, ctypes.byref(value)), handle, "comm_size")
        self._size = value.value

    @classmethod
    def from_unique_id(cls, nranks, uid, rank):
        """Join the communicator of nranks ranks whose id is uid (from
        get_unique_id on rank 0) as rank. Collective over all of them;
        blocks until they have all arrived (or the deadline)."""
        if not isinstance(uid, (bytes, bytearray)) or len(uid) != _lib.UNIQUE_ID_BYTES:
            raise ValueError("uid: expected the %d bytes of get_unique_id()"
                             % _lib.UNIQUE_ID_BYTES)
        for name, value in (("nranks", nranks), ("rank", rank)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError("%s: expected an int, got %s" % (name, type(value).__name__))
        if nranks < 1 or not 0 <= rank < nranks:
            raise ValueError("rank %d does not fit nranks %d" % (rank, nranks))
        cid = _lib.UniqueId.from_buffer_copy(bytes(uid))
        handle = ctypes.c_void_p()
        check(_lib.lib().shoal_comm_init(nranks, ctypes.byref(cid), rank, ctypes.byref(handle)),
              None, "comm_init")
        return cls(handle.value)

    @classmethod
    def from_env(cls):
        """Join the communicator the launcher describes: torchrun (RANK,
        WORLD_SIZE, MASTER_ADDR; shoal listens on SHOAL_PORT, default
        MASTER_PORT+1), mpirun or srun (PMIx, or their rank variables with
        SHOAL_ADDR or MASTER_ADDR), or SHOAL_RANK/SHOAL_SIZE/SHOAL_ADDR.
        Without PMIx every rank needs the same SHOAL_SECRET_FILE or
        SHOAL_SECRET (see shoal.h, shoal_comm_init_env)."""
        handle = ctypes.c_void_p()
        check(_lib.lib().shoal_comm_init_env(ctypes.byref(handle)), None, "comm_init_env")
        return cls(handle.value)

    @property
    def rank(self):
        return self._rank

    @property
    def size(self):
        return self._size

    @property
    def closed(self):
        return self._handle is None

    @property
    def last_error(self):
        """shoal's reason for the last failure on this communicator."""
        return last_error(self._handle)

    def set_progress(self, mode):
        """Who runs this communicator's non-blocking operations: "thread"
        (a progress thread of its own, the default unless SHOAL_PROGRESS
        says otherwise) or "caller" (whichever thread waits or tests one of
        its requests, or makes a blocking call on it, running what was
        issued before too). "caller" suits a program with a thread that
        waits every request it issues: it spares each operation the
        progress thread's wake-ups. Only while no operation is in flight
        and the progress thread has not started (it starts at the first
        non-blocking call made in "thread" mode): ShoalError otherwise."""
        modes = {"thread": 0, "caller": 1}
        if mode not in modes:
            raise ValueError('mode: expected "thread" or "caller", got %r' % (mode,))
        handle = self._live()
        check(_lib.lib().shoal_comm_set_progress(handle, modes[mode]), handle,
              "comm_set_progress")

    def async_error(self):
        """None while the communicator is healthy, else the ShoalError that
        broke it (a dead peer, a failure another rank reported, an abort);
        does not wait."""
        status = ctypes.c_int()
        handle = self._live()
        check(_lib.lib().shoal_comm_get_async_error(handle, ctypes.byref(status)), handle,
              "comm_get_async_error")
        return ShoalError(status.value, last_error(handle)) if status.value else None

    def split(self, color, key=0):
        """A new communicator of the ranks that pass the same color, ordered
        by (key, rank); None for a rank passing color None. Collective."""
        if color is None:
            color = SPLIT_NOCOLOR
        for name, value in (("color", color), ("key", key)):
            if not isinstance(value, int) or isinstance(value, bool):
                raise TypeError("%s: expected an int, got %s" % (name, type(value).__name__))
        if color < 0 and color != SPLIT_NOCOLOR:
            raise ValueError("color: %d; a color is >= 0, or None to join no new "
                             "communicator" % color)
        handle = self._live()
        new = ctypes.c_void_p()
        check(_lib.lib().shoal_comm_split(handle, color, key, ctypes.byref(new)), handle, "split")
        return Communicator(new.value) if new.value else None

    def close(self):
        """Wait for this communicator's operations in flight, then release
        it. Their failures stay with their requests (wait() raises them);
        close itself does not raise for a broken communicator."""
        with self._lock:
            handle, pending = self._handle, list(self._pending)
        if handle is None:
            return
        for req in pending:
            try:
                req.wait()
            except ShoalError:
                pass
        with self._lock:
            if self._handle is None:  # another thread closed or aborted it meanwhile
                return
            self._handle = None
        _lib.lib().shoal_comm_destroy(handle)

    def abort(self):
        """Tear the communicator down at once, whatever its peers do; calls
        blocked in it on other threads raise ShoalError (ABORTED), and so do
        its pending requests."""
        with self._lock:
            handle, self._handle = self._handle, None
            pending = list(self._pending)
        if handle is None:
            return
        status = _lib.lib().shoal_comm_abort(handle)
        for req in pending:
            try:
                req.wait()
            except ShoalError:
                pass
        # TIMEOUT: calls of other threads were still inside; aborted anyway.
        if status not in (0, Status.TIMEOUT):
            check(status, None, "comm_abort")

    def __repr__(self):
        if self._handle is None:
            return "<shoal.Communicator closed>"
        return "<shoal.Communicator rank %d of %d>" % (self._rank, self._size)

    # ---- used by the collectives and requests ----

    def _live(self):
        handle = self._handle
        if handle is None:
            raise ValueError("the communicator is closed")
        return handle

    def _forget(self, req):
        with self._lock:
            self._pending.discard(req)

    def _run(self, call, fn, ifn, args, async_op, keep=(), result=None, finish=None):
        """Issue one operation: fn(*args) blocking, or ifn(*args, &req)."""
        handle = self._handle  # for the failure's reason
        lib = _lib.lib()
        if not async_op:
            check(getattr(lib, fn)(*args), handle, call)
            if finish is not None:
                finish()
            return result
        req = ctypes.c_void_p()
        check(getattr(lib, ifn)(*args, ctypes.byref(req)), handle, call)
        r = Request(self, req, call, keep, result, finish)
        with self._lock:
            self._pending.add(r)
        return r
