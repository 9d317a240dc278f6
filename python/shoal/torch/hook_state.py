"""The state of shoal's DDP communication hooks (hooks.py).

A HookState owns a shoal communicator of the ranks of DDP's process group
(made here, whatever that group's backend), the thread that completes the
hooks' futures (hook_waiter.py), and, for the compressed hooks, one shoal
compressor per bucket: its error-feedback residual, PowerSGD's Q, its step.

Buckets and parameters. DDP numbers its buckets (bucket.index()) but
changes them once: its first iteration reduces every gradient of a dtype
in one bucket, in the module's order, and then it rebuilds the buckets in
the order the gradients became ready. A compressor's state only fits the
tensors it was made for, so a bucket is known here by its parameters, as
positions: the order in which the hooks first saw each parameter, which is
the same on every rank, in every run of the same model, and in a fresh DDP
of it. A compressor is placed per bucket index with that bucket's
parameters; a bucket of other parameters gets a new one (the old one's
residual is dropped: that happens at the rebuild).

Checkpoints. state_dict() gives each bucket's parameters, shapes and its
compressor's bytes; load_state_dict() takes them back. A fresh DDP then
runs its first iteration on the one big bucket again, so a bucket made of
several checkpointed ones is reduced through them: its gradients are
copied out in each one's order, reduced by each one's compressor (in bucket
order, as the run that saved them did), and copied back. Once DDP has
rebuilt its buckets they match the checkpoint's and the compressors work
on DDP's buffers directly, so a restored run replays the saved one bit for
bit.

Thread-safety: the hook, state_dict, load_state_dict and close hold one
lock; the hook runs on the thread of the backward pass, which DDP calls
for each bucket in index order, the same on every rank.
"""

import threading
import warnings

import torch
import torch.distributed as dist

from ..closing import Closing
from ..comm import Communicator, get_unique_id
from ..compressor import KINDS, Compressor
from ..errors import ShoalError
from .hook_waiter import Waiter

FORMAT = "shoal.torch.hooks/1"
# The gradient types a compressor takes; allreduce_hook takes any shoal has.
COMPRESSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def join_group(group):
    """A shoal Communicator of the ranks of a torch process group (None:
    the default group), in the group's rank order. Collective over the
    group: its rank 0 makes the id and broadcasts it over the group."""
    world = dist.group.WORLD
    g = world if group is None else group
    rank = dist.get_rank(g)
    if rank < 0:
        raise ValueError("this process is not a member of the process group")
    size = dist.get_world_size(g)
    root = 0 if g is world else dist.get_global_rank(g, 0)
    box = [get_unique_id() if rank == 0 else None]
    dist.broadcast_object_list(box, src=root, group=None if g is world else g)
    comm = Communicator.from_unique_id(size, box[0], rank)
    # The state's waiter thread waits every request the hooks issue, in
    # issue order, and so drives them: no progress thread besides it.
    comm.set_progress("caller")
    return comm


def matrix(shape):
    """A gradient's shape as PowerSGD's rows x cols: a vector (or scalar)
    is one row, a tensor of more dimensions its first by the rest."""
    if len(shape) < 2:
        return (1, shape[0] if shape else 1)
    cols = 1
    for d in shape[1:]:
        cols *= d
    return (shape[0], cols)


class _Slot:
    """A compressor and the bucket it was made for."""

    __slots__ = ("index", "params", "shapes", "dtype", "comp")

    def __init__(self, index, params, shapes, dtype, comp):
        self.index = index
        self.params = params  # tuple of positions, in the bucket's order
        self.shapes = shapes  # tuple of shape tuples, likewise
        self.dtype = dtype
        self.comp = comp

    def entry(self):
        return {"params": list(self.params), "shapes": [list(s) for s in self.shapes],
                "dtype": str(self.dtype), "state": self.comp.state_dict()}


