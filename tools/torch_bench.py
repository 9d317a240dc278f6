#!/usr/bin/python3
"""torch_bench: shoal against gloo as PyTorch programs see them.

    /usr/bin/python3 tools/torch_bench.py [--ranks 2,4] [-b 8] [-e 64M] [options]

For each rank count the tool starts that many ranks with multiprocessing
(spawn) on this host, over a FileStore, with the default group on the shoal
backend (import shoal.torch; init_process_group(backend="shoal")) and a
gloo group of the same ranks beside it. Then:

1. torch.distributed.all_reduce (float32 sum, in place) from --minbytes to
   --maxbytes, on the gloo group and on the shoal group. A measurement is
   a barrier, one call on the group measured (which lines its ranks up
   again: a barrier's ranks leave it up to a scheduler's slice apart), and
   then a run of calls lasting about 50 ms (at least 2 calls, at most
   --iters; the count from the slowest rank's time for that one call, so
   that every rank makes the same number); its time per call is the
   slowest rank's. Each size is measured --reps times, gloo and shoal
   alternating, and the table gives the medians: latency, bus bandwidth
   (2 (n-1)/n x bytes / time, as nccl-tests count it) and shoal's speed-up
   over gloo (gloo's time / shoal's).
2. The DDP example of the README (an MLP 1024-1024-10, --ddp-batch random
   samples per rank, SGD with momentum) through DistributedDataParallel on
   gloo, on the shoal backend, and with each of shoal's hooks
   (shoal.torch.allreduce_hook, int8_hook, ternary_hook, powersgd_hook
   rank 4) on the shoal group: the median step time of --reps repetitions
   of --ddp-steps steps, the variants alternating, and its ratio to gloo's.

Timings on a loaded or shared machine are noisy; the medians damp the
noise but do not remove it. Exit status 0, or 1 when a rank failed.
"""

import argparse
import datetime
import importlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "python"))  # the checkout's package

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

RUN_SECONDS = 0.05  # how long a measurement's run of calls lasts, past 2 calls


def size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    mult = units.get(text[-1:].lower(), 1)
    digits = text[:-1] if mult > 1 else text
    if not digits.isdigit() or int(digits) * mult < 4:
        raise argparse.ArgumentTypeError(f'wants a size of 4 bytes or more, such as 8, 1K, '
                                         f'64M, not "{text}"')
    return int(digits) * mult


def at_least(low):
    def parse(text):
        if not text.lstrip("-").isdigit() or int(text) < low:
            raise argparse.ArgumentTypeError(f'wants an integer >= {low}, not "{text}"')
        return int(text)
    return parse


def rank_counts(text):
    try:
        counts = [int(t) for t in text.split(",")]
    except ValueError:
        counts = []
    if not counts or min(counts) < 2:
        raise argparse.ArgumentTypeError(f'wants rank counts of 2 or more, such as 2,4, '
                                         f'not "{text}"')
    return counts


def parse_args():
    p = argparse.ArgumentParser(prog="torch_bench", allow_abbrev=False,
                                description=__doc__.split("\n")[0])
    p.add_argument("--ranks", type=rank_counts, default=[2, 4],
                   help="rank counts, comma-separated (default 2,4)")
    p.add_argument("-b", "--minbytes", type=size, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", type=size, default=64 << 20,
                   help="largest size (default 64M)")
    p.add_argument("-f", "--stepfactor", type=at_least(2), default=4,
                   help="factor between sizes (default 4; the largest size is always run)")
    p.add_argument("-n", "--iters", type=at_least(2), default=10000,
                   help="calls per measurement, at most (default 10000; a measurement "
                        "lasts about 50 ms)")
    p.add_argument("-r", "--reps", type=at_least(5), default=5,
                   help="interleaved repetitions, at least 5 (default 5)")
    p.add_argument("--ddp-steps", type=at_least(0), default=10,
                   help="timed DDP steps per repetition (default 10; 0: no DDP table)")
    p.add_argument("--ddp-batch", type=at_least(1), default=64,
                   help="samples per rank and DDP step (default 64)")
    p.add_argument("--threads", type=at_least(1), default=1,
                   help="torch threads per rank (default 1)")
    return p.parse_args()


def sizes(args):
    out, b = [], args.minbytes
    while b < args.maxbytes:
        out.append(b)
        b *= args.stepfactor
    out.append(args.maxbytes)
    return [s - s % 4 for s in out]


def slowest(seconds, gloo):
    t = torch.tensor([seconds], dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX, group=gloo)
    return t.item()


def time_allreduce(tensor, group, iters, gloo):
    dist.barrier(group=gloo)
    t0 = time.perf_counter()
    dist.all_reduce(tensor, group=group)  # lines the ranks up; warms
    one = slowest(time.perf_counter() - t0, gloo)
    calls = max(2, min(iters, int(RUN_SECONDS / max(one, 1e-9))))
    dist.all_reduce(tensor, group=group)  # lines them up after the gloo call
    t0 = time.perf_counter()
    for _ in range(calls):
        dist.all_reduce(tensor, group=group)
    return slowest((time.perf_counter() - t0) / calls, gloo)


