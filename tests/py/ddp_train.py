#!/usr/bin/python3
"""DistributedDataParallel training on shoal: the backend and the hooks.

Run by tests/test_py_ddp.sh, with python/ on PYTHONPATH:

    python3 ddp_train.py [--ranks N] [--steps S] [--init file|tcp]

It starts N ranks (default 4) with multiprocessing (spawn) over a
FileStore or a TCPStore. The default group is the shoal backend
(init_process_group(backend="shoal")) and a gloo group of the same ranks
is made beside it, so every variant runs in the same processes.

The training is the digits MLP of tests/test_train_digits.c: the data set
of Debian's python3-sklearn (gzipped CSV), the same split and per-rank
batches (splitmix64 over the same seeds), an MLP 64-64-10 (ReLU,
cross-entropy) with the same initial weights, 32 samples per rank and
step, SGD with momentum 0.9 and lr 0.05, S steps (default 200). DDP's
buckets are made small (first bucket 2 KiB, then 10 KiB), so that after
DDP's rebuild the gradients travel in two buckets, [b2, W2] and [b1, W1],
and the hooks keep state for each.

Variants: DDP's own all-reduce on gloo (the plain run, the reference) and
on the shoal backend; then each of shoal's hooks (allreduce, int8 without
and with error feedback, ternary and PowerSGD rank 2 with error feedback)
on the gloo group and on the shoal group. Checks (rank 0 prints one line
per check, "ddp_train: ID ok: ..." or "ddp_train: ID FAILED: ..."; --list
gives the ids):
  same_<variant>    the parameters are bitwise the same on every rank
                    after every step (a hash per step, gathered at the end)
  loss_<variant>    the final training loss against the plain run's: equal
                    to float tolerance (shoal backend, allreduce hook), at
                    most 1.02 times (int8), 1.01 (int8 with feedback), 1.05
                    (ternary, PowerSGD), the bounds of test_train_digits.c
  replay_<variant>  (the compressed hooks) model, optimizer and
                    hook_state.state_dict() saved after S/2 steps
                    (torch.save) and loaded into fresh objects (another
                    initialisation, a new DDP, a new hook state) replay the
                    remaining steps bit for bit; the fresh DDP's first step
                    runs on its one big first-iteration bucket, which the
                    hook state reduces through the checkpoint's two
                    compressors
  error_inflight    (int8 hook, gloo group) rank 0 alone runs a step and
                    aborts its hook state's communicator once the buckets
                    are issued: the buckets' futures fail, and backward
                    raises shoal's error
A table of the figures follows as "# " lines.
"""

import argparse
import datetime
import gzip
import hashlib
import io
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

import shoal.torch as st  # registers backend "shoal"; the hooks
from ref import progress_threads

DIGITS = "/usr/lib/python3/dist-packages/sklearn/datasets/data/digits.csv.gz"
N_TRAIN = 1497
SPLIT_SEED = 20240607
SEED = 1
BATCH = 32
LR = 0.05
MOMENTUM = 0.9
# Equal "to float tolerance": the same arithmetic summed in another order
# (gloo's ring against shoal's schedule, DDP's pre-division against avg)
# for a few hundred steps.
LOSS_RTOL = 1e-4

M64 = (1 << 64) - 1

# The hooks: id, description, hook, state maker, its options, the bound on
# the loss ratio to the plain run (None: equal to float tolerance).
HOOKS = [
    ("ar", "allreduce_hook", st.allreduce_hook, st.allreduce_state, {}, None),
    ("int8", "int8_hook without feedback", st.int8_hook, st.int8_state,
     {"error_feedback": False}, 1.02),
    ("int8ef", "int8_hook with feedback", st.int8_hook, st.int8_state, {}, 1.01),
    ("ternary", "ternary_hook with feedback", st.ternary_hook, st.ternary_state, {}, 1.05),
    ("powersgd", "powersgd_hook rank 2 with feedback", st.powersgd_hook,
     st.powersgd_state, {"rank": 2}, 1.05),
]

