"""Compressed all-reduce with error feedback and checkpoints
(shoal_compressor_*)."""

import collections
import ctypes

from . import _lib, buffers, dtypes
from .buffers import as_buffer, optional
from .closing import Closing
from .errors import check

KINDS = {"int8": 1, "ternary": 2, "powersgd": 3, "sign": 4, "majority": 5, "int4": 6,
         "adaptive": 7}
ALGOS = {"auto": 0, "ring": 1, "two_shot": 2, "tree": 3}
DTYPES = (dtypes.DType.FLOAT32, dtypes.DType.FLOAT16, dtypes.DType.BFLOAT16)

# What one compressed call did on this rank (shoal_compress_info_t).
CompressInfo = collections.namedtuple("CompressInfo",
                                      "bytes_sent bytes_received ratio step error")

# The options set by keyword: name -> Python type (None keeps shoal's default).
_OPTIONS = {
    "error_feedback": bool, "block": int, "stochastic": bool, "clip_sigma": float,
    "rank": int, "warmup_steps": int, "seed": int, "budget": float, "window": int,
}


def _choice(value, table, name):
    key = value.lower() if isinstance(value, str) else None
    if key not in table:
        raise ValueError("%s: %r is not one of %s" % (name, value, ", ".join(table)))
    return table[key]


def _layout(layout):
    """A CompressLayout (and its arrays) from [(rows, cols), ...], and its
    count."""
    try:
        shapes = [(int(r), int(c)) for r, c in layout]
    except (TypeError, ValueError):
        raise TypeError("layout: expected a sequence of (rows, cols) pairs") from None
    if any(r < 0 or c < 0 for r, c in shapes):
        raise ValueError("layout: negative size")
    rows = (ctypes.c_size_t * len(shapes))(*(r for r, _ in shapes))
    cols = (ctypes.c_size_t * len(shapes))(*(c for _, c in shapes))
    lay = _lib.CompressLayout(len(shapes), rows, cols)
    return lay, (lay, rows, cols), sum(r * c for r, c in shapes)


