"""Every collective of the package against numpy: every dtype the kit and
shoal share, every op, in place and not, counts 0, 1 and odd, numpy and
torch buffers; then a multi-chunk size (a few MiB) for each collective."""

import numpy as np

import ref

SIZES = (0, 1, 37)
BIG = (2 << 20) // 4 + 3  # float32 elements: 2 MiB and a bit, many pipeline chunks


def _ops(dtype, kit):
    ops = ref.OPS
    if dtype in ref.INTEGER and kit.name == "numpy":
        ops += ref.BITWISE
    return ops


def all_reduce(comm, kit, c, dtype, n, salt, ops):
    for op in ops:
        ins = [ref.values(r, n, dtype, op, salt) for r in range(comm.size)]
        want = ref.reduce_ref(ins, op, dtype)
        what = "all_reduce %s %s %s n=%d" % (kit.name, dtype, op, n)
        send = kit.make(ins[comm.rank], dtype)
        recv = kit.full(n, dtype)
        out = comm.all_reduce(send, recv, op=op)
        c.ok(out is recv, what + ": returns recv")
        c.eq(kit.f64(recv), want, what, dtype, op)
        c.eq(kit.f64(send), ins[comm.rank], what + ": send unchanged")
        buf = kit.make(ins[comm.rank], dtype)
        c.ok(comm.all_reduce(buf, op=op) is buf, what + " in place: returns buf")
        c.eq(kit.f64(buf), want, what + " in place", dtype, op)


def reduce_scatter(comm, kit, c, dtype, n, salt, ops):
    size, rank = comm.size, comm.rank
    for op in ops:
        ins = [ref.values(r, n * size, dtype, op, salt) for r in range(size)]
        want = ref.reduce_ref(ins, op, dtype)[rank * n:(rank + 1) * n]
        what = "reduce_scatter %s %s %s n=%d" % (kit.name, dtype, op, n)
        recv = kit.full(n, dtype)
        comm.reduce_scatter(kit.make(ins[rank], dtype), recv, op=op)
        c.eq(kit.f64(recv), want, what, dtype, op)
        buf = kit.make(ins[rank], dtype)
        out = comm.reduce_scatter(buf, op=op)
        c.eq(kit.f64(out), want, what + " in place", dtype, op)
        c.eq(kit.f64(buf)[rank * n:(rank + 1) * n], want, what + " in place, in buf", dtype, op)


