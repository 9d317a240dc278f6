"""Non-blocking requests (waited in every order, polled with test(), holding
buffers the caller dropped), split into subsets, and requests of an
aborted communicator; caller-driven progress."""

import gc
import itertools

import numpy as np

import ref
import shoal

N = 101


def orders(comm, kit, c):
    """Three operations in flight, waited in each of the six orders."""
    size, rank = comm.size, comm.rank
    for k, perm in enumerate(itertools.permutations(range(3))):
        ar = [ref.values(r, N, "float32", "sum", k) for r in range(size)]
        ag = [ref.values(r, N, "int32", "sum", k + 1) for r in range(size)]
        aa = [ref.values(r, N * size, "float64", "sum", k + 2) for r in range(size)]
        outs = [kit.full(N, "float32"), kit.full(N * size, "int32"), kit.full(N * size, "float64")]
        reqs = [comm.all_reduce(kit.make(ar[rank], "float32"), outs[0], async_op=True),
                comm.all_gather(kit.make(ag[rank], "int32"), outs[1], async_op=True),
                comm.all_to_all(kit.make(aa[rank], "float64"), outs[2], async_op=True)]
        what = "%s order %s" % (kit.name, perm)
        for i in perm:
            c.ok(reqs[i].wait() is outs[i], what + ": wait returns the output")
        c.ok(all(r.done for r in reqs), what + ": all done")
        c.ok(reqs[perm[0]].wait() is outs[perm[0]], what + ": a second wait returns again")
        c.ok(reqs[perm[0]].test(), what + ": test after wait")
        c.eq(kit.f64(outs[0]), ref.reduce_ref(ar, "sum", "float32"), what + " all_reduce")
        c.eq(kit.f64(outs[1]), np.concatenate(ag), what + " all_gather")
        c.eq(kit.f64(outs[2]), np.concatenate([a[rank * N:(rank + 1) * N] for a in aa]),
             what + " all_to_all")


def polled(comm, kit, c):
    """Requests polled with test() until each says done."""
    size, rank = comm.size, comm.rank
    rs = [ref.values(r, N * size, "float32", "max", 7) for r in range(size)]
    data = ref.values(0, N, "int64", "sum", 8)
    rs_out = kit.full(N, "float32")
    bc = kit.make(data, "int64") if rank == 0 else kit.full(N, "int64")
    red = kit.make(ref.values(rank, N, "float64", "sum", 9), "float64")
    reqs = [comm.reduce_scatter(kit.make(rs[rank], "float32"), rs_out, op="max", async_op=True),
            comm.broadcast(bc, root=0, async_op=True),
            comm.reduce(red, op="sum", root=size - 1, async_op=True),
            comm.barrier(async_op=True)]
    pending = set(range(len(reqs)))
    polls = 0
    while pending:
        for i in sorted(pending):
            polls += 1
            if reqs[i].test():
                pending.discard(i)
    c.ok(polls >= len(reqs), "%s polled" % kit.name)
    c.eq(kit.f64(rs_out), ref.reduce_ref(rs, "max", "float32")[rank * N:(rank + 1) * N],
         "%s polled reduce_scatter" % kit.name)
    c.eq(kit.f64(bc), data, "%s polled broadcast" % kit.name)
    if rank == size - 1:
        want = ref.reduce_ref([ref.values(r, N, "float64", "sum", 9) for r in range(size)],
                              "sum", "float64")
        c.eq(kit.f64(red), want, "%s polled reduce" % kit.name)


def dropped(comm, kit, c):
    """The request keeps buffers alive that the caller no longer holds."""
    size, rank = comm.size, comm.rank
    ins = [ref.values(r, 4096, "float32", "sum", 11) for r in range(size)]
    req = comm.all_reduce(kit.make(ins[rank], "float32"), async_op=True)
    gc.collect()
    out = req.wait()
    c.eq(kit.f64(out), ref.reduce_ref(ins, "sum", "float32"), "%s dropped buffer" % kit.name)


def p2p(comm, kit, c):
    """Non-blocking sends and receives both ways round the ring, waited in
    reverse order of issue."""
    size, rank = comm.size, comm.rank
    if size == 1:
        return
    right, left = (rank + 1) % size, (rank - 1) % size
    from_left, from_right = kit.full(N, "int32"), kit.full(N, "int32")
    reqs = [comm.send(kit.make(ref.values(rank, N, "int32", "sum", 12), "int32"), right,
                      async_op=True),
            comm.recv(from_left, left, async_op=True),
            comm.send(kit.make(ref.values(rank, N, "int32", "sum", 13), "int32"), left,
                      async_op=True),
            comm.recv(from_right, right, async_op=True)]
    for r in reversed(reqs):
        r.wait()
    c.eq(kit.f64(from_left), ref.values(left, N, "int32", "sum", 12), "%s isend/irecv left"
         % kit.name)
    c.eq(kit.f64(from_right), ref.values(right, N, "int32", "sum", 13), "%s isend/irecv right"
         % kit.name)


