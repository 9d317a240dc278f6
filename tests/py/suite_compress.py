"""Compressor: each kind's all-reduce within its error bound and bitwise the
same on every rank, checkpoints replaying bit for bit, reset, and the
non-blocking form."""

import numpy as np

import shoal

COUNT = 4099  # an odd count: a last block shorter than the others


def inputs(size, count, step, seed=0):
    """Every rank's gradient at step: random signs, magnitudes varying from
    block to block."""
    out = []
    for r in range(size):
        rng = np.random.default_rng([seed, r, step])
        mag = 2.0 ** ((np.arange(count) // 50) % 9 - 4)
        out.append((rng.random(count) - 0.5) * mag)
    return out


def same_everywhere(comm, arr, c, what):
    """arr's bits are the same on every rank."""
    bits = np.frombuffer(np.ascontiguousarray(arr).tobytes(), dtype=np.uint8)
    all_bits = np.empty(bits.size * comm.size, dtype=np.uint8)
    comm.all_gather(bits, all_bits)
    rows = all_bits.reshape(comm.size, -1)
    c.ok(all((rows[r] == rows[0]).all() for r in range(comm.size)), what + ": bitwise equal")


def int8(comm, kit, c):
    size, rank = comm.size, comm.rank
    with shoal.Compressor(comm, "int8", COUNT, "float32") as comp:
        ins = inputs(size, COUNT, 0)
        x = kit.make(ins[rank], "float32")
        out = kit.full(COUNT, "float32")
        c.ok(comp.all_reduce(x, out) is out, "int8: returns recv")
        got, want = kit.f64(out), np.sum(ins, axis=0).astype(np.float32)
        rel = np.linalg.norm(got - want) / max(np.linalg.norm(want), 1e-30)
        c.ok(rel < 0.02 if size > 1 else rel == 0, "int8 %s: relative error %g" % (kit.name, rel))
        same_everywhere(comm, got, c, "int8 %s" % kit.name)
        info = comp.last_info
        c.ok(info is not None and info.step == 0, "int8: info %s" % (info,))
        if size > 1:
            c.ok(info.ratio > 3, "int8: ratio %s" % info.ratio)
        # Average, in place.
        y = kit.make(ins[rank], "float32")
        comp.all_reduce(y, op="avg")
        rel = np.linalg.norm(kit.f64(y) - want / size) / max(np.linalg.norm(want / size), 1e-30)
        c.ok(rel < 0.02 if size > 1 else rel == 0, "int8 avg: relative error %g" % rel)
        c.ok(comp.last_info.step == 1, "int8: step %d" % comp.last_info.step)


def ternary(comm, kit, c):
    size, rank = comm.size, comm.rank
    with shoal.Compressor(comm, "ternary", COUNT, "float32", clip_sigma=0.0) as comp:
        ins = inputs(size, COUNT, 3)
        x = kit.make(ins[rank], "float32")
        comp.all_reduce(x)
        got, want = kit.f64(x), np.sum(ins, axis=0)
        # Each rank's value became -1, 0 or +1 times its block's scale, the
        # largest magnitude of the block over the ranks (bf16 rounded up).
        err = np.abs(got - want)
        blocks = np.arange(COUNT) // 64
        amax = np.zeros(blocks[-1] + 1)
        np.maximum.at(amax, blocks, np.max(np.abs(ins), axis=0))
        bound = size * amax[blocks] * (1 + 2.0 ** -7) + 1e-12
        c.ok((err <= bound).all(), "ternary %s: error above the bound at %d"
             % (kit.name, int(np.argmax(err > bound))))
        same_everywhere(comm, got, c, "ternary %s" % kit.name)


def powersgd(comm, kit, c):
    """A bucket of a matrix whose sum over the ranks has rank <= size and a
    vector: PowerSGD of that rank gives the matrix back up to rounding, and
    the vector exactly."""
    size, rank = comm.size, comm.rank
    rows, cols, vec = 24, 16, 7
    layout = [(rows, cols), (1, vec)]
    with shoal.Compressor(comm, "powersgd", None, "float32", layout=layout, rank=size,
                          warmup_steps=0) as comp:
        c.ok(comp.count == rows * cols + vec, "powersgd: count from the layout")
        mats, vecs = [], []
        for r in range(size):
            rng = np.random.default_rng([7, r])
            mats.append(np.outer(rng.random(rows) - 0.5, rng.random(cols) - 0.5))
            vecs.append(np.arange(vec, dtype=np.float64) * (r + 1))
        x = kit.make(np.concatenate([mats[rank].reshape(-1), vecs[rank]]), "float32")
        comp.all_reduce(x)
        got = kit.f64(x)
        want_m = np.sum(mats, axis=0).reshape(-1)
        err = np.linalg.norm(got[:rows * cols] - want_m) / np.linalg.norm(want_m)
        c.ok(err < 1e-3, "powersgd %s: matrix relative error %g" % (kit.name, err))
        c.eq(got[rows * cols:], np.sum(vecs, axis=0), "powersgd %s: the vector" % kit.name)
        same_everywhere(comm, got, c, "powersgd %s" % kit.name)


def checkpoint(comm, kit, c):
    """state_dict after step 1 replays step 2 bit for bit; reset equals a
    new compressor; the non-blocking call equals the blocking one."""
    size, rank = comm.size, comm.rank
    comp = shoal.Compressor(comm, "int8", COUNT, "float32", stochastic=True, seed=5)
    fresh = comp.state_dict()
    comp.all_reduce(kit.make(inputs(size, COUNT, 10)[rank], "float32"))
    saved = comp.state_dict()
    c.ok(len(saved) == len(fresh) and saved != fresh or size == 1,
         "checkpoint: the state moved with a step")
    step2 = kit.make(inputs(size, COUNT, 11)[rank], "float32")
    first = comp.all_reduce(step2, kit.full(COUNT, "float32"))
    comp.load_state_dict(saved)
    again = comp.all_reduce(step2, kit.full(COUNT, "float32"), async_op=True).wait()
    c.eq(kit.f64(again), kit.f64(first), "checkpoint %s: step 2 replayed" % kit.name)
    c.ok(comp.last_info.step == 1, "checkpoint: step restored")
    comp.reset()
    c.ok(comp.state_dict() == fresh, "checkpoint: reset equals new")
    c.raises(ValueError, lambda: comp.load_state_dict(saved[:-1]), "checkpoint: short state",
             "state")
    c.raises(TypeError, lambda: comp.all_reduce(kit.full(COUNT, "float64")),
             "compressor: float64", "send")
    c.raises(ValueError, lambda: comp.all_reduce(kit.full(COUNT - 1, "float32")),
             "compressor: count", "send")
    c.raises(ValueError, lambda: comp.all_reduce(kit.full(COUNT, "float32"), op="max"),
             "compressor: max", "op")
    comp.close()
    c.raises(ValueError, comp.state_dict, "compressor: closed", "closed")


def run(comm, kits, c):
    for kit in kits:
        int8(comm, kit, c)
        ternary(comm, kit, c)
        powersgd(comm, kit, c)
        checkpoint(comm, kit, c)
    comm.barrier()
