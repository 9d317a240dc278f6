"""Run test suites of the Python package on N ranks started by
multiprocessing (spawn), joined through a unique id that rank 0 makes and
hands to the others.

    ranks.py NRANKS SUITE[,SUITE...] [--torch]

Each rank forms one communicator and runs the suites in order; every rank
reports each suite's checks and failures to this process, which prints one
line per suite ("suite NAME on N ranks: ok, K checks" or "...: FAILED")
followed by the failures, and exits 0 when every suite passed on every
rank. A rank whose suite raised unexpectedly reports it and leaves at once
(the others then fail on the dead peer instead of waiting). A suite may
end its rank on purpose (suite_errors' death): it then returns "exit".
"""

import multiprocessing as mp
import os
import queue
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
# The parent's whole budget for a run; the ranks' own deadlines
# (SHOAL_TIMEOUT, set by the caller) are shorter.
RUN_LIMIT_S = float(os.environ.get("SHOAL_PY_RUN_LIMIT", "90"))


def _suites():
    sys.path.insert(0, HERE)
    import suite_async
    import suite_coll
    import suite_compress
    import suite_errors
    return {"coll": suite_coll.run, "async": suite_async.run, "compress": suite_compress.run,
            "bad": suite_errors.run_bad, "mismatch": suite_errors.run_mismatch,
            "death": suite_errors.run_death}


def rank_main(rank, nranks, names, use_torch, ids, results):
    import ref
    import shoal
    table = _suites()
    kits = [ref.NumpyKit()]
    if use_torch:
        kits.append(ref.TorchKit())
    try:
        if rank == 0:
            uid = shoal.get_unique_id()
            for _ in range(nranks - 1):
                ids.put(uid)
        else:
            uid = ids.get(timeout=60)
        comm = shoal.Communicator.from_unique_id(nranks, uid, rank)
    except Exception:  # noqa: BLE001
        for name in names:
            results.put((rank, name, 0, ["rank %d: init: %s" % (rank, ref.describe_exception())]))
        return
    for name in names:
        check = ref.Checker("rank %d %s" % (rank, name))
        try:
            outcome = table[name](comm, kits, check)
        except Exception:  # noqa: BLE001
            check.fail("raised:\n" + ref.describe_exception())
            results.put((rank, name, check.checks, check.failures))
            results.close()
            results.join_thread()
            os._exit(1)
        results.put((rank, name, check.checks, check.failures))
        if outcome == "exit":
            results.close()
            results.join_thread()
            os._exit(0)
    comm.close()


def main():
    nranks = int(sys.argv[1])
    names = sys.argv[2].split(",")
    use_torch = "--torch" in sys.argv[3:]
    ctx = mp.get_context("spawn")
    ids, results = ctx.Queue(), ctx.Queue()
    procs = [ctx.Process(target=rank_main, args=(r, nranks, names, use_torch, ids, results))
             for r in range(nranks)]
    for p in procs:
        p.start()
    got = {}
    deadline = time.monotonic() + RUN_LIMIT_S
    while len(got) < nranks * len(names) and time.monotonic() < deadline:
        try:
            rank, name, checks, failures = results.get(timeout=1)
        except queue.Empty:
            if not any(p.is_alive() for p in procs):
                break
            continue
        got[(rank, name)] = (checks, failures)
    for p in procs:
        p.join(max(0.1, deadline - time.monotonic()))
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for r in hung:
        procs[r].kill()
        procs[r].join()
    ok_all = True
    for name in names:
        lines, checks = [], 0
        for r in range(nranks):
            if (r, name) not in got:
                lines.append("rank %d never reported (%s)" % (
                    r, "still running at the limit" if r in hung else
                    "exit code %s" % procs[r].exitcode))
                continue
            c, failures = got[(r, name)]
            checks += c
            lines += failures
        ok_all &= not lines
        print("suite %s on %d ranks: %s, %d checks" % (name, nranks, "FAILED" if lines else "ok",
                                                        checks))
        for line in lines:
            print("    " + line.replace("\n", "\n    "))
    sys.stdout.flush()
    return 0 if ok_all else 1


if __name__ == "__main__":
    sys.exit(main())