def rooted(comm, kit, c):
    """Non-blocking gather and scatter (and all-to-all with counts)."""
    size, rank = comm.size, comm.rank
    ins = [ref.values(r, N, "uint8", "sum", 14) for r in range(size)]
    recv = kit.full(N * size, "uint8") if rank == 0 else None
    req = comm.gather(kit.make(ins[rank], "uint8"), recv, root=0, async_op=True)
    c.ok(req.wait() is recv, "%s igather returns" % kit.name)
    if rank == 0:
        c.eq(kit.f64(recv), np.concatenate(ins), "%s igather" % kit.name)
    data = ref.values(0, N * size, "float64", "sum", 15)
    out = kit.full(N, "float64")
    comm.scatter(kit.make(data, "float64") if rank == 0 else None, out, root=0,
                 async_op=True).wait()
    c.eq(kit.f64(out), data[rank * N:(rank + 1) * N], "%s iscatter" % kit.name)
    counts = [rank + 1] * size
    rcounts = [j + 1 for j in range(size)]
    send = kit.make(np.full(sum(counts), float(rank)), "int64")
    recv = kit.full(sum(rcounts), "int64")
    comm.all_to_all(send, recv, send_counts=counts, recv_counts=rcounts, async_op=True).wait()
    want = np.concatenate([np.full(j + 1, float(j)) for j in range(size)])
    c.eq(kit.f64(recv), want, "%s ialltoallv" % kit.name)


def split(comm, kits, c):
    size, rank = comm.size, comm.rank
    kit = kits[0]
    # Two colors by parity, ordered by descending rank.
    sub = comm.split(rank % 2, key=-rank)
    members = sorted((r for r in range(size) if r % 2 == rank % 2), reverse=True)
    c.ok(sub is not None and sub.size == len(members), "split: size %s" % (sub and sub.size))
    c.ok(sub.rank == members.index(rank), "split: rank %d, expected %d"
         % (sub.rank, members.index(rank)))
    ins = {r: ref.values(r, N, "float32", "sum", 16) for r in members}
    buf = kit.make(ins[rank], "float32")
    sub.all_reduce(buf)
    c.eq(kit.f64(buf), ref.reduce_ref([ins[r] for r in members], "sum", "float32"),
         "split all_reduce")
    out = kit.full(N * sub.size, "float32")
    sub.all_gather(kit.make(ins[rank], "float32"), out, async_op=True).wait()
    c.eq(kit.f64(out), np.concatenate([ins[r] for r in members]), "split all_gather")
    sub.close()
    c.ok(sub.closed, "split: closed")
    # Rank 0 joins nothing; the others form one communicator.
    other = comm.split(None if rank == 0 else 0, key=rank)
    if rank == 0:
        c.ok(other is None, "split: no color gives None")
    else:
        c.ok(other.size == size - 1 and other.rank == rank - 1, "split: the rest")
        x = kit.make(np.full(3, float(rank)), "int32")
        other.all_reduce(x, op="max")
        c.eq(kit.f64(x), np.full(3, float(size - 1)), "split: the rest's all_reduce")
        other.close()
    # The parent is unchanged by it all.
    y = kit.make(np.ones(5), "int64")
    comm.all_reduce(y)
    c.eq(kit.f64(y), np.full(5, float(size)), "parent after split")


def aborted(comm, kits, c):
    """A request in flight on a communicator that is aborted completes with
    an error instead of waiting for ranks that never join it."""
    rank = comm.rank
    child = comm.split(0, rank)
    if rank == 0 and comm.size > 1:
        req = child.all_reduce(np.ones(8, np.float32), async_op=True)  # alone: never completes
        child.abort()
        e = c.raises(shoal.ShoalError, req.wait, "request of an aborted communicator")
        c.ok(e is None or e.status in (shoal.Status.ABORTED, shoal.Status.PEER),
             "aborted request: status %s" % (e and e.status))
        c.raises(ValueError, child.barrier, "a call after abort", "closed")
    else:
        child.abort()
    c.ok(child.closed, "aborted: closed")
    comm.barrier()


def caller_progress(comm, kits, c):
    """A communicator set to caller-driven progress before its first
    non-blocking call completes them all (waited in every order, polled)
    without a progress thread of its own; set back to the thread, its next
    non-blocking call starts one, after which the setting is refused; bad
    modes always are."""
    sub = comm.split(0, comm.rank)
    c.raises(ValueError, lambda: sub.set_progress("eager"), "set_progress('eager')", "mode")
    before = ref.progress_threads()
    sub.set_progress("caller")
    for kit in kits:
        orders(sub, kit, c)
        polled(sub, kit, c)
    c.ok(ref.progress_threads() == before, "caller progress: %d progress threads, %d before"
         % (ref.progress_threads(), before))
    sub.set_progress("thread")
    x = kits[0].make(np.ones(7), "float64")
    sub.all_reduce(x, async_op=True).wait()
    c.eq(kits[0].f64(x), np.full(7, float(sub.size)), "all_reduce on the progress thread")
    c.ok(ref.progress_threads() == before + 1, "thread progress: %d progress threads, %d before"
         % (ref.progress_threads(), before))
    e = c.raises(shoal.ShoalError, lambda: sub.set_progress("caller"),
                 "set_progress once the progress thread runs", "before")
    c.ok(e is None or e.status == shoal.Status.INVALID_ARG,
         "set_progress refused: status %s" % (e and e.status))
    sub.close()


def run(comm, kits, c):
    for kit in kits:
        orders(comm, kit, c)
        polled(comm, kit, c)
        dropped(comm, kit, c)
        p2p(comm, kit, c)
        rooted(comm, kit, c)
    split(comm, kits, c)
    caller_progress(comm, kits, c)
    aborted(comm, kits, c)
    comm.barrier()
