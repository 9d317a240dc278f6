#!/usr/bin/python3
"""gloo_allreduce: Gloo's all-reduce (torch.distributed, gloo backend, float32
sum on host tensors) timed the way tools/mpi_allreduce.c times MPI_Allreduce,
with its flags, table and JSON (-J), so that tools/compare_mpi sets it beside
shoal and MPI.

One process per rank, started by the caller:
  gloo_allreduce.py --rank R --world-size N --init file:///tmp/store [options]
(or under torchrun, which sets RANK, WORLD_SIZE and env:// for it).

Each size runs out of place and in place, like mpi_allreduce: -w untimed
calls, a barrier, then -n timed calls; the time shown is the mean per call on
the slowest rank. torch's all_reduce works in place only, so out of place is
a copy of the input into the output followed by the in-place all-reduce of
the output. With -c 1 one more call on fresh inputs is compared bit for bit
with the exact sum, and the wrong elements are summed over ranks. Exit
status: 0, 1 for wrong elements, 2 for a failure.
"""
import argparse
import datetime
import json
import os
import socket
import sys
import time

import torch
import torch.distributed as dist


def size(text):
    units = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    mult = units.get(text[-1:].lower(), 1)
    digits = text[:-1] if mult > 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f'wants a size such as 8, 1K, 64M, not "{text}"')
    return int(digits) * mult


def at_least(low):
    def parse(text):
        if not text.lstrip("-").isdigit() or int(text) < low:
            raise argparse.ArgumentTypeError(f'wants an integer >= {low}, not "{text}"')
        return int(text)
    return parse


def parse_args():
    p = argparse.ArgumentParser(prog="gloo_allreduce", allow_abbrev=False,
                                description="Gloo all-reduce (float sum), timed as mpi_allreduce")
    p.add_argument("-b", "--minbytes", type=size, default=8, help="smallest size (default 8)")
    p.add_argument("-e", "--maxbytes", type=size, default=128 << 20, help="largest size (default 128M)")
    p.add_argument("-f", "--stepfactor", type=at_least(2), default=2, help="factor between sizes (default 2)")
    p.add_argument("-n", "--iters", type=at_least(1), default=20, help="timed iterations per size (default 20)")
    p.add_argument("-w", "--warmup_iters", type=at_least(0), default=1, help="untimed iterations (default 1)")
    p.add_argument("-c", "--check", type=at_least(0), default=1, help="compare with the exact sum (default 1)")
    p.add_argument("-J", "--json", help="rank 0 also writes the settings and results as JSON")
    p.add_argument("--rank", type=at_least(0), default=int(os.environ.get("RANK", 0)))
    p.add_argument("--world-size", type=at_least(1), default=int(os.environ.get("WORLD_SIZE", 1)))
    p.add_argument("--init", default="env://", help="rendezvous: file://PATH or tcp://HOST:PORT")
    o = p.parse_args()
    if o.maxbytes < o.minbytes:
        p.error(f"maxbytes {o.maxbytes} is below minbytes {o.minbytes}")
    return o


def sizes(o):
    s = o.minbytes
    while s <= o.maxbytes:
        yield s
        s = s * o.stepfactor if s else 1


