#!/usr/bin/python3
"""The c10d backend "shoal" (python/shoal/torch) checked against numpy.

Run by tests/test_py_torch.sh, with python/ on PYTHONPATH:

    python3 -m torch.distributed.run --nproc_per_node N ... torch_backend.py MODES
    python3 torch_backend.py --spawn N [--init file|tcp] [--world gloo] MODES

The first form takes torchrun's variables (env:// rendezvous); the second
starts N ranks itself with multiprocessing (spawn) over a FileStore or a
TCPStore. Each rank's inputs are a function of its rank, so every rank
computes every expected result with numpy from all the ranks' inputs; the
values are small integers, so that sums, products and their casts are
exact in every dtype, and only AVG and PREMUL_SUM (a division, a factor)
are compared to a tolerance.

MODES is one mode or several, comma-separated, run in turn by the same
ranks (errors and fault leave the group broken: they come last):
  collectives  every collective x dtype x op x size (0, 1, odd, a few
               KiB), in place and not; multi-MiB sizes; object collectives
  async        works waited in any order, their futures and callbacks,
               a wait that times out
  ddp          DistributedDataParallel: parameters equal after every step
  groups       new_group of subsets (with backend "shoal" also under a
               gloo world: --world gloo); ranks outside go on
  errors       the backend's refusals, each leaving the group usable,
               then one rank's tensor of another shape: shoal's mismatch
  fault        the last rank exits after the first all-reduce; every
               other rank's next collective must raise (spawn only)

A rank prints "torch_backend: MODE rank R ok, N checks" when all its checks
passed; a failed check raises and the rank exits non-zero.
"""

import argparse
import datetime
import os
import shutil
import socket
import sys
import tempfile
import time
import traceback
import warnings

import numpy as np
import torch
import torch.distributed as dist

import shoal.torch  # noqa: F401  (registers backend "shoal")
from ref import progress_threads

R = dist.ReduceOp
DTYPES = [torch.int8, torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16,
          torch.float32, torch.float64, torch.bool]
FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
# Types shoal has no arithmetic for: they move as bytes.
MOVE_ONLY = [torch.int16, torch.complex64]
SIZES = [0, 1, 7, 1031]
FAULT_EXIT = 3
warnings.filterwarnings("ignore", message=".*(deprecated|does not belong)")


class Checks:
    def __init__(self, rank):
        self.rank = rank
        self.n = 0

    def fail(self, what, detail):
        raise AssertionError(f"rank {self.rank}: {what}: {detail}")

    def equal(self, what, got, want, tol=False):
        """got equals want: same dtype and shape, every element equal (or
        within the dtype's rounding when tol)."""
        self.n += 1
        if got.dtype != want.dtype or tuple(got.shape) != tuple(want.shape):
            self.fail(what, f"got {got.dtype} {tuple(got.shape)}, want {want.dtype} "
                            f"{tuple(want.shape)}")
        if tol and got.dtype in FLOATS:
            eps = torch.finfo(got.dtype).eps
            g, w = got.double(), want.double()
            ok = bool(((g - w).abs() <= 2 * eps * w.abs().clamp(min=1)).all())
        else:
            ok = torch.equal(got, want)
        if not ok:
            bad = (got != want).nonzero()[:4].flatten().tolist()
            self.fail(what, f"got {got.flatten()[:8].tolist()} want {want.flatten()[:8].tolist()}"
                            f" (first differences at {bad})")

    def true(self, what, cond, detail=""):
        self.n += 1
        if not cond:
            self.fail(what, detail or "false")

    def raises(self, what, fn, *patterns):
        """fn() raises RuntimeError whose message holds every pattern."""
        self.n += 1
        try:
            fn()
        except RuntimeError as e:
            msg = str(e)
            for p in patterns:
                if p not in msg:
                    self.fail(what, f"the error does not say {p!r}: {msg}")
            return msg
        self.fail(what, "no error raised")


# ---- inputs and references --------------------------------------------------