def bench_allreduce(args, groups):
    """{bytes: {"gloo": median s, "shoal": median s}}."""
    out = {}
    for nbytes in sizes(args):
        tensor = torch.zeros(nbytes // 4)  # zeros: sums stay finite
        runs = {"gloo": [], "shoal": []}
        for _ in range(args.reps):
            for name in ("gloo", "shoal"):
                runs[name].append(time_allreduce(tensor, groups[name], args.iters,
                                                 groups["gloo"]))
        out[nbytes] = {k: statistics.median(v) for k, v in runs.items()}
    return out


# ---- the DDP example ----

def ddp_variants():
    import shoal.torch as st
    return [
        ("DDP, gloo", "gloo", None, None),
        ("DDP, shoal backend", "shoal", None, None),
        ("allreduce_hook", "shoal", st.allreduce_hook, st.allreduce_state),
        ("int8_hook (feedback)", "shoal", st.int8_hook, st.int8_state),
        ("ternary_hook (feedback)", "shoal", st.ternary_hook, st.ternary_state),
        ("powersgd_hook rank 4 (feedback)", "shoal", st.powersgd_hook,
         lambda g: st.powersgd_state(g, rank=4)),
    ]


def bench_ddp(args, groups, rank):
    """[(variant, median step s)], and the hook states closed."""
    setups = []
    for name, gname, hook, maker in ddp_variants():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(1024, 1024), torch.nn.ReLU(),
                                    torch.nn.Linear(1024, 10))
        ddp = torch.nn.parallel.DistributedDataParallel(model, process_group=groups[gname])
        state = None
        if hook is not None:
            state = maker(groups[gname])
            ddp.register_comm_hook(state, hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
        setups.append((name, ddp, opt, state))
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(args.ddp_batch, 1024, generator=gen)
    y = torch.randint(0, 10, (args.ddp_batch,), generator=gen)

    def step(ddp, opt):
        opt.zero_grad()
        torch.nn.functional.cross_entropy(ddp(x), y).backward()
        opt.step()

    for _, ddp, opt, _ in setups:  # DDP's bucket rebuild, the hooks' compressors
        for _ in range(3):
            step(ddp, opt)
    times = {name: [] for name, *_ in setups}
    for _ in range(args.reps):
        for name, ddp, opt, _ in setups:
            dist.barrier(group=groups["gloo"])
            t0 = time.perf_counter()
            for _ in range(args.ddp_steps):
                step(ddp, opt)
            times[name].append(slowest((time.perf_counter() - t0) / args.ddp_steps,
                                       groups["gloo"]))
    for _, _, _, state in setups:
        if state is not None:
            state.close()
    return [(name, statistics.median(times[name])) for name, *_ in setups]


# ---- the tables ----

def human(nbytes):
    for unit, div in (("M", 1 << 20), ("K", 1 << 10)):
        if nbytes >= div and nbytes % div == 0:
            return f"{nbytes // div}{unit}"
    return str(nbytes)


def print_allreduce(res, n, args):
    print(f"\n# torch.distributed.all_reduce, float32 sum in place, {n} ranks: median of "
          f"{args.reps} interleaved repetitions (each the slowest rank's mean)")
    print(f"{'bytes':>8} {'gloo us':>10} {'shoal us':>10} {'gloo GB/s':>10} "
          f"{'shoal GB/s':>10} {'shoal x':>8}")
    factor = 2 * (n - 1) / n
    for nbytes, t in res.items():
        bw = {k: factor * nbytes / v / 1e9 for k, v in t.items()}
        print(f"{human(nbytes):>8} {t['gloo'] * 1e6:10.1f} {t['shoal'] * 1e6:10.1f} "
              f"{bw['gloo']:10.3f} {bw['shoal']:10.3f} {t['gloo'] / t['shoal']:8.2f}")


def print_ddp(res, n, args):
    print(f"\n# DDP example (MLP 1024-1024-10, {args.ddp_batch} samples per rank), {n} ranks: "
          f"median step time of {args.reps} interleaved repetitions of {args.ddp_steps} steps")
    print(f"{'variant':<34} {'ms/step':>9} {'/ gloo':>8}")
    ref = res[0][1]
    for name, t in res:
        print(f"{name:<34} {t * 1e3:9.2f} {t / ref:8.2f}")


def worker(rank, n, init, args):
    try:
        torch.set_num_threads(args.threads)
        importlib.import_module("shoal.torch")  # registers backend "shoal"
        dist.init_process_group("shoal", init_method=init, rank=rank, world_size=n,
                                timeout=datetime.timedelta(seconds=300))
        groups = {"shoal": dist.group.WORLD, "gloo": dist.new_group(backend="gloo")}
        ar = bench_allreduce(args, groups)
        ddp = bench_ddp(args, groups, rank) if args.ddp_steps else None
        if rank == 0:
            print_allreduce(ar, n, args)
            if ddp:
                print_ddp(ddp, n, args)
            sys.stdout.flush()
        dist.barrier(group=groups["gloo"])
        dist.destroy_process_group()
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(1)


def main():
    args = parse_args()
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    print(f"# torch {torch.__version__}; {os.cpu_count()} CPUs; {args.threads} torch thread(s) "
          "per rank; timings on a shared machine are noisy", flush=True)
    status = 0
    for n in args.ranks:
        tmp = tempfile.mkdtemp(prefix="shoal_torch_bench_")
        procs = [ctx.Process(target=worker, args=(r, n, f"file://{tmp}/store", args))
                 for r in range(n)]
        for p in procs:
            p.start()
        for p in procs:
            p.join()
        shutil.rmtree(tmp, ignore_errors=True)
        codes = [p.exitcode for p in procs]
        if any(codes):
            print(f"torch_bench: {n} ranks: exit codes {codes}", file=sys.stderr)
            status = 1
    return status


if __name__ == "__main__":
    sys.exit(main())
