"""shoal: collective communication for Python, over libshoal.

    import numpy as np, shoal
    with shoal.Communicator.from_env() as comm:      # torchrun, mpirun, srun
        x = np.full(1000, comm.rank, dtype=np.float32)
        comm.all_reduce(x)                           # in place, sum
        out = np.empty(1000 * comm.size, np.float32)
        req = comm.all_gather(x, out, async_op=True) # non-blocking
        req.wait()

Buffers are numpy arrays and contiguous CPU torch tensors, used through
their data pointers (never copied). Failures of shoal raise ShoalError with
shoal's status and message; bad arguments raise TypeError or ValueError on
the rank that passed them, before any rank waits. The library is found as
_lib.load() says: SHOAL_LIBRARY, the install prefix, the source tree.
"""

from . import _lib
from .comm import Communicator, get_unique_id
from .compressor import CompressInfo, Compressor
from .dtypes import DType, Op
from .errors import ShoalError, Status
from .request import Request

__version__ = "0.1.0"

__all__ = [
    "Communicator", "CompressInfo", "Compressor", "DType", "Op", "Request", "ShoalError",
    "Status", "get_unique_id", "library_path", "library_version",
]


def library_path():
    """Where the loaded libshoal came from."""
    return _lib.load()[1]


def library_version():
    """libshoal's version as (major, minor, patch)."""
    v = _lib.lib().shoal_version()
    return (v // 10000, v // 100 % 100, v % 100)