def ints(rank, n, salt, lo, hi):
    """Rank's n integers in [lo, hi] (numpy int64)."""
    i = np.arange(n, dtype=np.int64)
    return (i * 7 + rank * 13 + salt * 5 + i // 3) % (hi - lo + 1) + lo


def raw(rank, n, dtype, salt):
    if dtype == torch.bool:
        return ints(rank, n, salt, 0, 1)
    if dtype == torch.uint8:
        return ints(rank, n, salt, 0, 3)
    return ints(rank, n, salt, -3, 3)


def tensor(values, dtype):
    if dtype == torch.bool:
        return torch.from_numpy(values != 0)
    if dtype.is_complex:
        return torch.from_numpy(values.astype(np.float64)).to(dtype) * (1 + 2j)
    return torch.from_numpy(values).to(dtype)


def inp(rank, n, dtype, salt=0):
    return tensor(raw(rank, n, dtype, salt), dtype)


def ops_for(dtype):
    """Every ReduceOp the backend takes for dtype, as (name, op, factor)."""
    ops = [("SUM", R.SUM, None), ("PRODUCT", R.PRODUCT, None), ("MIN", R.MIN, None),
           ("MAX", R.MAX, None)]
    if dtype != torch.bool:
        ops.append(("AVG", R.AVG, None))
    if not dtype.is_floating_point:
        ops += [("BAND", R.BAND, None), ("BOR", R.BOR, None), ("BXOR", R.BXOR, None)]
    if dtype in FLOATS:
        ops.append(("PREMUL_SUM", dist._make_nccl_premul_sum(0.5), 0.5))
    return ops


def reduce_ref(name, arrays, dtype, factor=None):
    """The reduction of the ranks' raw arrays, as a tensor of dtype."""
    a = np.stack(arrays)
    n = len(arrays)
    if dtype == torch.bool:
        b = a != 0
        r = {"SUM": b.any(0), "MAX": b.any(0), "BOR": b.any(0), "PRODUCT": b.all(0),
             "MIN": b.all(0), "BAND": b.all(0), "BXOR": np.logical_xor.reduce(b, 0)}[name]
        return torch.from_numpy(r)
    if name == "SUM":
        r = a.sum(0)
    elif name == "PRODUCT":
        r = a.prod(0)
    elif name == "MIN":
        r = a.min(0)
    elif name == "MAX":
        r = a.max(0)
    elif name == "AVG":
        # Integers: the sum divided, truncating; floats: the sum over n.
        r = a.sum(0) / n if dtype.is_floating_point else np.trunc(a.sum(0) / n).astype(np.int64)
    elif name == "BAND":
        r = np.bitwise_and.reduce(a, 0)
    elif name == "BOR":
        r = np.bitwise_or.reduce(a, 0)
    elif name == "BXOR":
        r = np.bitwise_xor.reduce(a, 0)
    elif name == "PREMUL_SUM":
        r = a.sum(0) * factor
    else:
        raise ValueError(name)
    return torch.from_numpy(np.asarray(r)).to(dtype)


def approx(name):
    return name in ("AVG", "PREMUL_SUM")


def blocks(t, n, size):
    """The size consecutive blocks of n elements of a 1-d tensor, as views."""
    return [t[i * n:(i + 1) * n] for i in range(size)]


# ---- the collectives --------------------------------------------------------

def check_allreduce(c, rank, size):
    salt = 0
    for dtype in DTYPES:
        for name, op, factor in ops_for(dtype):
            for n in SIZES:
                salt += 1
                t = inp(rank, n, dtype, salt)
                dist.all_reduce(t, op=op)
                want = reduce_ref(name, [raw(r, n, dtype, salt) for r in range(size)], dtype,
                                  factor)
                c.equal(f"all_reduce {name} {dtype} n={n}", t, want, tol=approx(name))
    # A multi-dimensional tensor reduces as its elements.
    t = inp(rank, 60, torch.float32, 99).view(3, 4, 5)
    dist.all_reduce(t)
    want = reduce_ref("SUM", [raw(r, 60, torch.float32, 99) for r in range(size)],
                      torch.float32).view(3, 4, 5)
    c.equal("all_reduce of a 3x4x5 tensor", t, want)


def check_allreduce_coalesced(c, rank, size):
    # torch wants one dtype per call.
    shapes = [(5,), (0,), (3, 3), (1031,)]
    for d, name, op in ((torch.float32, "MAX", R.MAX), (torch.int8, "SUM", R.SUM),
                        (torch.bfloat16, "PRODUCT", R.PRODUCT)):
        ts = [inp(rank, int(np.prod(s)), d, 200 + i).view(s) for i, s in enumerate(shapes)]
        dist.all_reduce_coalesced(ts, op=op)
        for i, s in enumerate(shapes):
            n = int(np.prod(s))
            want = reduce_ref(name, [raw(r, n, d, 200 + i) for r in range(size)], d).view(s)
            c.equal(f"all_reduce_coalesced {name} tensor {i} {d}", ts[i], want)


def check_reduce(c, rank, size):
    salt = 300
    for dtype in DTYPES:
        for name, op, factor in ops_for(dtype):
            if name not in ("SUM", "MAX", "PRODUCT", "AVG", "BXOR", "PREMUL_SUM"):
                continue
            for root in range(size):
                for n in (0, 7, 1031):
                    salt += 1
                    t = inp(rank, n, dtype, salt)
                    mine = t.clone()
                    dist.reduce(t, dst=root, op=op)
                    if rank == root:
                        want = reduce_ref(name, [raw(r, n, dtype, salt) for r in range(size)],
                                          dtype, factor)
                        c.equal(f"reduce {name} {dtype} root {root} n={n}", t, want,
                                tol=approx(name))
                    else:
                        c.equal(f"reduce {name} {dtype} root {root} n={n}: a non-root "
                                "tensor keeps its input", t, mine)


def check_broadcast(c, rank, size):
    for dtype in DTYPES + MOVE_ONLY:
        for root in range(size):
            for n in SIZES:
                t = inp(rank, n, dtype, root)
                dist.broadcast(t, src=root)
                c.equal(f"broadcast {dtype} root {root} n={n}", t, inp(root, n, dtype, root))


def check_allgather(c, rank, size):
    for dtype in DTYPES + MOVE_ONLY:
        for n in SIZES:
            want = [inp(r, n, dtype, 7) for r in range(size)]
            # Into a list of tensors.
            out = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_gather(out, inp(rank, n, dtype, 7))
            for r in range(size):
                c.equal(f"all_gather {dtype} n={n} block {r}", out[r], want[r])
            # Into one tensor, not in place and in place (the input is the
            # rank's block of the output).
            flat = torch.cat(want)
            out = torch.full((size * n,), 1, dtype=dtype)
            dist.all_gather_into_tensor(out, inp(rank, n, dtype, 7))
            c.equal(f"all_gather_into_tensor {dtype} n={n}", out, flat)
            out = torch.zeros(size * n, dtype=dtype)
            out[rank * n:(rank + 1) * n] = inp(rank, n, dtype, 7)
            dist.all_gather_into_tensor(out, out[rank * n:(rank + 1) * n])
            c.equal(f"all_gather_into_tensor in place {dtype} n={n}", out, flat)
    # A 2-d input gathers along the first dimension.
    out = torch.empty(size * 2, 3)
    dist.all_gather_into_tensor(out, inp(rank, 6, torch.float32, 8).view(2, 3))
    c.equal("all_gather_into_tensor 2x3 blocks", out,
            torch.cat([inp(r, 6, torch.float32, 8).view(2, 3) for r in range(size)]))


def check_reduce_scatter(c, rank, size):
    salt = 400
    for dtype in DTYPES:
        for name, op, factor in ops_for(dtype):
            for n in (0, 1, 7, 1031):
                salt += 1
                full = [raw(r, size * n, dtype, salt) for r in range(size)]
                want = reduce_ref(name, full, dtype, factor)[rank * n:(rank + 1) * n]
                mine = inp(rank, size * n, dtype, salt)
                # From a list of tensors.
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter(out, blocks(mine.clone(), n, size), op=op)
                c.equal(f"reduce_scatter {name} {dtype} n={n}", out, want, tol=approx(name))
                # From one tensor, not in place and in place (the output is
                # the rank's block of the input).
                out = torch.empty(n, dtype=dtype)
                dist.reduce_scatter_tensor(out, mine.clone(), op=op)
                c.equal(f"reduce_scatter_tensor {name} {dtype} n={n}", out, want,
                        tol=approx(name))
                buf = mine.clone()
                dist.reduce_scatter_tensor(buf[rank * n:(rank + 1) * n], buf, op=op)
                c.equal(f"reduce_scatter_tensor in place {name} {dtype} n={n}",
                        buf[rank * n:(rank + 1) * n], want, tol=approx(name))


def split_sizes(i, j, size):
    """How many rows rank i sends rank j in the uneven all-to-alls (some 0)."""
    return (i * 3 + j * 5) % (size + 2)


def check_alltoall(c, rank, size):
    for dtype in DTYPES + MOVE_ONLY:
        for n in (0, 1, 7, 257):
            # Even blocks: block j of rank i's input goes to rank j.
            ins = [inp(i, size * n, dtype, 11) for i in range(size)]
            want = torch.cat([ins[i][rank * n:(rank + 1) * n] for i in range(size)])
            out = torch.empty(size * n, dtype=dtype)
            dist.all_to_all_single(out, ins[rank])
            c.equal(f"all_to_all_single {dtype} n={n}", out, want)
            # A list of tensors.
            outs = [torch.empty(n, dtype=dtype) for _ in range(size)]
            dist.all_to_all(outs, blocks(ins[rank], n, size))
            c.equal(f"all_to_all {dtype} n={n}", torch.cat(outs), want)
        # Uneven split sizes, rows of 3 elements, zero rows included.
        sent = [[split_sizes(i, j, size) for j in range(size)] for i in range(size)]
        ins = [inp(i, 3 * sum(sent[i]), dtype, 12).view(-1, 3) for i in range(size)]
        pieces = [list(ins[i].split(sent[i])) for i in range(size)]
        want = torch.cat([pieces[i][rank] for i in range(size)])
        out = torch.empty(sum(sent[i][rank] for i in range(size)), 3, dtype=dtype)
        dist.all_to_all_single(out, ins[rank], output_split_sizes=[sent[i][rank] for i in
                                                                    range(size)],
                               input_split_sizes=sent[rank])
        c.equal(f"all_to_all_single with split sizes {dtype}", out, want)
        outs = [torch.empty(sent[i][rank], 3, dtype=dtype) for i in range(size)]
        dist.all_to_all(outs, pieces[rank])
        c.equal(f"all_to_all of uneven tensors {dtype}", torch.cat(outs), want)


def check_gather_scatter(c, rank, size):
    for dtype in (torch.int8, torch.float16, torch.bfloat16, torch.float64, torch.bool,
                  torch.int16):
        for root in range(size):
            for n in (0, 1, 1031):
                t = inp(rank, n, dtype, 20 + root)
                out = [torch.empty(n, dtype=dtype) for _ in range(size)] if rank == root else None
                dist.gather(t, gather_list=out, dst=root)
                if rank == root:
                    for r in range(size):
                        c.equal(f"gather {dtype} root {root} n={n} block {r}", out[r],
                                inp(r, n, dtype, 20 + root))
                src = [inp(r, n, dtype, 30 + root) for r in range(size)] if rank == root else None
                out = torch.empty(n, dtype=dtype)
                dist.scatter(out, scatter_list=src, src=root)
                c.equal(f"scatter {dtype} root {root} n={n}", out, inp(rank, n, dtype, 30 + root))


def check_p2p(c, rank, size):
    nxt, prv = (rank + 1) % size, (rank - 1) % size
    for dtype in (torch.float32, torch.int64, torch.bfloat16, torch.bool, torch.complex64):
        for n in (0, 1, 1031, 300000):
            # A ring: every rank sends to the next and receives from the
            # previous, both non-blocking.
            got = torch.empty(n, dtype=dtype)
            works = [dist.isend(inp(rank, n, dtype, 40), nxt), dist.irecv(got, prv)]
            for w in works:
                w.wait()
            c.equal(f"isend/irecv ring {dtype} n={n}", got, inp(prv, n, dtype, 40))
    # Blocking pairs: even ranks send first, odd ranks receive first.
    if size % 2 == 0:
        peer = rank ^ 1
        got = torch.empty(1031)
        if rank % 2 == 0:
            dist.send(inp(rank, 1031, torch.float32, 41), peer)
            dist.recv(got, peer)
        else:
            dist.recv(got, peer)
            dist.send(inp(rank, 1031, torch.float32, 41), peer)
        c.equal("send/recv pairs", got, inp(peer, 1031, torch.float32, 41))


def check_barrier_objects(c, rank, size):
    dist.barrier()
    c.true("barrier", True)
    objs = [None] * size
    dist.all_gather_object(objs, {"rank": rank, "text": "x" * (rank * 100 + 3)})
    c.true("all_gather_object", objs == [{"rank": r, "text": "x" * (r * 100 + 3)}
                                         for r in range(size)], str(objs)[:200])
    lst = [f"from {rank}", list(range(rank + 2))] if rank == size - 1 else [None, None]
    dist.broadcast_object_list(lst, src=size - 1)
    c.true("broadcast_object_list", lst == [f"from {size - 1}", list(range(size + 1))],
           str(lst))


def check_large(c, rank, size):
    n = 3 * 262144 + 1  # 3 MiB of float32 and one more value
    t = inp(rank, n, torch.float32, 50)
    dist.all_reduce(t)
    c.equal("all_reduce of 3 MiB", t,
            reduce_ref("SUM", [raw(r, n, torch.float32, 50) for r in range(size)],
                       torch.float32))
    n = 2 * 262144 + 3
    out = torch.empty(size * n, dtype=torch.float32)
    dist.all_gather_into_tensor(out, inp(rank, n, torch.float32, 51))
    c.equal("all_gather_into_tensor of 2 MiB per rank", out,
            torch.cat([inp(r, n, torch.float32, 51) for r in range(size)]))
    n = 4 << 20  # 4 MiB of int8 per rank
    n -= n % size
    ins = [inp(i, n, torch.int8, 52) for i in range(size)]
    out = torch.empty(n, dtype=torch.int8)
    dist.all_to_all_single(out, ins[rank])
    b = n // size
    c.equal("all_to_all_single of 4 MiB", out,
            torch.cat([ins[i][rank * b:(rank + 1) * b] for i in range(size)]))
    n = 3 * 262144 + 5
    out = torch.empty(n, dtype=torch.bfloat16)
    full = [raw(r, size * n, torch.bfloat16, 53) for r in range(size)]
    dist.reduce_scatter_tensor(out, inp(rank, size * n, torch.bfloat16, 53))
    c.equal("reduce_scatter_tensor of 1.5 MiB blocks", out,
            reduce_ref("SUM", full, torch.bfloat16)[rank * n:(rank + 1) * n])


def mode_collectives(c, rank, size):
    check_allreduce(c, rank, size)
    check_allreduce_coalesced(c, rank, size)
    check_reduce(c, rank, size)
    check_broadcast(c, rank, size)
    check_allgather(c, rank, size)
    check_reduce_scatter(c, rank, size)
    check_alltoall(c, rank, size)
    check_gather_scatter(c, rank, size)
    check_p2p(c, rank, size)
    check_barrier_objects(c, rank, size)
    check_large(c, rank, size)


def mode_async(c, rank, size):
    k = 8
    sizes = [1031 * (i + 1) + i for i in range(k)]
    ts = [inp(rank, n, torch.float32, 60 + i) for i, n in enumerate(sizes)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    # Another collective between them, and its future.
    out = torch.empty(size * 5, dtype=torch.int64)
    gw = dist.all_gather_into_tensor(out, inp(rank, 5, torch.int64, 70), async_op=True)
    fut = gw.get_future()
    doubled = fut.then(lambda f: f.value()[0] * 2)
    # Wait in an order that is neither issue order nor its reverse.
    order = list(range(k))
    order = order[1::2] + order[0::2][::-1]
    for i in order:
        c.true(f"async all_reduce {i}: wait returns True", works[i].wait() is True)
        c.true(f"async all_reduce {i}: is_completed after wait", works[i].is_completed())
        want = reduce_ref("SUM", [raw(r, sizes[i], torch.float32, 60 + i) for r in range(size)],
                          torch.float32)
        c.equal(f"async all_reduce {i}", ts[i], want)
        c.equal(f"async all_reduce {i}: result()", works[i].result()[0], want)
    gathered = torch.cat([inp(r, 5, torch.int64, 70) for r in range(size)])
    c.equal("future value of all_gather_into_tensor", fut.wait()[0], gathered)
    c.equal("then() of that future", doubled.wait(), gathered * 2)
    c.equal("its output", out, gathered)
    # Futures of every call kind, waited through torch.futures.
    t = inp(rank, 33, torch.float64, 71)
    futs = [dist.all_reduce(t, op=R.MAX, async_op=True).get_future(),
            dist.broadcast(torch.zeros(4) if rank else torch.ones(4), src=0,
                           async_op=True).get_future(),
            dist.barrier(async_op=True).get_future()]
    torch.futures.wait_all(futs)
    c.equal("future of all_reduce MAX", futs[0].value()[0],
            reduce_ref("MAX", [raw(r, 33, torch.float64, 71) for r in range(size)],
                       torch.float64))
    c.equal("future of broadcast", futs[1].value()[0], torch.ones(4))
    c.true("future of barrier", futs[2].done())
    # A callback that waits for a later work of the group claims it and
    # runs it on its own thread (the completion thread, or a waiter).
    t1 = torch.full((9,), float(rank))
    t2 = torch.full((11,), float(rank + 1))
    w1 = dist.all_reduce(t1, async_op=True)
    w2 = dist.all_reduce(t2, async_op=True)
    chained = w1.get_future().then(lambda f: w2.wait())
    c.true("a callback that waits for a later work", chained.wait() is True)
    c.true("that later work's result", bool((t2 == sum(r + 1 for r in range(size))).all()))
    c.true("the first work's result", bool((t1 == sum(range(size))).all()))
    # Work.wait with a timeout, on a work that completes.
    w = dist.all_reduce(torch.ones(10), async_op=True)
    c.true("wait(timeout) on a completing work", w.wait(datetime.timedelta(seconds=60)))
    # Work.wait with a timeout, on a barrier that cannot complete yet: the
    # last rank enters it only once rank 0's wait has timed out (the
    # store says so), then rank 0 waits again, without a timeout.
    store = dist.distributed_c10d._get_default_store()
    key = f"shoal_test/async_timeout_{size}"
    if rank == size - 1:
        store.get(key)
        dist.barrier()
    else:
        w = dist.barrier(async_op=True)
        if rank == 0:
            c.raises("wait(timeout) on a barrier the last rank has not entered",
                     lambda: w.wait(datetime.timedelta(milliseconds=50)),
                     "shoal: barrier did not complete within 50 ms")
            c.true("is_completed while the barrier waits", not w.is_completed())
            store.set(key, "go")
        c.true("wait after the timeout", w.wait())
    # Many in flight at once, waited last to first.
    ts = [torch.full((17,), float(rank + i)) for i in range(64)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    for i in reversed(range(64)):
        works[i].wait()
        c.true(f"64 in flight: all_reduce {i}",
               bool((ts[i] == sum(r + i for r in range(size))).all()))
    # The group's completion thread and its callers' waits drive its
    # operations: shoal's own progress thread never starts.
    c.true("no shoal progress thread in the process", progress_threads() == 0)


def mode_ddp(c, rank, size):
    """DistributedDataParallel over the backend (its all-reduce futures
    feed the reducer): small buckets, so that several are in flight; the
    parameters stay bitwise the same on every rank after every step."""
    torch.manual_seed(rank)  # each rank's own init: DDP broadcasts rank 0's
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(),
                                torch.nn.Linear(32, 10))
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.002)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.1)
    for step in range(20):
        x = torch.randn(16, 64)
        y = torch.randint(0, 10, (16,))
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        flat = torch.cat([p.detach().flatten() for p in model.parameters()])
        out = torch.empty(size * flat.numel())
        dist.all_gather_into_tensor(out, flat)
        c.true(f"DDP step {step}: parameters bitwise equal on every rank",
               all(torch.equal(flat, o) for o in out.view(size, -1)))


