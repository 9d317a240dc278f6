"""shoal as a torch.distributed backend.

    import torch.distributed as dist
    import shoal.torch                       # registers backend "shoal"
    dist.init_process_group(backend="shoal") # torchrun's variables, or init_method=...
    dist.all_reduce(tensor)                  # CPU tensors, on shoal

Every torch.distributed collective on contiguous CPU tensors runs on a
shoal communicator per process group (new_group(..., backend="shoal") too):
all_reduce (SUM, PRODUCT, MIN, MAX, AVG, BAND, BOR, BXOR, PREMUL_SUM),
all_reduce_coalesced, reduce, broadcast, all_gather,
all_gather_into_tensor, reduce_scatter, reduce_scatter_tensor, all_to_all,
all_to_all_single (with and without split sizes), gather, scatter,
send/recv (tag 0), barrier; async_op=True gives a Work whose get_future()
completes when shoal's request does. Calls it cannot serve (recv without a
source, monitored_barrier, all_gather_coalesced, GPU, sparse or
non-contiguous tensors) raise RuntimeError naming the call; shoal's own
failures raise RuntimeError with shoal's reason.

The extension module (_c10d) is built by shoal's `make` where torch's C++
headers are installed (Debian's libtorch-dev).
"""

import torch.distributed as _dist

# libshoal first, with RTLD_GLOBAL: the extension binds to this copy.
from .. import _lib

_lib.load()

from . import _c10d  # noqa: E402  (needs libshoal loaded)

ProcessGroupShoal = _c10d.ProcessGroupShoal

BACKEND = "shoal"


def _create_process_group(store, rank, size, timeout):
    """torch.distributed's creator for backend "shoal": the group's prefix
    store, this rank in the group, the group's size, its timeout."""
    return ProcessGroupShoal(store, rank, size, timeout)


def comm_handle(group=None):
    """The shoal_comm_t (as an int) of a process group of this backend
    (the default group when None), for calls into libshoal on the same
    communicator; it stays the group's."""
    pg = group if group is not None else _dist.distributed_c10d._get_default_group()
    if not isinstance(pg, ProcessGroupShoal):
        raise TypeError("comm_handle: the group is not a shoal process group "
                        f"({type(pg).__name__})")
    return pg.comm_handle


if not hasattr(_dist.Backend, BACKEND.upper()):
    _dist.Backend.register_backend(BACKEND, _create_process_group)

__all__ = ["BACKEND", "ProcessGroupShoal", "comm_handle"]
from .hooks import *  # noqa: E402,F401,F403  (the DDP communication hooks, hooks.py)