def _check_entry(index, e):
    """A checkpoint's bucket entry, as load_state_dict wants it."""
    ok = (isinstance(index, int) and isinstance(e, dict)
          and isinstance(e.get("params"), (list, tuple))
          and isinstance(e.get("shapes"), (list, tuple))
          and len(e["params"]) == len(e["shapes"])
          and isinstance(e.get("dtype"), str)
          and isinstance(e.get("state"), (bytes, bytearray)))
    if not ok:
        raise ValueError("state_dict: bucket %r is not an entry of HookState.state_dict()"
                         % (index,))
    return {"params": tuple(int(p) for p in e["params"]),
            "shapes": tuple(tuple(int(d) for d in s) for s in e["shapes"]),
            "dtype": e["dtype"], "state": bytes(e["state"])}


def _unwrap(fut):
    return fut.value()  # raises the exception the waiter set


class HookState(Closing):
    """The state passed to DDP's register_comm_hook with one of shoal's
    hooks (make it with allreduce_state, int8_state, ternary_state or
    powersgd_state in hooks.py).

    process_group: the group DDP reduces over (None: the default group);
    every rank of it makes its HookState at the same point, since making
    one is collective. kind: None (plain average) or a compressor kind of
    shoal.Compressor, with its options (None keeps shoal's default);
    bucket i's compressor has the seed seed + i. close() (or a with block)
    waits for the buckets in flight and frees the communicator.
    """

    def __init__(self, process_group=None, kind=None, *, error_feedback=True, block=None,
                 stochastic=None, clip_sigma=None, rank=None, warmup=None, seed=0, algo=None):
        self._waiter = None  # until joined: close() has nothing to stop
        self._comm = None
        if kind is not None and kind not in KINDS:
            raise ValueError("kind: %r is not one of %s" % (kind, ", ".join(KINDS)))
        if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
            raise TypeError("seed: expected an int >= 0, got %r" % (seed,))
        opts = {"error_feedback": error_feedback, "block": block, "stochastic": stochastic,
                "clip_sigma": clip_sigma, "rank": rank, "warmup_steps": warmup, "algo": algo}
        self._kind = kind
        self._options = {k: v for k, v in opts.items() if v is not None} if kind else {}
        self._seed = seed
        self._lock = threading.RLock()
        self._positions = {}  # id(parameter) -> position
        self._params = []     # the parameters seen, kept so that their ids stay theirs
        self._slots = {}      # bucket index -> _Slot
        self._saved = {}      # bucket index -> checkpoint entry not placed yet
        self._warned = False
        self._comm = join_group(process_group)
        self._waiter = Waiter("shoal-ddp-hook")

    @property
    def kind(self):
        return self._kind

    @property
    def communicator(self):
        """The shoal Communicator the hooks reduce over."""
        return self._comm

    @property
    def last_info(self):
        """{bucket index: shoal.CompressInfo of its last completed call}."""
        with self._lock:
            return {i: s.comp.last_info for i, s in self._slots.items()
                    if s.comp.last_info is not None}

    # ---- the hook ----

    def reduce(self, bucket, hook):
        """Issue the average of a bucket over the group (compressed for a
        compressing state) and return a future of the bucket's buffer,
        completed by the waiter. hook names the caller in errors."""
        fut = torch.futures.Future()
        self._issue(bucket, hook, fut)
        # Future.set_exception keeps the exception as the future's value,
        # which DDP (C++) would take for the result and fail to cast; a
        # then() callback that raises makes a future that is in error.
        return fut.then(_unwrap)

    def _issue(self, bucket, hook, fut):
        with self._lock:
            comm = self._live(hook)
            buf = bucket.buffer()
            if self._kind is None:
                req = comm.all_reduce(buf, op="avg", async_op=True)
                self._waiter.submit((req,), lambda: buf, fut)
                return
            if buf.dtype not in COMPRESSED_DTYPES:
                raise TypeError("%s: a bucket of %s gradients; shoal's compressors take "
                                "float32, float16 and bfloat16 (allreduce_hook takes any type)"
                                % (hook, buf.dtype))
            grads = bucket.gradients()
            key = tuple(self._position(p) for p in bucket.parameters())
            if len(key) != len(grads):
                raise RuntimeError("%s: the bucket has %d gradients but %d parameters"
                                   % (hook, len(grads), len(key)))
            shapes = dict(zip(key, (tuple(g.shape) for g in grads)))
            slots = self._plan(bucket.index(), key, shapes, buf.dtype)
            if len(slots) == 1 and slots[0].params == key:
                req = slots[0].comp.all_reduce(buf, op="avg", async_op=True)
                self._waiter.submit((req,), lambda: buf, fut)
                return
            self._reduce_through(slots, dict(zip(key, grads)), buf, fut)

    def _reduce_through(self, slots, views, buf, fut):
        """Reduce a bucket through compressors of other buckets (a restored
        checkpoint's, before DDP rebuilt its buckets): each one's
        gradients gathered in its order, reduced, and scattered back."""
        staged = [torch.cat([views[p].reshape(-1) for p in s.params]) for s in slots]
        issued = []
        try:
            for s, t in zip(slots, staged):
                issued.append(s.comp.all_reduce(t, op="avg", async_op=True))
        finally:
            if len(issued) < len(slots) and issued:
                # Issued ones are collected; the bucket's future is the error.
                self._waiter.submit(tuple(issued), lambda: buf, torch.futures.Future())

        def finish():
            for s, t in zip(slots, staged):
                at = 0
                for p in s.params:
                    v = views[p]
                    n = v.numel()
                    v.copy_(t[at:at + n].view_as(v))
                    at += n
            return buf

        self._waiter.submit(tuple(issued), finish, fut)

    def _position(self, param):
        pos = self._positions.get(id(param))
        if pos is None:
            pos = len(self._params)
            self._positions[id(param)] = pos
            self._params.append(param)
        return pos

    def _plan(self, index, key, shapes, dtype):
        """The compressors that reduce a bucket of these parameters: its
        own; the checkpoint's that make it up exactly; or a new one. (Live
        compressors of other buckets are not borrowed: after DDP's rebuild
        that would copy every bucket in and out at every step.)"""
        slot = self._slots.get(index)
        if slot is not None and slot.params == key and slot.dtype == dtype:
            return [slot]
        want = set(key)

        def fits(params, their_shapes):
            return all(shapes.get(p) == s for p, s in zip(params, their_shapes))

        saved = self._cover(
            {i: e["params"] for i, e in self._saved.items()
             if e["dtype"] == str(dtype) and fits(e["params"], e["shapes"])}, want)
        if saved is not None:
            placed = []
            for i in saved:
                e = self._saved.pop(i)
                placed.append(self._place(i, e["params"], e["shapes"], dtype, e["state"]))
            return placed
        return [self._place(index, key, tuple(shapes[p] for p in key), dtype, None)]

    @staticmethod
    def _cover(table, want):
        """The indices of table (index -> params) whose parameters, apart,
        make up want exactly, in index order; None if they do not."""
        inside = sorted(i for i, params in table.items() if params and set(params) <= want)
        if sum(len(table[i]) for i in inside) != len(want):
            return None
        got = set()
        for i in inside:
            got.update(table[i])
        return inside if got == want else None

    def _place(self, index, params, shapes, dtype, state):
        """A compressor for bucket index (collective: every rank places the
        same ones in the same order), replacing the ones it overlaps."""
        mine = set(params)
        for j, s in list(self._slots.items()):
            if j == index or not mine.isdisjoint(s.params):
                del self._slots[j]
                s.comp.close()
        for j, e in list(self._saved.items()):
            if j == index or not mine.isdisjoint(e["params"]):
                del self._saved[j]
                if not self._warned:
                    self._warned = True
                    warnings.warn("shoal hooks: the checkpoint's state of bucket %d does not "
                                  "fit DDP's buckets (other parameters, shapes or dtype); "
                                  "its gradients start afresh" % j, RuntimeWarning)
        comp = Compressor(self._comm, self._kind, dtype=dtype,
                          layout=[matrix(s) for s in shapes], seed=self._seed + index,
                          **self._options)
        try:
            if state is not None:
                comp.load_state_dict(state)
        except BaseException:
            comp.close()
            raise
        slot = _Slot(index, tuple(params), tuple(shapes), dtype, comp)
        self._slots[index] = slot
        return slot

    # ---- checkpoints ----

    def synchronize(self):
        """Return once every bucket issued so far is complete."""
        waiter = self._waiter
        if waiter is not None:
            waiter.drain()

    def state_dict(self):
        """This rank's hook state for a checkpoint (a dict of ints, lists,
        strings and bytes: torch.save takes it): each bucket's parameters
        and its compressor's state. Waits for the buckets in flight."""
        with self._lock:
            self._live("state_dict")
            self.synchronize()
            buckets = {i: dict(e, params=list(e["params"]),
                               shapes=[list(s) for s in e["shapes"]])
                       for i, e in self._saved.items()}
            for i, s in self._slots.items():
                buckets[i] = s.entry()
            return {"format": FORMAT, "kind": self._kind, "options": dict(self._options),
                    "seed": self._seed, "nranks": self._comm.size, "buckets": buckets}

    def load_state_dict(self, state_dict):
        """Take back a state of state_dict(), saved by this rank from a
        state of the same kind, options, seed and rank count. Compressors
        of the same buckets take their state at once; the rest are placed
        when DDP's buckets reach them (see the module's comment). Local;
        not while a backward pass runs."""
        d = state_dict
        if not isinstance(d, dict) or d.get("format") != FORMAT:
            raise ValueError("state_dict: not a state of HookState.state_dict() (format %r)"
                             % (d.get("format") if isinstance(d, dict) else type(d).__name__))
        with self._lock:
            self._live("load_state_dict")
            mine = {"kind": self._kind, "options": self._options, "seed": self._seed,
                    "nranks": self._comm.size}
            for name, value in mine.items():
                if d.get(name) != value:
                    raise ValueError("state_dict: saved with %s %r, where this state has %r"
                                     % (name, d.get(name), value))
            if not isinstance(d.get("buckets"), dict):
                raise ValueError("state_dict: no buckets")
            entries = {i: _check_entry(i, e) for i, e in d["buckets"].items()}
            self.synchronize()
            for i, s in list(self._slots.items()):
                e = entries.get(i)
                if (e is not None and e["params"] == s.params and e["shapes"] == s.shapes
                        and e["dtype"] == str(s.dtype)):
                    s.comp.load_state_dict(e["state"])
                    del entries[i]
                else:
                    del self._slots[i]
                    s.comp.close()
            self._saved = entries
            self._warned = False

    # ---- life ----

    def _live(self, call):
        if self._waiter is None:
            raise ValueError("%s: the hook state is closed" % call)
        return self._comm

    def close(self):
        """Wait for the buckets in flight, then free the compressors and
        the communicator. A compressor that cannot be freed raises after
        the rest are."""
        with self._lock:
            waiter, self._waiter = self._waiter, None
            if waiter is not None:
                waiter.close()
            comm, self._comm = self._comm, None
            error = None
            slots, self._slots = list(self._slots.values()), {}
            for s in slots:
                try:
                    s.comp.close()
                except ShoalError as e:
                    error = error or e
            if comm is not None:
                comm.close()
            if error is not None:
                raise error

    def __repr__(self):
        return "<shoal.torch.HookState %s, %d buckets%s>" % (
            self._kind or "allreduce", len(self._slots), " closed" if self._waiter is None else "")