def mode_groups(c, rank, size):
    world = dist.get_world_size()
    subsets = [list(range(1, world)), [0, world - 1]]
    for ranks in subsets:
        g = dist.new_group(ranks, backend="shoal")
        if rank in ranks:
            gr = ranks.index(rank)
            c.true(f"new_group {ranks}: group rank", dist.get_rank(g) == gr)
            t = inp(rank, 1031, torch.int32, 80)
            dist.all_reduce(t, group=g)
            c.equal(f"new_group {ranks}: all_reduce", t,
                    reduce_ref("SUM", [raw(r, 1031, torch.int32, 80) for r in ranks],
                               torch.int32))
            t = inp(rank, 9, torch.float32, 81)
            dist.broadcast(t, src=ranks[-1], group=g)
            c.equal(f"new_group {ranks}: broadcast from global rank {ranks[-1]}", t,
                    inp(ranks[-1], 9, torch.float32, 81))
            out = torch.empty(len(ranks) * 3, dtype=torch.int64)
            dist.all_gather_into_tensor(out, inp(rank, 3, torch.int64, 82), group=g)
            c.equal(f"new_group {ranks}: all_gather_into_tensor", out,
                    torch.cat([inp(r, 3, torch.int64, 82) for r in ranks]))
            dist.barrier(group=g)
        else:
            c.true(f"new_group {ranks}: a rank outside gets NON_GROUP_MEMBER",
                   g == dist.GroupMember.NON_GROUP_MEMBER)
        # Every rank, inside or not, goes on on the world group.
        t = torch.full((5,), float(rank))
        dist.all_reduce(t)
        c.true(f"after new_group {ranks}: world all_reduce", bool((t == sum(range(world))).all()))
        if rank in ranks:
            dist.destroy_process_group(g)