def value(r, nranks, count):
    """Input of rank r, as mpi_allreduce's: integers small enough that every
    partial sum, in any order, is exact in float."""
    a = (1 << 24) // nranks
    first = r * 3 + 1  # (i * 5 + first) % (a + 1) - a / 2, exact in double
    x = torch.arange(first, first + 5 * count, 5, dtype=torch.float64)
    return x.remainder_(a + 1).sub_(a // 2).to(torch.float32)


def time_us(o, send, recv, in_place):
    """Mean microseconds per call over o.iters calls on this rank, after the
    warm-up and a barrier."""
    def call():
        if not in_place:
            recv.copy_(send)
        dist.all_reduce(recv)
    for _ in range(o.warmup_iters):
        call()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(o.iters):
        call()
    return (time.perf_counter() - t0) / o.iters * 1e6


def fmt_time(us):
    return f"{us:7.0f}" if us >= 10000 else f"{us:7.1f}" if us >= 100 else f"{us:7.2f}"


def main():
    o = parse_args()
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")  # one machine: loopback
    dist.init_process_group("gloo", init_method=o.init, rank=o.rank, world_size=o.world_size,
                            timeout=datetime.timedelta(seconds=300))
    rank, nranks = dist.get_rank(), dist.get_world_size()
    library = f"Gloo (torch {torch.__version__})"
    # Rank 0 opens the JSON file first, so a bad path fails every rank at once.
    out, code = None, torch.zeros(1, dtype=torch.int64)
    if rank == 0 and o.json:
        try:
            out = open(o.json, "w")
        except OSError as e:
            print(f"gloo_allreduce: cannot write {o.json}: {e.strerror}", file=sys.stderr)
            code[0] = 2
    dist.broadcast(code, 0)
    if code.item():
        return 2
    host = socket.gethostname()
    if rank == 0:
        print("# gloo_allreduce: torch.distributed all_reduce (gloo) float sum, "
              "table of nccl-tests' all_reduce_perf")
        print(f"# {library}")
        print(f"# nRanks {nranks} minBytes {o.minbytes} maxBytes {o.maxbytes} step: "
              f"{o.stepfactor}(factor) warmup iters: {o.warmup_iters} iters: {o.iters} "
              f"validation: {o.check} on {host}\n#")
        print("#%61s%s%23s%s" % ("", "out-of-place", "", "in-place"))
        cols = "# %10s  %12s  %8s  %6s  %6s" + "  %7s  %6s  %6s  %6s" * 2
        print(cols % ("size", "count", "type", "redop", "root",
                      "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw", "#wrong"))
        print(cols % ("(B)", "(elements)", "", "", "", "(us)", "(GB/s)", "(GB/s)", "",
                      "(us)", "(GB/s)", "(GB/s)", ""), flush=True)
    # Buffers sized for the largest row; each row uses their start.
    maxcount = o.maxbytes // 4
    send_all, recv_all = torch.empty(maxcount), torch.zeros(maxcount)
    # The first calls of a job are slow; mpi_allreduce runs 100 of 1 element.
    for _ in range(100):
        dist.all_reduce(recv_all[:1])
    results, wrong_total = [], 0
    for nbytes in sizes(o):
        count = nbytes // 4
        send, recv = send_all[:count], recv_all[:count]
        send.copy_(value(rank, nranks, count))
        expect = sum(value(r, nranks, count).double() for r in range(nranks)).float() \
            if o.check else None
        us, wrong = [0.0, 0.0], [0, 0]
        for p, in_place in enumerate((False, True)):
            if in_place:
                recv.copy_(send)
            us[p] = time_us(o, send, recv, in_place)
            if o.check:  # one call on fresh inputs, compared bit for bit
                if in_place:
                    recv.copy_(send)
                else:
                    recv.view(torch.uint8).fill_(0xCD)
                    recv.copy_(send)
                dist.all_reduce(recv)
                wrong[p] = int((recv.view(torch.int32) != expect.view(torch.int32)).sum())
        # Like nccl-tests: a collective lasts as long as its slowest rank.
        us_max = torch.tensor(us, dtype=torch.float64)
        wrong_sum = torch.tensor(wrong, dtype=torch.int64)
        dist.all_reduce(us_max, op=dist.ReduceOp.MAX)
        dist.all_reduce(wrong_sum)
        wrong_total += int(wrong_sum.sum())
        if rank != 0:
            continue
        shown, factor = count * 4, 2.0 * (nranks - 1) / nranks
        row = {"bytes": shown, "count": count, "type": "float", "op": "sum", "root": -1}
        line = "%12d  %12d  %8s  %6s  %6d" % (shown, count, "float", "sum", -1)
        for p, name in enumerate(("out_of_place", "in_place")):
            t = us_max[p].item()
            algbw = shown / t / 1e3 if t > 0 else 0.0
            w = str(int(wrong_sum[p])) if o.check else "N/A"
            line += "  %7s  %6.2f  %6.2f  %6s" % (fmt_time(t), algbw, algbw * factor, w)
            row[name] = {"time_us": float(f"{t:.6g}"), "algbw": float(f"{algbw:.6g}"),
                         "busbw": float(f"{algbw * factor:.6g}"),
                         "wrong": int(wrong_sum[p]) if o.check else None}
        print(line, flush=True)
        results.append(row)
    code[0] = 1 if wrong_total else 0
    if rank == 0:
        if o.check:
            print(f"# Wrong elements       : {wrong_total} {'FAILED' if wrong_total else 'OK'}")
        print("#", flush=True)
    if out:
        doc = {"tool": "gloo_allreduce", "library": library, "collective": "allreduce",
               "ranks": nranks, "dtype": "float", "op": "sum", "algorithm": "gloo all_reduce",
               "iterations": o.iters, "warmup": o.warmup_iters, "check": o.check, "host": host,
               "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "results": results,
               "status": "wrong" if wrong_total else "ok"}
        try:
            with out:
                json.dump(doc, out, indent=2)
                out.write("\n")
        except OSError as e:
            print(f"gloo_allreduce: writing {o.json} failed: {e.strerror}", file=sys.stderr)
            code[0] = 2
    # Rank 0 alone knows whether its file was written: every rank exits
    # with its verdict.
    dist.broadcast(code, 0)
    dist.destroy_process_group()
    return int(code.item())


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception as e:  # a broken rendezvous or peer: a failure, not "wrong"
        print(f"gloo_allreduce: {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(2)