# The variants: id, description, group, hook, state maker, options, bound,
# whether a checkpoint's replay is checked (the hooks that keep state).
VARIANTS = [
    ("gloo", "DDP's all-reduce, gloo", "gloo", None, None, {}, None, False),
    ("shoal", "DDP's all-reduce, shoal backend", "shoal", None, None, {}, None, False),
] + [(f"{hid}_{g}", f"{desc}, {g} group", g, hook, maker, options, bound, hid != "ar")
     for g in ("gloo", "shoal") for hid, desc, hook, maker, options, bound in HOOKS]


def check_ids():
    """The ids of the checks, in the order rank 0 prints them."""
    ids = []
    for vid, *_, replay in VARIANTS:
        ids.append(f"same_{vid}")
        if vid != "gloo":
            ids.append(f"loss_{vid}")
        if replay:
            ids.append(f"replay_{vid}")
    return ids + ["progress_threads", "error_inflight"]


# ---- data, as test_train_digits.c makes it ----

class SplitMix:
    def __init__(self, seed):
        self.s = seed & M64

    def next(self):
        self.s = (self.s + 0x9e3779b97f4a7c15) & M64
        z = self.s
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
        return z ^ (z >> 31)

    def uniform(self):
        return (self.next() >> 11) * 2.0 ** -53

    def shuffle(self, v):
        for i in range(len(v), 1, -1):
            j = int(self.uniform() * i)
            v[i - 1], v[j] = v[j], v[i - 1]


def load_digits():
    with gzip.open(DIGITS, "rt") as f:
        raw = np.loadtxt(f, delimiter=",", dtype=np.int64)
    order = list(range(len(raw)))
    SplitMix(SPLIT_SEED).shuffle(order)
    raw = raw[order]
    return (torch.from_numpy((raw[:, :64] / 16.0).astype(np.float32)),
            torch.from_numpy(raw[:, 64].copy()))


def make_batches(rank, size, steps):
    shard = list(range(rank, N_TRAIN, size))
    rng = SplitMix((SEED * 0x2545f4914f6cdd1d + rank * 0x632be59bd9b4e019) & M64)
    out, pos = [], len(shard)
    for _ in range(steps * BATCH):
        if pos == len(shard):
            rng.shuffle(shard)
            pos = 0
        out.append(shard[pos])
        pos += 1
    return torch.tensor(out).view(steps, BATCH)


def make_model(seed):
    """The MLP with test_train_digits.c's initial weights for seed: He
    uniform, Glorot uniform, zero biases (its W1[i][j] is torch's
    weight[j][i])."""
    rng = SplitMix(seed ^ 0xd1b54a32d192ed03)
    a1, a2 = (6.0 / 64) ** 0.5, (6.0 / (64 + 10)) ** 0.5
    w1 = [(2 * rng.uniform() - 1) * a1 for _ in range(64 * 64)]
    w2 = [(2 * rng.uniform() - 1) * a2 for _ in range(64 * 10)]
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    with torch.no_grad():
        model[0].weight.copy_(torch.tensor(w1, dtype=torch.float32).view(64, 64).t())
        model[0].bias.zero_()
        model[2].weight.copy_(torch.tensor(w2, dtype=torch.float32).view(64, 10).t())
        model[2].bias.zero_()
    return model


# ---- training ----

def param_hash(model):
    flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
    digest = hashlib.blake2b(flat.numpy().tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class Run:
    """One variant's DDP model, optimizer and hook state on a group."""

    def __init__(self, model, group, hook, maker, options):
        self.model = model
        self.ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=group,
                                                             bucket_cap_mb=0.01)
        self.opt = torch.optim.SGD(self.ddp.parameters(), lr=LR, momentum=MOMENTUM)
        self.state = None
        if hook is not None:
            self.state = maker(group, **options)
            self.ddp.register_comm_hook(self.state, hook)

    def steps(self, data, batches, first, last):
        x, y = data
        hashes = []
        for step in range(first, last):
            idx = batches[step]
            loss = torch.nn.functional.cross_entropy(self.ddp(x[idx]), y[idx])
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()
            hashes.append(param_hash(self.model))
        return hashes

    def checkpoint(self):
        buf = io.BytesIO()
        torch.save({"model": self.model.state_dict(), "optim": self.opt.state_dict(),
                    "hook": self.state.state_dict()}, buf)
        return buf.getvalue()

    def close(self):
        if self.state is not None:
            self.state.close()


