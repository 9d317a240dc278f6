"""Started by torchrun: Communicator.from_env() finds the ranks from
torchrun's variables (shoal on MASTER_PORT+1, the secret from SHOAL_SECRET),
then a few collectives on numpy arrays and torch tensors are checked
against numpy. Prints "torchrun_check: rank R of N ok" on success."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import ref  # noqa: E402
import shoal  # noqa: E402
import suite_async  # noqa: E402
import suite_coll  # noqa: E402


def main():
    comm = shoal.Communicator.from_env()
    c = ref.Checker("rank %d torchrun" % comm.rank)
    c.ok(comm.rank == int(os.environ["RANK"]), "rank %d, RANK=%s"
         % (comm.rank, os.environ["RANK"]))
    c.ok(comm.size == int(os.environ["WORLD_SIZE"]), "size %d" % comm.size)
    kits = [ref.NumpyKit(), ref.TorchKit()]
    for kit in kits:
        for dtype in ("float32", "bfloat16"):
            if dtype in kit.dtypes:
                suite_coll.all_reduce(comm, kit, c, dtype, 37, 1, ("sum", "avg"))
                suite_coll.all_gather(comm, kit, c, dtype, 37, 2)
    suite_async.orders(comm, kits[1], c)
    suite_coll.all_reduce(comm, kits[1], c, "float32", suite_coll.BIG, 4, ("sum",))
    comm.close()
    for line in c.failures:
        print(line)
    if c.failures:
        return 1
    print("torchrun_check: rank %d of %d ok, %d checks" % (comm.rank, comm.size, c.checks))
    return 0


if __name__ == "__main__":
    sys.exit(main())
