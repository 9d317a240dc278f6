"""shoal's data types and reduction ops, and their names on the Python side."""

import enum
import sys


class DType(enum.IntEnum):
    """shoal_dtype_t (NCCL's values)."""
    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9
    FP8_E4M3 = 10
    FP8_E5M2 = 11


INTEGER = frozenset({DType.INT8, DType.UINT8, DType.INT32, DType.UINT32, DType.INT64,
                     DType.UINT64})


class Op(enum.IntEnum):
    """shoal_op_t: the reductions, and the bitwise and logical ops (integer
    types only)."""
    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4
    BAND = 0x10000
    BOR = 0x10001
    BXOR = 0x10002
    LAND = 0x10003
    LOR = 0x10004
    LXOR = 0x10005


BITWISE = frozenset({Op.BAND, Op.BOR, Op.BXOR, Op.LAND, Op.LOR, Op.LXOR})

# numpy's dtype names (ml_dtypes gives numpy the bfloat16 and float8 names).
_NUMPY = {
    "int8": DType.INT8, "uint8": DType.UINT8, "int32": DType.INT32, "uint32": DType.UINT32,
    "int64": DType.INT64, "uint64": DType.UINT64, "float16": DType.FLOAT16,
    "float32": DType.FLOAT32, "float64": DType.FLOAT64, "bfloat16": DType.BFLOAT16,
    "float8_e4m3fn": DType.FP8_E4M3, "float8_e5m2": DType.FP8_E5M2,
}

# torch's attribute names; those this torch lacks are left out.
_TORCH_NAMES = dict(_NUMPY)
_torch_map = None


def torch_map():
    """{torch.dtype: DType} for the types this torch has."""
    global _torch_map
    if _torch_map is None:
        torch = sys.modules["torch"]
        _torch_map = {getattr(torch, n): d for n, d in _TORCH_NAMES.items()
                      if isinstance(getattr(torch, n, None), torch.dtype)}
    return _torch_map


def from_numpy(dtype):
    """The DType of a numpy dtype, or None."""
    if not dtype.isnative:
        return None
    return _NUMPY.get(dtype.name)


def from_torch(dtype):
    return torch_map().get(dtype)


def parse(dtype):
    """A DType from a DType, its name ("float32", "bf16" too), a numpy dtype
    or type, or a torch dtype. TypeError for anything else."""
    if isinstance(dtype, DType):
        return dtype
    if isinstance(dtype, str):
        name = {"bf16": "bfloat16", "fp16": "float16", "half": "float16",
                "float": "float32", "double": "float64"}.get(dtype.lower(), dtype.lower())
        if name in _NUMPY:
            return _NUMPY[name]
        raise TypeError("dtype: %r is not one of shoal's types (%s)"
                        % (dtype, ", ".join(sorted(_NUMPY))))
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(dtype, torch.dtype):
        d = from_torch(dtype)
    else:
        try:
            import numpy
            d = from_numpy(numpy.dtype(dtype))
        except TypeError:
            d = None
    if d is None:
        raise TypeError("dtype: %r has no shoal type" % (dtype,))
    return d


_OP_NAMES = {op.name.lower(): op for op in Op}
_OP_NAMES.update({"mean": Op.AVG, "average": Op.AVG, "product": Op.PROD})


def parse_op(op):
    """An Op from an Op, its name ("sum", "prod", "min", "max", "avg",
    "band", ...) or its value. ValueError for anything else."""
    if isinstance(op, Op):
        return op
    if isinstance(op, str):
        found = _OP_NAMES.get(op.lower())
        if found is not None:
            return found
    elif isinstance(op, int) and not isinstance(op, bool):
        try:
            return Op(op)
        except ValueError:
            pass
    raise ValueError("op: %r is not one of %s" % (op, ", ".join(o.name.lower() for o in Op)))