def evaluate(model, data):
    x, y = data
    with torch.no_grad():
        loss = torch.nn.functional.cross_entropy(model(x[:N_TRAIN]), y[:N_TRAIN]).item()
        acc = (model(x[N_TRAIN:]).argmax(1) == y[N_TRAIN:]).double().mean().item() * 100
    return loss, acc


def check_errors(group, rank, data, batches):
    """Rank 0 alone runs a step, and its hook aborts the hook state's
    communicator once the last bucket is issued: the failure in flight
    must fail the bucket's future (through the waiter, not at issue), so
    that backward raises shoal's error. The other ranks wait at a barrier
    meanwhile, then close theirs. Returns {check id: (ok, text)} on rank 0."""
    abort = []

    def hook(state, bucket):
        fut = st.int8_hook(state, bucket)
        if abort and bucket.is_last():
            state.communicator.abort()
        return fut

    run = Run(make_model(SEED), group, hook, st.int8_state, {})
    run.steps(data, batches, 0, 2)  # past DDP's rebuild: the buckets' compressors made
    # Every rank past those steps before rank 0 aborts: its collectives may
    # complete on rank 0 while a peer still takes rank 0's last pieces.
    dist.barrier(group=group)
    abort.append(True)
    out = {}
    if rank == 0:
        what = "a failure in flight fails the bucket's future"
        try:
            run.steps(data, batches, 2, 3)
            out["error_inflight"] = (False, f"{what}: backward returned")
        except RuntimeError as e:
            first = str(e).splitlines()[0]
            # The future's error, raised by then()'s callback in the waiter.
            ok = "running the callback" in first and "compressor.all_reduce" in first
            out["error_inflight"] = (ok, f"{what}: backward raised {first[:200]}")
    dist.barrier(group=group)
    run.close()
    return out


def same_everywhere(hashes, gloo, size):
    mine = torch.tensor(hashes, dtype=torch.int64)
    every = [torch.empty_like(mine) for _ in range(size)]
    dist.all_gather(every, mine, group=gloo)
    return [i for i in range(len(hashes)) if any(int(e[i]) != hashes[i] for e in every)]


