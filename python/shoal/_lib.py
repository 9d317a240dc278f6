"""Finding and loading libshoal, and the C signatures the package calls.

The library is loaded once per process with RTLD_GLOBAL: a compiled
extension of this package links against libshoal.so.0 and must bind to the
copy loaded here, not load a second one with its own communicators.
"""

import ctypes
import ctypes.util
import os
import sys
import sysconfig
import threading

SONAME = "libshoal.so.0"
UNIQUE_ID_BYTES = 128

_lock = threading.Lock()
_loaded = None  # (CDLL, path) once loaded


class UniqueId(ctypes.Structure):
    _fields_ = [("bytes", ctypes.c_ubyte * UNIQUE_ID_BYTES)]


class CompressOptions(ctypes.Structure):
    """shoal_compress_options_t, field for field."""
    _fields_ = [
        ("size", ctypes.c_size_t),
        ("kind", ctypes.c_int),
        ("error_feedback", ctypes.c_int),
        ("block", ctypes.c_uint),
        ("stochastic", ctypes.c_int),
        ("clip_sigma", ctypes.c_float),
        ("rank", ctypes.c_uint),
        ("warmup_steps", ctypes.c_uint),
        ("seed", ctypes.c_uint64),
        ("algo", ctypes.c_int),
        ("coll", ctypes.c_int),
        ("budget", ctypes.c_float),
        ("window", ctypes.c_uint),
    ]


class CompressLayout(ctypes.Structure):
    _fields_ = [
        ("ntensors", ctypes.c_size_t),
        ("rows", ctypes.POINTER(ctypes.c_size_t)),
        ("cols", ctypes.POINTER(ctypes.c_size_t)),
    ]


class CompressInfo(ctypes.Structure):
    _fields_ = [
        ("bytes_sent", ctypes.c_uint64),
        ("bytes_received", ctypes.c_uint64),
        ("ratio", ctypes.c_double),
        ("step", ctypes.c_uint64),
        ("error", ctypes.c_double),
    ]


_int = ctypes.c_int
_sz = ctypes.c_size_t
_ptr = ctypes.c_void_p
_szp = ctypes.POINTER(ctypes.c_size_t)
_intp = ctypes.POINTER(ctypes.c_int)
_handlep = ctypes.POINTER(ctypes.c_void_p)
_reqp = ctypes.POINTER(ctypes.c_void_p)