def mode_errors(c, rank, size):
    t = torch.arange(12, dtype=torch.float32).view(3, 4).t()
    c.raises("all_reduce of a non-contiguous tensor", lambda: dist.all_reduce(t),
             "allreduce", "not contiguous")
    c.raises("all_gather_into_tensor of a non-contiguous output",
             lambda: dist.all_gather_into_tensor(torch.empty(size * 4, 2).t(), torch.ones(2, 4)),
             "_allgather_base", "not contiguous")
    c.raises("all_reduce BAND of float32", lambda: dist.all_reduce(torch.ones(3), op=R.BAND),
             "allreduce", "ReduceOp.BAND")
    c.raises("all_reduce AVG of bool",
             lambda: dist.all_reduce(torch.ones(3, dtype=torch.bool), op=R.AVG),
             "allreduce", "AVG")
    c.raises("reduce_scatter_tensor BXOR of bfloat16",
             lambda: dist.reduce_scatter_tensor(torch.empty(2, dtype=torch.bfloat16),
                                                torch.ones(2 * size, dtype=torch.bfloat16),
                                                op=R.BXOR),
             "_reduce_scatter_base", "ReduceOp.BXOR")
    c.raises("all_reduce of int16", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int16)),
             "allreduce", "no reduction in shoal")
    c.raises("all_reduce of a sparse tensor",
             lambda: dist.all_reduce(torch.ones(3).to_sparse()), "allreduce",
             "dense")
    c.raises("recv without a source", lambda: dist.recv(torch.empty(3)),
             "recvAnysource", "not supported")
    c.raises("send with a tag", lambda: dist.send(torch.ones(3), (rank + 1) % size, tag=5),
             "send", "tag 5")
    c.raises("all_gather_coalesced",
             lambda: dist.all_gather_coalesced([[torch.empty(2)] * size], [torch.ones(2)]),
             "allgather_coalesced", "not supported")
    c.raises("all_gather into a list of another size",
             lambda: dist.all_gather([torch.empty(3)] * (size + 1), torch.ones(3)),
             "allgather")
    c.raises("all_to_all_single with split sizes that do not add up",
             lambda: dist.all_to_all_single(torch.empty(size), torch.ones(size),
                                            input_split_sizes=[2] * size,
                                            output_split_sizes=[1] * size),
             "alltoall_base", "add up")
    # A tensor on another device (torch 1.13 routes some calls through its
    # dispatcher, which refuses a device it has no kernel for before the
    # backend sees the call; these reach it).
    meta = torch.empty(4, device="meta")
    for name, fn in [("alltoall_base", lambda: dist.all_to_all_single(meta, meta)),
                     ("_allgather_base", lambda: dist.all_gather_into_tensor(
                         torch.empty(4 * size, device="meta"), meta)),
                     ("_reduce_scatter_base", lambda: dist.reduce_scatter_tensor(
                         meta, torch.empty(4 * size, device="meta"))),
                     ("gather", lambda: dist.gather(meta, dst=(rank + 1) % size))]:
        c.raises(f"{name} of a tensor on another device", fn, name, "on meta",
                 "CPU tensors only")
    # The group still works after every refusal.
    t = torch.full((7,), float(rank + 1))
    dist.all_reduce(t)
    c.true("all_reduce after the refusals", bool((t == sum(range(1, size + 1))).all()))
    # Last: one rank's tensor has another shape. Every rank raises, with
    # shoal's reason.
    n = 6 if rank == 0 else 5
    msg = c.raises("all_reduce with another shape on rank 0",
                   lambda: dist.all_reduce(torch.ones(n)), "shoal")
    c.true("the mismatch error is shoal's", "different" in msg or "mismatch" in msg.lower(), msg)
    print(f"torch_backend: rank {rank} mismatch error: {msg}", flush=True)


