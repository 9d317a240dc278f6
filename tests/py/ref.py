"""What the Python package's tests share: each rank's known input, numpy
references computed from every rank's input, the two array kits (numpy and
torch) and a checker that records failures without leaving the lock-step
of the ranks (a failed comparison never skips a collective)."""

import os
import traceback

import numpy as np


def progress_threads():
    """How many of this process's threads are shoal progress threads (shoal
    names them "shoal progress")."""
    n = 0
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/comm" % tid) as f:
                n += f.read().strip() == "shoal progress"
        except OSError:
            pass  # a thread that ended meanwhile
    return n


OPS = ("sum", "prod", "min", "max", "avg")
BITWISE = ("band", "bor", "bxor", "land", "lor", "lxor")
SIGNED = ("int8", "int32", "int64")
UNSIGNED = ("uint8", "uint32", "uint64")
INTEGER = SIGNED + UNSIGNED
FLOATS = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2")
# Relative error of one rounding, for the averages of the float types.
EPS = {"float16": 2.0 ** -10, "bfloat16": 2.0 ** -7, "float32": 2.0 ** -23,
       "float64": 2.0 ** -52, "float8_e4m3fn": 2.0 ** -3, "float8_e5m2": 2.0 ** -2}


def values(rank, count, dtype, op, salt):
    """Rank's input as float64 (exact in dtype): small integers whose sums
    and products over 4 ranks stay exact in every type (fp8 included)."""
    i = np.arange(count, dtype=np.int64)
    mix = i * 7 + rank * 5 + salt * 3
    if op == "prod":
        v = 1 + (mix % 3 == 0)
    elif dtype.startswith("float8"):
        v = mix % 2
    elif dtype in UNSIGNED or op in BITWISE:
        v = mix % 4 if dtype in UNSIGNED else mix % 11 - 5
    else:
        v = mix % 7 - 3
    return v.astype(np.float64)


def reduce_ref(inputs, op, dtype):
    """The expected result (float64, or the integer type for bit ops) of op
    over the ranks' inputs (float64 arrays)."""
    n = len(inputs)
    a = np.stack(inputs) if inputs[0].size else np.zeros((n, 0))
    if op == "sum":
        return a.sum(axis=0)
    if op == "prod":
        return a.prod(axis=0)
    if op == "min":
        return a.min(axis=0)
    if op == "max":
        return a.max(axis=0)
    if op == "avg":
        s = a.sum(axis=0)
        if dtype in INTEGER:
            return np.sign(s) * (np.abs(s) // n)
        return s / n
    ints = a.astype(np.int64)
    if op in ("band", "bor", "bxor"):
        fn = {"band": np.bitwise_and, "bor": np.bitwise_or, "bxor": np.bitwise_xor}[op]
        r = fn.reduce(ints, axis=0) if ints.size else ints.sum(axis=0)
        # The bits of dtype's width, read back as dtype reads them.
        return r.astype(dtype).astype(np.float64)
    truth = ints != 0
    if op == "land":
        r = truth.all(axis=0)
    elif op == "lor":
        r = truth.any(axis=0)
    else:
        r = truth.sum(axis=0) % 2 == 1
    return r.astype(np.float64)


class NumpyKit:
    name = "numpy"

    def __init__(self):
        self.dtypes = [d for d in INTEGER + FLOATS if self._has(d)]

    @staticmethod
    def _has(name):
        try:
            np.dtype(name)
            return True
        except TypeError:
            return False

    def make(self, v, dtype):
        return np.array(v, dtype=np.float64).astype(dtype)

    def full(self, count, dtype, fill=77):
        return np.full(count, fill, dtype=np.float64).astype(dtype)

    def f64(self, arr):
        return np.asarray(arr).astype(np.float64)

    def copy(self, arr):
        return arr.copy()


class TorchKit:
    name = "torch"

    def __init__(self):
        import torch
        self.torch = torch
        self.dtypes = [d for d in INTEGER + FLOATS
                       if isinstance(getattr(torch, d, None), torch.dtype)]

    def make(self, v, dtype):
        return self.torch.from_numpy(np.array(v, dtype=np.float64)).to(getattr(self.torch, dtype))

    def full(self, count, dtype, fill=77):
        return self.torch.full((count,), fill, dtype=getattr(self.torch, dtype))

    def f64(self, t):
        return t.to(self.torch.float64).numpy()

    def copy(self, t):
        return t.clone()


class Checker:
    """Counts checks and keeps the first failures' descriptions."""

    def __init__(self, label):
        self.label = label
        self.checks = 0
        self.failures = []

    def fail(self, what):
        if len(self.failures) < 20:
            self.failures.append("%s: %s" % (self.label, what))

    def ok(self, cond, what):
        self.checks += 1
        if not cond:
            self.fail(what)
        return cond

    def eq(self, got, want, what, dtype=None, op=None):
        """got (float64 array) equals want, exactly; within the rounding of
        an average where op is avg on a float dtype."""
        self.checks += 1
        got = np.asarray(got, dtype=np.float64).reshape(-1)
        want = np.asarray(want, dtype=np.float64).reshape(-1)
        if got.shape != want.shape:
            self.fail("%s: %d elements, expected %d" % (what, got.size, want.size))
            return False
        if op == "avg" and dtype in EPS:
            bad = np.abs(got - want) > 4 * EPS[dtype] * np.abs(want) + 1e-300
        else:
            bad = got != want
        if bad.any():
            i = int(np.argmax(bad))
            self.fail("%s: element %d is %r, expected %r (%d wrong of %d)"
                      % (what, i, got[i], want[i], int(bad.sum()), got.size))
            return False
        return True

    def raises(self, exc, fn, what, *words):
        """fn() raises exc whose text contains every word."""
        self.checks += 1
        try:
            fn()
        except exc as e:
            text = str(e)
            missing = [w for w in words if w not in text]
            if missing:
                self.fail("%s: %s(%s) lacks %s" % (what, type(e).__name__, text, missing))
                return None
            return e
        except Exception as e:  # noqa: BLE001 (the wrong exception is the failure)
            self.fail("%s: %s instead of %s: %s" % (what, type(e).__name__, exc.__name__, e))
            return None
        self.fail("%s: no %s raised" % (what, exc.__name__))
        return None


def describe_exception():
    return traceback.format_exc()
