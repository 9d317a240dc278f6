"""An unchanged mpi4py program for the MPI door's tests: the buffer-based
(upper-case) Allreduce, Reduce_scatter_block, Allgather and Alltoall of
mpi4py's communicators on numpy arrays of float64, int32 and float32, in
place (MPI.IN_PLACE) and not, each result checked against numpy's on what
every rank can compute alone. Each rank prints "door_check.py: rank R ok,
N calls" or what went wrong first, and exits 1."""

import sys

import numpy as np
from mpi4py import MPI

K = 257  # elements per rank's block
TYPES = (np.float64, np.int32, np.float32)


def val(r, n, dtype):
    """Rank r's n values: small, so that sums stay exact in every type."""
    return ((r * 7 + np.arange(n) * 3) % 5 - 2).astype(dtype)


def main():
    comm = MPI.COMM_WORLD
    rank, size = comm.Get_rank(), comm.Get_size()
    calls = 0
    ops = ((MPI.SUM, np.sum), (MPI.MAX, np.max))

    def expect(what, got, want):
        if got.dtype != want.dtype or not np.array_equal(got, want):
            bad = np.flatnonzero(got != want)
            raise AssertionError("%s wrong at %s" % (what, bad[:1]))

    for dtype in TYPES:
        name = np.dtype(dtype).name
        everyone = np.stack([val(r, size * K, dtype) for r in range(size)])

        for op, ref in ops:
            want = ref(everyone, axis=0).astype(dtype)
            out = np.full(size * K, -100, dtype)
            comm.Allreduce(val(rank, size * K, dtype), out, op=op)
            calls += 1
            expect("Allreduce %s %s" % (name, op), out, want)
            buf = val(rank, size * K, dtype)
            comm.Allreduce(MPI.IN_PLACE, buf, op=op)
            calls += 1
            expect("Allreduce in place %s %s" % (name, op), buf, want)

        # This rank's block of the sum of everyone's vectors.
        want = everyone.sum(axis=0).astype(dtype)[rank * K:(rank + 1) * K]
        out = np.full(K, -100, dtype)
        comm.Reduce_scatter_block(val(rank, size * K, dtype), out, op=MPI.SUM)
        calls += 1
        expect("Reduce_scatter_block %s" % name, out, want)
        buf = val(rank, size * K, dtype)
        comm.Reduce_scatter_block(MPI.IN_PLACE, buf, op=MPI.SUM)
        calls += 1
        expect("Reduce_scatter_block in place %s" % name, buf[:K], want)

        # Every rank's first block, in rank order.
        want = everyone[:, :K].reshape(-1)
        out = np.full(size * K, -100, dtype)
        comm.Allgather(val(rank, K, dtype), out)
        calls += 1
        expect("Allgather %s" % name, out, want)
        buf = np.full(size * K, -100, dtype)
        buf[rank * K:(rank + 1) * K] = val(rank, K, dtype)
        comm.Allgather(MPI.IN_PLACE, buf)
        calls += 1
        expect("Allgather in place %s" % name, buf, want)

        # Block j of rank r's vector goes to rank j, at block r.
        want = everyone[:, rank * K:(rank + 1) * K].reshape(-1)
        out = np.full(size * K, -100, dtype)
        comm.Alltoall(val(rank, size * K, dtype), out)
        calls += 1
        expect("Alltoall %s" % name, out, want)
        buf = val(rank, size * K, dtype)
        comm.Alltoall(MPI.IN_PLACE, buf)
        calls += 1
        expect("Alltoall in place %s" % name, buf, want)

    return calls


if __name__ == "__main__":
    try:
        n = main()
    except AssertionError as e:
        print("door_check.py: rank %d: %s" % (MPI.COMM_WORLD.Get_rank(), e), flush=True)
        sys.exit(1)
    print("door_check.py: rank %d ok, %d calls" % (MPI.COMM_WORLD.Get_rank(), n), flush=True)
