"""numpy arrays and CPU torch tensors as shoal buffers: their data pointers,
never a copy.

Every check here runs before any shoal call, so a bad buffer raises on the
rank that passed it, at once, and no other rank is left waiting in a
collective that this one never entered.
"""

import sys

from . import dtypes


class Buffer:
    """A borrowed view of an array's memory: obj (kept alive by whoever
    holds the Buffer), ptr, count (elements), dtype (DType), itemsize."""

    __slots__ = ("obj", "name", "ptr", "count", "dtype", "itemsize", "writable")

    def __init__(self, obj, name, ptr, count, dtype, itemsize, writable):
        self.obj = obj
        self.name = name
        self.ptr = ptr
        self.count = count
        self.dtype = dtype
        self.itemsize = itemsize
        self.writable = writable

    def at(self, index):
        """The address of element index."""
        return self.ptr + index * self.itemsize

    def block(self, index, count):
        """Elements [index*count, (index+1)*count) as an object of the
        buffer's own kind (a view, sharing its memory)."""
        flat = self.obj.reshape(-1)
        return flat[index * count:(index + 1) * count]

    def need_writable(self):
        if not self.writable:
            raise ValueError("%s: the array is read-only, and this call writes into it"
                             % self.name)
        return self


def _torch_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _from_numpy(obj, name):
    dt = dtypes.from_numpy(obj.dtype)
    if dt is None:
        raise TypeError("%s: numpy dtype %s has no shoal type (shoal takes int8, uint8, int32, "
                        "uint32, int64, uint64, float16, float32, float64 in native byte "
                        "order)" % (name, obj.dtype))
    if not obj.flags.c_contiguous:
        raise ValueError("%s: the array is not contiguous (strides %s); pass "
                         "numpy.ascontiguousarray(...) and copy the result back"
                         % (name, obj.strides))
    return Buffer(obj, name, obj.ctypes.data, int(obj.size), dt, obj.itemsize,
                  bool(obj.flags.writeable))


def _from_torch(obj, name):
    if obj.layout != sys.modules["torch"].strided:
        raise TypeError("%s: a %s tensor; shoal takes dense (strided) tensors" % (name, obj.layout))
    if obj.device.type != "cpu":
        raise ValueError("%s: a tensor on %s; shoal's Python calls take CPU tensors"
                         % (name, obj.device))
    dt = dtypes.from_torch(obj.dtype)
    if dt is None:
        raise TypeError("%s: torch dtype %s has no shoal type" % (name, obj.dtype))
    if not obj.is_contiguous():
        raise ValueError("%s: the tensor is not contiguous (strides %s); pass .contiguous() "
                         "and copy the result back" % (name, tuple(obj.stride())))
    # A conjugate or negative view reads otherwise than its memory holds.
    for lazy in ("is_conj", "is_neg"):
        test = getattr(obj, lazy, None)
        if test is not None and test():
            raise ValueError("%s: the tensor is a lazy %s view; resolve it first"
                             % (name, lazy[3:]))
    return Buffer(obj, name, obj.data_ptr(), obj.numel(), dt, obj.element_size(), True)


def as_buffer(obj, name):
    """A Buffer over obj (a numpy array or a contiguous CPU torch tensor).
    TypeError or ValueError, naming the argument, for anything else."""
    if _torch_tensor(obj):
        return _from_torch(obj, name)
    numpy = sys.modules.get("numpy")
    if numpy is not None and isinstance(obj, numpy.ndarray):
        return _from_numpy(obj, name)
    raise TypeError("%s: expected a numpy array or a torch tensor, got %s"
                    % (name, type(obj).__name__))


def optional(obj, name):
    return None if obj is None else as_buffer(obj, name)


def same_type(a, b):
    """TypeError unless a and b (Buffers, either may be None) hold one dtype."""
    if a is not None and b is not None and a.dtype != b.dtype:
        raise TypeError("%s is %s but %s is %s: they must be of one type"
                        % (a.name, a.dtype.name.lower(), b.name, b.dtype.name.lower()))


def need_count(buf, count, what):
    if buf.count != count:
        raise ValueError("%s: %d elements, where %s needs %d" % (buf.name, buf.count, what, count))


def divisible(buf, parts, what):
    """buf's count over parts; ValueError unless it divides."""
    if buf.count % parts:
        raise ValueError("%s: %d elements do not split into %d equal blocks (%s)"
                         % (buf.name, buf.count, parts, what))
    return buf.count // parts