class Compressor(Closing):
    """A compressor for one tensor or bucket of count values of dtype on
    comm: its error-feedback residual, PowerSGD's Q, the step counter.

    kind: "int8", "ternary" or "powersgd". The options (None: shoal's
    default, see shoal.h): error_feedback, block (32, 64, 128; int8 and
    ternary), stochastic (int8), clip_sigma (ternary), rank and
    warmup_steps (powersgd), seed, algo ("auto", "ring", "two_shot",
    "tree"). layout: the bucket's matrices as (rows, cols) pairs, row-major
    one after the other (powersgd compresses each matrix); count may then be
    left out. Collective over comm: every rank passes the same arguments.
    """

    def __init__(self, comm, kind, count=None, dtype="float32", *, layout=None, algo=None,
                 **options):
        self._handle = None  # until created: __del__ has nothing to free
        handle = comm._live()
        opts = _lib.CompressOptions()
        lib = _lib.lib()
        check(lib.shoal_compress_options_init(ctypes.byref(opts), _choice(kind, KINDS, "kind")),
              None, "compress_options_init")
        for name, value in options.items():
            if name not in _OPTIONS:
                raise TypeError("%s: not an option of Compressor (%s)"
                                % (name, ", ".join(sorted(_OPTIONS) + ["algo", "layout"])))
            if value is not None:
                setattr(opts, name, _OPTIONS[name](value))
        if algo is not None:
            opts.algo = _choice(algo, ALGOS, "algo")
        self._dtype = dtypes.parse(dtype)
        if self._dtype not in DTYPES:
            raise TypeError("dtype: %s; a compressor takes float32, float16 or bfloat16"
                            % self._dtype.name.lower())
        lay, self._layout_keep = None, None
        if layout is not None:
            lay, self._layout_keep, total = _layout(layout)
            if count is None:
                count = total
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise TypeError("count: expected an int >= 0 (or a layout), got %r" % (count,))
        comp = ctypes.c_void_p()
        check(lib.shoal_compressor_create(handle, ctypes.byref(opts), count, self._dtype,
                                          ctypes.byref(lay) if lay is not None else None,
                                          ctypes.byref(comp)), handle, "compressor_create")
        self._comm = comm
        self._handle = comp.value
        self._count = count
        self._kind = kind.lower()
        self._inflight = None
        self.last_info = None

    @property
    def count(self):
        return self._count

    @property
    def dtype(self):
        return self._dtype

    @property
    def kind(self):
        return self._kind

    def _live(self):
        if self._handle is None:
            raise ValueError("the compressor is closed")
        return self._handle

    def _settle(self):
        """Wait for the call in flight, if any (its failure stays with it)."""
        req, self._inflight = self._inflight, None
        if req is not None and not req.done:
            try:
                req.wait()
            except Exception:  # noqa: BLE001 (the request keeps and re-raises it)
                pass

    def all_reduce(self, send, recv=None, *, op="sum", async_op=False):
        """Compressed all-reduce of send (count values of the compressor's
        dtype) into recv, in place without recv; op "sum" or "avg". Every
        rank gets bitwise the same result. last_info gives the call's
        CompressInfo once it completed."""
        comp = self._live()
        s = as_buffer(send, "send")
        r = optional(recv, "recv")
        if r is None:
            r = s
        for b in (s, r):
            if b.dtype != self._dtype:
                raise TypeError("%s: %s, where the compressor takes %s"
                                % (b.name, b.dtype.name.lower(), self._dtype.name.lower()))
            buffers.need_count(b, self._count, "the compressor's count")
        r.need_writable()
        op = dtypes.parse_op(op)
        if op not in (dtypes.Op.SUM, dtypes.Op.AVG):
            raise ValueError("op: %s; a compressor takes sum or avg" % op.name.lower())
        info = _lib.CompressInfo()

        def finish():
            self.last_info = CompressInfo(info.bytes_sent, info.bytes_received, info.ratio,
                                          info.step, info.error)

        comm = self._comm
        args = (comp, s.ptr, r.ptr, op, ctypes.byref(info))
        result = comm._run("compressor.all_reduce", "shoal_allreduce_compressed",
                           "shoal_iallreduce_compressed", args, async_op, (s, r, info),
                           r.obj, finish)
        if async_op:
            self._inflight = result
        return result

    def state_dict(self):
        """The compressor's state (step, residuals, Q) as bytes, for a
        checkpoint; only a compressor of the same arguments and rank count
        takes it back. Local."""
        comp = self._live()
        self._settle()
        lib = _lib.lib()
        size = ctypes.c_size_t()
        check(lib.shoal_compressor_state_size(comp, ctypes.byref(size)), None,
              "compressor_state_size")
        buf = ctypes.create_string_buffer(size.value)
        check(lib.shoal_compressor_get_state(comp, buf, size.value), None,
              "compressor_get_state")
        return buf.raw

    def load_state_dict(self, state):
        """Restore a state of state_dict(). Local."""
        comp = self._live()
        self._settle()
        if not isinstance(state, (bytes, bytearray, memoryview)):
            raise TypeError("state: expected the bytes of state_dict(), got %s"
                            % type(state).__name__)
        data = bytes(state)
        lib = _lib.lib()
        size = ctypes.c_size_t()
        check(lib.shoal_compressor_state_size(comp, ctypes.byref(size)), None,
              "compressor_state_size")
        if len(data) != size.value:
            raise ValueError("state: %d bytes, where this compressor's state has %d (another "
                             "kind, count, layout or rank count?)" % (len(data), size.value))
        check(lib.shoal_compressor_set_state(comp, data, len(data)), None,
              "compressor_set_state")

    def reset(self):
        """Back to the state of a new compressor. Local."""
        comp = self._live()
        self._settle()
        check(_lib.lib().shoal_compressor_reset(comp), None, "compressor_reset")

    def close(self):
        """Wait for the call in flight, if any, and free the compressor."""
        if self._handle is None:
            return
        self._settle()
        # Forgotten only once freed: a refused destroy keeps the handle.
        check(_lib.lib().shoal_compressor_destroy(self._handle), None, "compressor_destroy")
        self._handle = None

    def __repr__(self):
        return "<shoal.Compressor %s, %d x %s%s>" % (
            self._kind, self._count, self._dtype.name.lower(),
            " closed" if self._handle is None else "")