def mode_fault(c, rank, size):
    t = torch.ones(1031)
    dist.all_reduce(t)
    c.true("all_reduce before the fault", bool((t == size).all()))
    if rank == size - 1:
        sys.stdout.flush()
        os._exit(FAULT_EXIT)
    start = time.monotonic()

    def until_it_fails():
        # The dead rank may still be seen alive by the first call on some
        # ranks; every call waits for it, so a later one fails surely.
        for _ in range(1000):
            dist.all_reduce(torch.ones(1 << 16))

    msg = c.raises("all_reduce after a rank died", until_it_fails, "shoal")
    print(f"torch_backend: rank {rank} raised after {time.monotonic() - start:.1f} s: {msg}",
          flush=True)


MODES = {"collectives": mode_collectives, "async": mode_async, "ddp": mode_ddp,
         "groups": mode_groups, "errors": mode_errors, "fault": mode_fault}


def run(modes, rank, size):
    for mode in modes.split(","):
        c = Checks(rank)
        MODES[mode](c, rank, size)
        if mode not in ("fault", "errors"):
            dist.barrier()
        print(f"torch_backend: {mode} rank {rank} ok, {c.n} checks", flush=True)


def worker(rank, size, init, mode, world):
    try:
        dist.init_process_group(world, init_method=init, rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=120))
        run(mode, rank, size)
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("modes", help="MODE[,MODE...]: " + ", ".join(sorted(MODES)) +
                    " (errors and fault break the group: last)")
    ap.add_argument("--spawn", type=int, default=0, help="start this many ranks here")
    ap.add_argument("--init", choices=("file", "tcp"), default="file")
    ap.add_argument("--world", default="shoal", help="the default group's backend")
    args = ap.parse_args()
    for mode in args.modes.split(","):
        if mode not in MODES:
            ap.error(f"unknown mode {mode}")
    if not args.spawn:
        dist.init_process_group(args.world, timeout=datetime.timedelta(seconds=120))
        run(args.modes, dist.get_rank(), dist.get_world_size())
        dist.destroy_process_group()
        return 0
    import multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="shoal_torch_")
    init = (f"file://{tmp}/store" if args.init == "file"
            else f"tcp://127.0.0.1:{free_port()}")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, args.spawn, init, args.modes, args.world))
             for r in range(args.spawn)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    shutil.rmtree(tmp, ignore_errors=True)
    want = [0] * args.spawn
    if args.modes.split(",")[-1] == "fault":
        want[-1] = FAULT_EXIT
    got = [p.exitcode for p in procs]
    if got != want:
        print(f"torch_backend: exit codes {got}, expected {want}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
