"""The collectives and point-to-point calls of a Communicator.

Each takes numpy arrays or contiguous CPU torch tensors (by their data
pointers, never copied), blocks by default and returns its output (the
array written), or with async_op=True returns a Request at once. In place
is spelled as shoal.h spells it: the output omitted (all_reduce,
reduce_scatter, all_to_all, broadcast, reduce, scatter on the root) or the
input omitted (all_gather, gather on the root), or an explicit view with
the in-place layout. Arguments are checked here, on the calling rank,
before shoal sees them.
"""

import ctypes

from . import buffers, dtypes
from .buffers import as_buffer, optional


def _flag(value, name):
    if not isinstance(value, bool):
        raise TypeError("%s: expected True or False, got %r" % (name, value))
    return value


def _index(value, size, name):
    if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError("%s: expected an int, got %s" % (name, type(value).__name__))
    if not 0 <= value < size:
        raise ValueError("%s: %d is outside 0..%d" % (name, value, size - 1))
    return value


def _op_for(op, buf):
    op = dtypes.parse_op(op)
    if op in dtypes.BITWISE and buf.dtype not in dtypes.INTEGER:
        raise TypeError("op: %s takes integer types only, and %s is %s"
                        % (op.name.lower(), buf.name, buf.dtype.name.lower()))
    return op


def _counts(values, size, name):
    """A ctypes size_t array of size entries from a sequence of ints."""
    try:
        seq = [int(v) for v in values]
    except (TypeError, ValueError):
        raise TypeError("%s: expected a sequence of %d ints" % (name, size)) from None
    if len(seq) != size:
        raise ValueError("%s: %d entries for %d ranks" % (name, len(seq), size))
    if any(v < 0 for v in seq):
        raise ValueError("%s: negative entry" % name)
    return seq


def _displs(counts, displs, size, name):
    if displs is None:
        out, at = [], 0
        for c in counts:
            out.append(at)
            at += c
        return out
    return _counts(displs, size, name)


def _size_array(seq):
    return (ctypes.c_size_t * len(seq))(*seq)


