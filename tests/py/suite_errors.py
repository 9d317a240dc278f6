"""Errors: bad arguments raise TypeError or ValueError naming the argument
(or ShoalError with shoal's reason for what only shoal checks) on the rank
that passed them, with no rank left waiting; a call that differs between
ranks raises the mismatch error on every rank; a rank that dies makes the
others raise ShoalError naming it, not hang."""

import numpy as np

import shoal


def _bad_arrays(comm, kit, c):
    rank, size = comm.rank, comm.size
    x = kit.full(4 * size, "float32")
    name = kit.name
    c.raises(ValueError, lambda: comm.all_reduce(x[::2]), name + ": non-contiguous",
             "send", "contiguous")
    c.raises(ValueError, lambda: comm.all_reduce(x, kit.full(4 * size, "float32")[::2]),
             name + ": non-contiguous recv", "recv", "contiguous")
    c.raises(ValueError, lambda: comm.all_reduce(x, kit.full(4 * size + 1, "float32")),
             name + ": sizes", "recv", "elements")
    c.raises(TypeError, lambda: comm.all_reduce(x, kit.full(4 * size, "float64")),
             name + ": types", "recv", "float64")
    c.raises(ValueError, lambda: comm.all_reduce(x, op="median"), name + ": op", "op", "median")
    c.raises(TypeError, lambda: comm.all_reduce(x, op="band"), name + ": band on floats",
             "op", "integer")
    c.raises(ValueError, lambda: comm.broadcast(x, root=size), name + ": root", "root")
    c.raises(ValueError, lambda: comm.send(x, -1), name + ": peer", "peer")
    c.raises(TypeError, lambda: comm.barrier(async_op="yes"), name + ": async_op", "async_op")
    c.raises(TypeError, lambda: comm.all_gather(x, None), name + ": no recv", "recv")
    c.raises(ValueError, lambda: comm.all_to_all(x, send_counts=[1] * (size + 1),
                                                 recv_counts=[1] * size),
             name + ": counts", "send_counts")
    c.raises(ValueError, lambda: comm.all_to_all(x, send_counts=[9] * size,
                                                 recv_counts=[1] * size),
             name + ": counts past the end", "send")
    c.raises(ValueError, lambda: comm.all_to_all(x, send_counts=[1] * size),
             name + ": send_counts alone", "recv_counts")
    c.raises(TypeError, lambda: comm.all_reduce([1.0, 2.0]), name + ": a list", "send", "list")
    if size > 1:
        c.raises(ValueError, lambda: comm.reduce_scatter(kit.full(size + 1, "float32")),
                 name + ": blocks", "send", "blocks")
        c.raises(TypeError, lambda: comm.gather(None, root=(rank + 1) % size),
                 name + ": gather without send", "send")


def _bad_numpy(comm, c):
    ro = np.zeros(8, dtype=np.float32)
    ro.flags.writeable = False
    c.raises(ValueError, lambda: comm.all_reduce(np.zeros(8, np.float32), ro), "read-only recv",
             "recv", "read-only")
    c.raises(ValueError, lambda: comm.all_reduce(ro), "read-only in place", "send", "read-only")
    for dt in (np.int16, np.bool_, np.complex64, np.dtype(">f4")):
        c.raises(TypeError, lambda: comm.all_reduce(np.zeros(4, dt)), "numpy %s" % dt, "send")


def _bad_torch(comm, c):
    import torch
    for dt in (torch.int16, torch.bool, torch.complex64):
        c.raises(TypeError, lambda: comm.all_reduce(torch.zeros(4, dtype=dt)), "torch %s" % dt,
                 "send")
    c.raises(ValueError, lambda: comm.all_reduce(torch.zeros(4, device="meta")),
             "a tensor off the CPU", "send", "meta")
    c.raises(ValueError, lambda: comm.all_reduce(torch.zeros(4, 4).t()),
             "a transposed tensor", "send", "contiguous")
    sparse = torch.zeros(4).to_sparse()
    c.raises(TypeError, lambda: comm.all_reduce(sparse), "a sparse tensor", "send")


def _bad_shoal(comm, c):
    """What shoal itself refuses, locally: ShoalError with its reason."""
    rank, size = comm.rank, comm.size
    e = c.raises(shoal.ShoalError, lambda: comm.send(np.zeros(3, np.int32), rank),
                 "send to oneself", "group")
    c.ok(e is None or e.status == shoal.Status.INVALID_ARG, "send to oneself: INVALID_ARG")
    a = np.arange(2 * size + 1, dtype=np.float64)
    e = c.raises(shoal.ShoalError, lambda: comm.all_to_all(a[:-1], a[1:]),
                 "overlapping all_to_all", "overlap")
    c.ok(e is None or e.status == shoal.Status.INVALID_ARG, "overlap: INVALID_ARG")
    c.raises(ValueError, lambda: shoal.Compressor(comm, "zip", 10), "compressor kind", "kind")
    c.raises(TypeError, lambda: shoal.Compressor(comm, "int8", 10, "int32"),
             "compressor dtype", "dtype")
    c.raises(ValueError, lambda: shoal.Communicator.from_unique_id(2, b"short", 0), "uid", "uid")
    child = comm.split(0, rank)
    child.close()
    c.raises(ValueError, lambda: child.barrier(), "closed communicator", "closed")


def run_bad(comm, kits, c):
    for kit in kits:
        _bad_arrays(comm, kit, c)
        if kit.name == "torch":
            _bad_torch(comm, c)
    _bad_numpy(comm, c)
    _bad_shoal(comm, c)
    # No rank was left behind: the communicator still works.
    x = np.full(5, comm.rank + 1, dtype=np.int64)
    comm.all_reduce(x)
    c.eq(x, np.full(5, comm.size * (comm.size + 1) // 2), "all_reduce after the bad calls")


def run_mismatch(comm, kits, c):
    """One rank's count differs: every rank raises the mismatch error,
    naming both calls, on a child communicator; the parent still works."""
    size, rank = comm.size, comm.rank
    sub = comm.split(0, rank)
    count = 100 if rank == size - 1 else 200
    e = c.raises(shoal.ShoalError, lambda: sub.all_reduce(np.ones(count, np.float32)),
                 "mismatched count", "of 100 x", "of 200 x")
    c.ok(e is None or e.status == shoal.Status.MISMATCH, "mismatch: status %s"
         % (e and e.status))
    sub.close()
    x = np.ones(3, np.float32)
    comm.all_reduce(x)
    c.eq(x, np.full(3, float(size)), "parent after the child's mismatch")


def run_death(comm, kits, c):
    """The last rank leaves; the others raise ShoalError (a dead peer, named)
    on the collective it never joins, and on the next call at once."""
    size, rank = comm.size, comm.rank
    victim = size - 1
    comm.barrier()
    if rank == victim:
        return "exit"
    x = np.ones(1 << 20, np.float32)
    want = "rank %d " % victim
    e = c.raises(shoal.ShoalError, lambda: comm.all_reduce(x), "all_reduce past a dead rank",
                 want)
    c.ok(e is None or e.status == shoal.Status.PEER, "dead rank: status %s" % (e and e.status))

    def again():
        req = comm.all_reduce(x, async_op=True)
        req.wait()

    e = c.raises(shoal.ShoalError, again, "the next call", want)
    c.ok(e is None or e.status == shoal.Status.PEER, "next call: status %s" % (e and e.status))
    comm.close()
    return None