def all_gather(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    ins = [ref.values(r, n, dtype, "sum", salt) for r in range(size)]
    want = np.concatenate(ins)
    what = "all_gather %s %s n=%d" % (kit.name, dtype, n)
    recv = kit.full(n * size, dtype)
    c.ok(comm.all_gather(kit.make(ins[rank], dtype), recv) is recv, what + ": returns recv")
    c.eq(kit.f64(recv), want, what)
    buf = kit.full(n * size, dtype)
    buf[rank * n:(rank + 1) * n] = kit.make(ins[rank], dtype)
    comm.all_gather(None, buf)
    c.eq(kit.f64(buf), want, what + " in place")


def all_to_all(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    ins = [ref.values(r, n * size, dtype, "sum", salt) for r in range(size)]
    want = np.concatenate([ins[j][rank * n:(rank + 1) * n] for j in range(size)])
    what = "all_to_all %s %s n=%d" % (kit.name, dtype, n)
    recv = kit.full(n * size, dtype)
    comm.all_to_all(kit.make(ins[rank], dtype), recv)
    c.eq(kit.f64(recv), want, what)
    buf = kit.make(ins[rank], dtype)
    comm.all_to_all(buf)
    c.eq(kit.f64(buf), want, what + " in place")


def _v_counts(a, b, n):
    """Elements rank a sends to rank b."""
    return n + (a + 2 * b) % 3


def all_to_all_v(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    sc = [_v_counts(rank, j, n) for j in range(size)]
    rc = [_v_counts(j, rank, n) for j in range(size)]
    ins = [ref.values(a, sum(_v_counts(a, j, n) for j in range(size)), dtype, "sum", salt)
           for a in range(size)]

    def block(a, b):
        start = sum(_v_counts(a, j, n) for j in range(b))
        return ins[a][start:start + _v_counts(a, b, n)]

    want = np.concatenate([block(j, rank) for j in range(size)])
    what = "all_to_all counts %s %s n=%d" % (kit.name, dtype, n)
    recv = kit.full(sum(rc), dtype)
    comm.all_to_all(kit.make(ins[rank], dtype), recv, send_counts=sc, recv_counts=rc)
    c.eq(kit.f64(recv), want, what)
    # Displacements with a gap of one element before each received block.
    rd = [sum(rc[:j]) + j + 1 for j in range(size)]
    recv = kit.full(sum(rc) + size + 1, dtype)
    comm.all_to_all(kit.make(ins[rank], dtype), recv, send_counts=sc, recv_counts=rc,
                    recv_displs=rd)
    got = kit.f64(recv)
    c.eq(np.concatenate([got[rd[j]:rd[j] + rc[j]] for j in range(size)]), want, what + " gaps")
    c.eq(got[[d - 1 for d in rd]], kit.f64(kit.full(size, dtype)), what + ": gaps untouched")
    buf = kit.full(max(sum(sc), sum(rc)), dtype)
    buf[:sum(sc)] = kit.make(ins[rank], dtype)
    comm.all_to_all(buf, send_counts=sc, recv_counts=rc)
    c.eq(kit.f64(buf)[:sum(rc)], want, what + " in place")


def broadcast(comm, kit, c, dtype, n, salt):
    for root in range(comm.size):
        data = ref.values(root, n, dtype, "sum", salt + root)
        what = "broadcast %s %s n=%d root %d" % (kit.name, dtype, n, root)
        recv = kit.full(n, dtype)
        send = kit.make(data, dtype) if comm.rank == root else None
        comm.broadcast(send, recv, root=root)
        c.eq(kit.f64(recv), data, what)
        buf = kit.make(data, dtype) if comm.rank == root else kit.full(n, dtype)
        comm.broadcast(buf, root=root)
        c.eq(kit.f64(buf), data, what + " in place")


def reduce(comm, kit, c, dtype, n, salt, ops):
    size, rank = comm.size, comm.rank
    for root in sorted({0, size - 1}):
        for op in ops if root == 0 else ("sum",):
            ins = [ref.values(r, n, dtype, op, salt) for r in range(size)]
            want = ref.reduce_ref(ins, op, dtype)
            what = "reduce %s %s %s n=%d root %d" % (kit.name, dtype, op, n, root)
            recv = kit.full(n, dtype)
            out = comm.reduce(kit.make(ins[rank], dtype), recv, op=op, root=root)
            if rank == root:
                c.ok(out is recv, what + ": returns recv on the root")
                c.eq(kit.f64(recv), want, what, dtype, op)
            else:
                c.ok(out is None, what + ": returns None off the root")
                c.eq(kit.f64(recv), kit.f64(kit.full(n, dtype)), what + ": recv untouched off the root")
            buf = kit.make(ins[rank], dtype)
            comm.reduce(buf, op=op, root=root)
            c.eq(kit.f64(buf), want if rank == root else ins[rank], what + " in place", dtype,
                 op)


def gather(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    ins = [ref.values(r, n, dtype, "sum", salt) for r in range(size)]
    want = np.concatenate(ins)
    for root in range(size):
        what = "gather %s %s n=%d root %d" % (kit.name, dtype, n, root)
        recv = kit.full(n * size, dtype) if rank == root else None
        comm.gather(kit.make(ins[rank], dtype), recv, root=root)
        if rank == root:
            c.eq(kit.f64(recv), want, what)
            buf = kit.full(n * size, dtype)
            buf[root * n:(root + 1) * n] = kit.make(ins[rank], dtype)
            comm.gather(None, buf, root=root)
            c.eq(kit.f64(buf), want, what + " in place")
        else:
            comm.gather(kit.make(ins[rank], dtype), root=root)


def scatter(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    for root in range(size):
        data = ref.values(root, n * size, dtype, "sum", salt + root)
        want = data[rank * n:(rank + 1) * n]
        what = "scatter %s %s n=%d root %d" % (kit.name, dtype, n, root)
        recv = kit.full(n, dtype)
        comm.scatter(kit.make(data, dtype) if rank == root else None, recv, root=root)
        c.eq(kit.f64(recv), want, what)
        if rank == root:
            buf = kit.make(data, dtype)
            out = comm.scatter(buf, root=root)
            c.eq(kit.f64(out), want, what + " in place")
            c.eq(kit.f64(buf), data, what + " in place: send unchanged")
        else:
            comm.scatter(None, kit.full(n, dtype), root=root)


def send_recv(comm, kit, c, dtype, n, salt):
    size, rank = comm.size, comm.rank
    if size == 1:
        return
    right, left = (rank + 1) % size, (rank - 1) % size
    mine = ref.values(rank, n, dtype, "sum", salt)
    what = "send/recv %s %s n=%d" % (kit.name, dtype, n)
    recv = kit.full(n, dtype)
    # Blocking: even ranks send first, odd ranks receive first; an odd
    # count of ranks closes the ring with a pair that needs no order.
    if rank % 2 == 0 and not (size % 2 and rank == size - 1):
        comm.send(kit.make(mine, dtype), right)
        comm.recv(recv, left)
    else:
        comm.recv(recv, left)
        comm.send(kit.make(mine, dtype), right)
    c.eq(kit.f64(recv), ref.values(left, n, dtype, "sum", salt), what)


def run(comm, kits, c):
    salt = 0
    for kit in kits:
        for dtype in kit.dtypes:
            ops = _ops(dtype, kit)
            for n in SIZES:
                salt += 1
                all_reduce(comm, kit, c, dtype, n, salt, ops)
                reduce_scatter(comm, kit, c, dtype, n, salt, ops)
                all_gather(comm, kit, c, dtype, n, salt)
                all_to_all(comm, kit, c, dtype, n, salt)
                all_to_all_v(comm, kit, c, dtype, n, salt)
                broadcast(comm, kit, c, dtype, n, salt)
                reduce(comm, kit, c, dtype, n, salt, ops)
                gather(comm, kit, c, dtype, n, salt)
                scatter(comm, kit, c, dtype, n, salt)
                send_recv(comm, kit, c, dtype, n, salt)
                comm.barrier()
    big(comm, kits, c)


def big(comm, kits, c):
    """One multi-chunk call of each collective, float32 (and int64 for the
    max), numpy and torch."""
    size = comm.size
    for kit in kits:
        all_reduce(comm, kit, c, "float32", BIG, 101, ("sum", "avg"))
        all_reduce(comm, kit, c, "int64", BIG // 2, 102, ("max",))
    kit = kits[0]
    reduce_scatter(comm, kit, c, "float32", BIG // size, 103, ("sum",))
    all_gather(comm, kit, c, "float32", BIG // size, 104)
    all_to_all(comm, kit, c, "float32", BIG // size, 105)
    broadcast(comm, kit, c, "float32", BIG, 106)
    reduce(comm, kit, c, "float32", BIG, 107, ("sum",))
    send_recv(comm, kit, c, "float32", BIG, 108)