class Collectives:
    """Mixed into Communicator; uses its _live, _run, rank and size."""

    def all_reduce(self, send, recv=None, *, op="sum", async_op=False):
        """recv[i] = op over the ranks of send[i]; in place without recv."""
        h = self._live()
        s = as_buffer(send, "send")
        op = _op_for(op, s)
        r = optional(recv, "recv")
        if r is None:
            r = s.need_writable()
        buffers.same_type(s, r)
        buffers.need_count(r.need_writable(), s.count, "send's count")
        return self._run("all_reduce", "shoal_allreduce", "shoal_iallreduce",
                         (s.ptr, r.ptr, s.count, s.dtype, op, h), _flag(async_op, "async_op"),
                         (s, r), r.obj)

    def reduce_scatter(self, send, recv=None, *, op="sum", async_op=False):
        """recv = op over the ranks of block `rank` of send (size equal
        blocks); without recv, in place: the result is block `rank` of send,
        which is returned."""
        h = self._live()
        s = as_buffer(send, "send")
        op = _op_for(op, s)
        n = buffers.divisible(s, self.size, "one block per rank")
        r = optional(recv, "recv")
        if r is None:
            out, ptr = s.need_writable().block(self.rank, n), s.at(self.rank * n)
        else:
            buffers.same_type(s, r)
            buffers.need_count(r.need_writable(), n, "send's count / size")
            out, ptr = r.obj, r.ptr
        return self._run("reduce_scatter", "shoal_reduce_scatter", "shoal_ireduce_scatter",
                         (s.ptr, ptr, n, s.dtype, op, h), _flag(async_op, "async_op"),
                         (s, r), out)

    def all_gather(self, send, recv, *, async_op=False):
        """Block j of recv = send of rank j; send None: in place (block
        `rank` of recv is this rank's input)."""
        h = self._live()
        r = as_buffer(recv, "recv").need_writable()
        n = buffers.divisible(r, self.size, "one block per rank")
        s = optional(send, "send")
        if s is not None:
            buffers.same_type(s, r)
            buffers.need_count(s, n, "recv's count / size")
        ptr = s.ptr if s is not None else r.at(self.rank * n)
        return self._run("all_gather", "shoal_allgather", "shoal_iallgather",
                         (ptr, r.ptr, n, r.dtype, h), _flag(async_op, "async_op"), (s, r), r.obj)

    def all_to_all(self, send, recv=None, *, send_counts=None, recv_counts=None,
                   send_displs=None, recv_displs=None, async_op=False):
        """Block j of send goes to rank j, block j of recv comes from rank j;
        in place without recv. With send_counts and recv_counts (one entry
        per rank; recv_counts[j] equal to rank j's send_counts[rank]) the
        blocks differ in size (shoal_alltoallv); displacements default to
        the blocks packed in rank order."""
        h = self._live()
        s = as_buffer(send, "send")
        r = optional(recv, "recv")
        if r is None:
            r = s.need_writable()
        buffers.same_type(s, r)
        r.need_writable()
        async_op = _flag(async_op, "async_op")
        if send_counts is None and recv_counts is None:
            if send_displs is not None or recv_displs is not None:
                raise ValueError("send_displs, recv_displs: given without send_counts and "
                                 "recv_counts")
            n = buffers.divisible(s, self.size, "one block per rank")
            buffers.need_count(r, s.count, "send's count")
            return self._run("all_to_all", "shoal_alltoall", "shoal_ialltoall",
                             (s.ptr, r.ptr, n, s.dtype, h), async_op, (s, r), r.obj)
        if send_counts is None or recv_counts is None:
            raise ValueError("%s: needed with %s" % (
                "recv_counts" if recv_counts is None else "send_counts",
                "send_counts" if recv_counts is None else "recv_counts"))
        arrays = []
        for buf, counts, displs, cname, dname in (
                (s, send_counts, send_displs, "send_counts", "send_displs"),
                (r, recv_counts, recv_displs, "recv_counts", "recv_displs")):
            c = _counts(counts, self.size, cname)
            d = _displs(c, displs, self.size, dname)
            end = max((ci + di for ci, di in zip(c, d) if ci), default=0)
            if end > buf.count:
                raise ValueError("%s: %s and %s reach element %d of %d"
                                 % (buf.name, cname, dname, end, buf.count))
            arrays += [_size_array(c), _size_array(d)]
        sc, sd, rc, rd = arrays
        return self._run("all_to_all", "shoal_alltoallv", "shoal_ialltoallv",
                         (s.ptr, sc, sd, r.ptr, rc, rd, s.dtype, h), async_op,
                         (s, r, arrays), r.obj)

    def broadcast(self, send, recv=None, *, root=0, async_op=False):
        """recv = root's send on every rank; without recv, in place (send is
        then the output everywhere). send is read on the root only, and may
        be None elsewhere when recv is given."""
        h = self._live()
        root = _index(root, self.size, "root")
        s = optional(send, "send")
        r = optional(recv, "recv")
        if r is None:
            if s is None:
                raise TypeError("send: needed (or recv, on a rank other than the root)")
            r = s
        elif s is None and self.rank == root:
            raise TypeError("send: needed on the root")
        r.need_writable()
        if s is not None:
            buffers.same_type(s, r)
            buffers.need_count(s, r.count, "recv's count")
        ptr = s.ptr if s is not None else r.ptr
        return self._run("broadcast", "shoal_broadcast", "shoal_ibroadcast",
                         (ptr, r.ptr, r.count, r.dtype, root, h), _flag(async_op, "async_op"),
                         (s, r), r.obj)

    def reduce(self, send, recv=None, *, op="sum", root=0, async_op=False):
        """recv on the root = op over the ranks of send; without recv, in
        place on the root. Elsewhere recv is not touched (and may be None);
        returns the output on the root, None elsewhere."""
        h = self._live()
        root = _index(root, self.size, "root")
        s = as_buffer(send, "send")
        op = _op_for(op, s)
        r = optional(recv, "recv")
        is_root = self.rank == root
        if r is None and is_root:
            r = s.need_writable()
        if r is not None:
            buffers.same_type(s, r)
            buffers.need_count(r, s.count, "send's count")
            if is_root:
                r.need_writable()
        ptr = r.ptr if r is not None and is_root else None
        return self._run("reduce", "shoal_reduce", "shoal_ireduce",
                         (s.ptr, ptr, s.count, s.dtype, op, root, h), _flag(async_op, "async_op"),
                         (s, r), r.obj if is_root else None)

    def gather(self, send, recv=None, *, root=0, async_op=False):
        """Block j of the root's recv = send of rank j; send None on the
        root: in place (its block of recv is its input). recv is not
        touched elsewhere (and may be None); returns it on the root."""
        h = self._live()
        root = _index(root, self.size, "root")
        is_root = self.rank == root
        s = optional(send, "send")
        r = optional(recv, "recv")
        if is_root:
            if r is None:
                raise TypeError("recv: needed on the root")
            r.need_writable()
            n = buffers.divisible(r, self.size, "one block per rank")
            if s is not None:
                buffers.need_count(s, n, "recv's count / size")
            ptr = s.ptr if s is not None else r.at(root * n)
        else:
            if s is None:
                raise TypeError("send: needed on a rank other than the root")
            n, ptr = s.count, s.ptr
            if r is not None:
                buffers.need_count(r, n * self.size, "send's count x size")
        buffers.same_type(s, r)
        dtype = (s or r).dtype
        return self._run("gather", "shoal_gather", "shoal_igather",
                         (ptr, r.ptr if is_root else None, n, dtype, root, h),
                         _flag(async_op, "async_op"), (s, r), r.obj if is_root else None)

    def scatter(self, send, recv=None, *, root=0, async_op=False):
        """recv of rank j = block j of the root's send; without recv on the
        root, in place (its block of send is its output, returned). send is
        read on the root only (and may be None elsewhere)."""
        h = self._live()
        root = _index(root, self.size, "root")
        is_root = self.rank == root
        s = optional(send, "send")
        r = optional(recv, "recv")
        if is_root:
            if s is None:
                raise TypeError("send: needed on the root")
            n = buffers.divisible(s, self.size, "one block per rank")
            if r is None:
                out, ptr = s.need_writable().block(root, n), s.at(root * n)
            else:
                buffers.need_count(r.need_writable(), n, "send's count / size")
                out, ptr = r.obj, r.ptr
            sptr = s.ptr
        else:
            if r is None:
                raise TypeError("recv: needed on a rank other than the root")
            n, out, ptr = r.need_writable().count, r.obj, r.ptr
            if s is not None:
                buffers.need_count(s, n * self.size, "recv's count x size")
            sptr = None
        buffers.same_type(s, r)
        dtype = (s or r).dtype
        return self._run("scatter", "shoal_scatter", "shoal_iscatter",
                         (sptr, ptr, n, dtype, root, h), _flag(async_op, "async_op"), (s, r), out)

    def send(self, buf, peer, *, async_op=False):
        """Send buf to peer, whose matching recv takes the same count and
        type. Blocking sends may wait for the receiver: two ranks that send
        to each other first use async_op=True."""
        h = self._live()
        b = as_buffer(buf, "buf")
        peer = _index(peer, self.size, "peer")
        return self._run("send", "shoal_send", "shoal_isend", (b.ptr, b.count, b.dtype, peer, h),
                         _flag(async_op, "async_op"), (b,), None)

    def recv(self, buf, peer, *, async_op=False):
        """Receive into buf from peer; returns buf."""
        h = self._live()
        b = as_buffer(buf, "buf").need_writable()
        peer = _index(peer, self.size, "peer")
        return self._run("recv", "shoal_recv", "shoal_irecv", (b.ptr, b.count, b.dtype, peer, h),
                         _flag(async_op, "async_op"), (b,), b.obj)

    def barrier(self, *, async_op=False):
        """Return once every rank has entered the barrier."""
        h = self._live()
        return self._run("barrier", "shoal_barrier", "shoal_ibarrier", (h,),
                         _flag(async_op, "async_op"), (), None)