# name: (restype, argtypes). Status-returning calls give c_int.
_SIGNATURES = {
    "shoal_status_string": (ctypes.c_char_p, [_int]),
    "shoal_dtype_size": (_int, [_int, _szp]),
    "shoal_version": (_int, []),
    "shoal_get_unique_id": (_int, [ctypes.POINTER(UniqueId)]),
    "shoal_comm_init": (_int, [_int, ctypes.POINTER(UniqueId), _int, _handlep]),
    "shoal_comm_init_env": (_int, [_handlep]),
    "shoal_comm_split": (_int, [_ptr, _int, _int, _handlep]),
    "shoal_comm_destroy": (_int, [_ptr]),
    "shoal_comm_abort": (_int, [_ptr]),
    "shoal_comm_rank": (_int, [_ptr, _intp]),
    "shoal_comm_size": (_int, [_ptr, _intp]),
    "shoal_comm_last_error": (ctypes.c_char_p, [_ptr]),
    "shoal_comm_get_async_error": (_int, [_ptr, _intp]),
    "shoal_comm_set_progress": (_int, [_ptr, _int]),
    # (send, recv, count, dtype, op, comm)
    "shoal_allreduce": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr]),
    "shoal_iallreduce": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr, _reqp]),
    "shoal_reduce_scatter": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr]),
    "shoal_ireduce_scatter": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr, _reqp]),
    # (send, recv, count, dtype, comm)
    "shoal_allgather": (_int, [_ptr, _ptr, _sz, _int, _ptr]),
    "shoal_iallgather": (_int, [_ptr, _ptr, _sz, _int, _ptr, _reqp]),
    "shoal_alltoall": (_int, [_ptr, _ptr, _sz, _int, _ptr]),
    "shoal_ialltoall": (_int, [_ptr, _ptr, _sz, _int, _ptr, _reqp]),
    # (send, scounts, sdispls, recv, rcounts, rdispls, dtype, comm)
    "shoal_alltoallv": (_int, [_ptr, _szp, _szp, _ptr, _szp, _szp, _int, _ptr]),
    "shoal_ialltoallv": (_int, [_ptr, _szp, _szp, _ptr, _szp, _szp, _int, _ptr, _reqp]),
    # (send, recv, count, dtype, root, comm)
    "shoal_broadcast": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr]),
    "shoal_ibroadcast": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr, _reqp]),
    "shoal_gather": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr]),
    "shoal_igather": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr, _reqp]),
    "shoal_scatter": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr]),
    "shoal_iscatter": (_int, [_ptr, _ptr, _sz, _int, _int, _ptr, _reqp]),
    # (send, recv, count, dtype, op, root, comm)
    "shoal_reduce": (_int, [_ptr, _ptr, _sz, _int, _int, _int, _ptr]),
    "shoal_ireduce": (_int, [_ptr, _ptr, _sz, _int, _int, _int, _ptr, _reqp]),
    "shoal_barrier": (_int, [_ptr]),
    "shoal_ibarrier": (_int, [_ptr, _reqp]),
    # (buf, count, dtype, peer, comm)
    "shoal_send": (_int, [_ptr, _sz, _int, _int, _ptr]),
    "shoal_isend": (_int, [_ptr, _sz, _int, _int, _ptr, _reqp]),
    "shoal_recv": (_int, [_ptr, _sz, _int, _int, _ptr]),
    "shoal_irecv": (_int, [_ptr, _sz, _int, _int, _ptr, _reqp]),
    "shoal_test": (_int, [_reqp, _intp]),
    "shoal_wait": (_int, [_reqp]),
    "shoal_compress_options_init": (_int, [ctypes.POINTER(CompressOptions), _int]),
    "shoal_compressor_create": (_int, [_ptr, ctypes.POINTER(CompressOptions), _sz, _int,
                                       ctypes.POINTER(CompressLayout), _handlep]),
    "shoal_compressor_destroy": (_int, [_ptr]),
    "shoal_compressor_state_size": (_int, [_ptr, _szp]),
    "shoal_compressor_get_state": (_int, [_ptr, _ptr, _sz]),
    "shoal_compressor_set_state": (_int, [_ptr, _ptr, _sz]),
    "shoal_compressor_reset": (_int, [_ptr]),
    "shoal_allreduce_compressed": (_int, [_ptr, _ptr, _ptr, _int,
                                          ctypes.POINTER(CompressInfo)]),
    "shoal_iallreduce_compressed": (_int, [_ptr, _ptr, _ptr, _int,
                                           ctypes.POINTER(CompressInfo), _reqp]),
}


def _candidates():
    """(path, how it was found) in search order, the environment first."""
    env = os.environ.get("SHOAL_LIBRARY")
    if env:
        # An explicit choice is the only one: falling back would hide it.
        return [(env, "SHOAL_LIBRARY")]
    found = []
    dirs = []
    for prefix in (sys.prefix, sys.base_prefix):
        dirs += [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
    multiarch = sysconfig.get_config_var("MULTIARCH")
    for prefix in ("/usr/local", "/usr"):
        dirs.append(os.path.join(prefix, "lib"))
        if multiarch:
            dirs.append(os.path.join(prefix, "lib", multiarch))
        dirs.append(os.path.join(prefix, "lib64"))
    seen = set()
    for d in dirs:
        path = os.path.join(d, SONAME)
        if path not in seen:
            seen.add(path)
            found.append((path, "install prefix"))
    name = ctypes.util.find_library("shoal")
    if name:
        found.append((name, "the loader's search path"))
    # The checkout: python/shoal/ -> python/ -> the repository's build/.
    here = os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(os.path.dirname(os.path.dirname(here)), "build", SONAME)
    found.append((tree, "source tree build"))
    return found


def _declare(lib):
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes


def load():
    """Load libshoal once; return (CDLL, path it was loaded from).

    Raises OSError listing every place looked at when none loads.
    """
    global _loaded
    if _loaded is not None:
        return _loaded
    with _lock:
        if _loaded is not None:
            return _loaded
        tried = []
        for path, how in _candidates():
            is_name = os.sep not in path
            if not is_name and not os.path.exists(path):
                tried.append("%s (%s): not there" % (path, how))
                continue
            try:
                lib = ctypes.CDLL(path, mode=ctypes.RTLD_GLOBAL)
                _declare(lib)
            except (OSError, AttributeError) as e:
                tried.append("%s (%s): %s" % (path, how, e))
                continue
            _loaded = (lib, path)
            return _loaded
        raise OSError("shoal: cannot load %s; set SHOAL_LIBRARY to its path. Looked at:\n  %s"
                      % (SONAME, "\n  ".join(tried)))


def lib():
    """The loaded CDLL (loading it on first use)."""
    return (_loaded or load())[0]