def worker(rank, size, init, steps):
    try:
        torch.set_num_threads(1)
        dist.init_process_group("shoal", init_method=init, rank=rank, world_size=size,
                                timeout=datetime.timedelta(seconds=60))
        groups = {"shoal": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
        # Small buckets: after the rebuild, [b2, W2] and [b1, W1].
        dist._DEFAULT_FIRST_BUCKET_BYTES = 2048
        data = load_digits()
        batches = make_batches(rank, size, steps)
        half = steps // 2
        results = {}
        for vid, desc, gname, hook, maker, options, bound, replay in VARIANTS:
            t0 = time.perf_counter()
            group = groups[gname]
            run = Run(make_model(SEED), group, hook, maker, options)
            hashes = run.steps(data, batches, 0, half)
            saved = run.checkpoint() if replay else None
            hashes += run.steps(data, batches, half, steps)
            elapsed = time.perf_counter() - t0
            loss, acc = evaluate(run.model, data)
            ratio = run.state.last_info if run.state is not None else {}
            threads = progress_threads()  # the backend's and the hooks' comms alive
            run.close()
            r = {"desc": desc, "loss": loss, "acc": acc, "bound": bound,
                 "differ": same_everywhere(hashes, groups["gloo"], size), "s": elapsed,
                 "wire": {i: round(info.ratio, 1) for i, info in sorted(ratio.items())},
                 "threads": threads}
            if replay:
                ck = torch.load(io.BytesIO(saved))
                model = make_model(SEED + 1)  # another start: only the checkpoint makes it
                model.load_state_dict(ck["model"])
                again = Run(model, group, hook, maker, options)
                again.opt.load_state_dict(ck["optim"])
                again.state.load_state_dict(ck["hook"])
                with warnings.catch_warnings(record=True) as said:
                    warnings.simplefilter("always")
                    replayed = again.steps(data, batches, half, steps)
                again.close()
                r["replay"] = [i + half for i, (a, b) in
                               enumerate(zip(replayed, hashes[half:])) if a != b]
                r["unfit"] = [str(w.message) for w in said if "shoal hooks" in str(w.message)]
            results[vid] = r
            dist.barrier(group=groups["gloo"])
        errors = check_errors(groups["gloo"], rank, data, batches)
        if rank == 0:
            report(results, errors, steps, size)
        dist.barrier(group=groups["gloo"])
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def report(results, errors, steps, size):
    ref = results["gloo"]["loss"]

    def line(cid, ok, text):
        print(f"ddp_train: {cid} {'ok' if ok else 'FAILED'}: {text}", flush=True)

    for vid, r in results.items():
        d = r["differ"]
        line(f"same_{vid}", not d, f"{r['desc']}: parameters bitwise equal on {size} ranks "
             f"after each of {steps} steps" + (f" (differ after steps {d[:5]})" if d else ""))
        if vid == "gloo":
            continue
        ratio = r["loss"] / ref
        if r["bound"] is None:
            ok = abs(ratio - 1) <= LOSS_RTOL
            want = f"within {LOSS_RTOL:g} of 1"
        else:
            ok = ratio <= r["bound"]
            want = f"at most {r['bound']}"
        line(f"loss_{vid}", ok, f"{r['desc']}: loss {r['loss']:.6f} / plain {ref:.6f} = "
             f"{ratio:.5f}, {want}")
        if "replay" in r:
            bad, unfit = r["replay"], r["unfit"]
            line(f"replay_{vid}", not bad and not unfit,
                 f"{r['desc']}: restored after {steps // 2} steps, the other "
                 f"{steps - steps // 2} replay bit for bit"
                 + (f" (differ after steps {bad[:5]})" if bad else "")
                 + (f" ({unfit[0]})" if unfit else ""))
    busy = {vid: r["threads"] for vid, r in results.items() if r["threads"]}
    line("progress_threads", not busy, "the backend and the hooks drive their operations "
         "themselves: no shoal progress thread on rank 0 after any variant"
         + (f" (progress threads after {busy})" if busy else ""))
    for cid, (ok, text) in errors.items():
        line(cid, ok, text)
    print(f"# {'variant':<50} {'loss':>9} {'ratio':>8} {'held %':>7} {'s':>6}  wire ratio "
          "per bucket")
    for r in results.values():
        print(f"# {r['desc']:<50} {r['loss']:9.6f} {r['loss'] / ref:8.5f} {r['acc']:7.2f} "
              f"{r['s']:6.2f}  {r['wire'] or ''}", flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--init", choices=("file", "tcp"), default="file")
    ap.add_argument("--list", action="store_true", help="print the checks' ids and exit")
    args = ap.parse_args()
    if args.list:
        print(" ".join(check_ids()))
        return 0
    import multiprocessing as mp

    tmp = tempfile.mkdtemp(prefix="shoal_ddp_")
    init = (f"file://{tmp}/store" if args.init == "file"
            else f"tcp://127.0.0.1:{free_port()}")
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=worker, args=(r, args.ranks, init, args.steps))
             for r in range(args.ranks)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    shutil.rmtree(tmp, ignore_errors=True)
    got = [p.exitcode for p in procs]
    if any(got):
        print(f"ddp_train: exit codes {got}", flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
