"""Arrays in through DLPack (or a torch tensor's own attributes), outputs from the input's framework.

A View is what the C library needs of an array: its data pointer, extents and strides in elements, dtype
and device. Nothing is copied: the pointer is the producer's, kept alive by the View (the DLPack capsule or
the tensor). Outputs are allocated by the framework of the input (PyTorch's caching allocator for tensors),
with the input's memory format kept (channels-last in, channels-last out).
"""
import ctypes
import sys

from . import _capi
from ._errors import ArgumentError, DtypeError

CPU, CUDA = "cpu", "cuda"


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype, _capsule_pointer.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]

_DL_DTYPES = {(2, 32): _capi.F32, (2, 16): _capi.F16, (4, 16): _capi.BF16}  # kDLFloat, kDLBfloat
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
DTYPE_NAMES = {_capi.F32: "float32", _capi.F16: "float16", _capi.BF16: "bfloat16"}
_ITEMSIZE = {_capi.F32: 4, _capi.F16: 2, _capi.BF16: 2}


class View:
    """One array as the C library sees it. `obj` is the original array, `keep` what keeps `ptr` alive."""
    __slots__ = ("obj", "keep", "ptr", "shape", "strides", "dtype", "device", "framework")

    @property
    def itemsize(self):
        return _ITEMSIZE[self.dtype]

    @property
    def numel(self):
        n = 1
        for e in self.shape:
            n *= e
        return n

    def desc(self, axes=None):
        """nj_tensor_desc; `axes` optionally replaces (extents, strides)."""
        shape, strides = axes if axes is not None else (self.shape, self.strides)
        if not 1 <= len(shape) <= _capi.MAX_RANK:
            raise ArgumentError("NJ_ERR_BAD_RANK", f"rank {len(shape)} is out of range (1 to {_capi.MAX_RANK}"
                                " axes, GroupNorm's C counting as two)")
        t = _capi.TensorDesc()
        t.dtype, t.rank = self.dtype, len(shape)
        for i, (e, s) in enumerate(zip(shape, strides)):
            t.extents[i], t.strides[i] = e, s
        return t


def _torch_module():
    return sys.modules.get("torch")


def _torch_dtype(torch, t):
    d = {torch.float32: _capi.F32, torch.float16: _capi.F16, torch.bfloat16: _capi.BF16}.get(t.dtype)
    if d is None:
        raise DtypeError("NJ_ERR_BAD_DTYPE", f"unsupported dtype {t.dtype} (float32, float16 or bfloat16)")
    return d


def view(a, name="x"):
    """The View of any DLPack array or torch tensor."""
    torch = _torch_module()
    v = View()
    v.obj = a
    if torch is not None and isinstance(a, torch.Tensor):
        # Same information as the tensor's DLPack export, read without a capsule per call.
        v.dtype = _torch_dtype(torch, a)
        v.keep, v.ptr = a, a.data_ptr()
        v.shape, v.strides = tuple(a.shape), tuple(a.stride())
        v.device = (CUDA, a.device.index if a.device.index is not None else torch.cuda.current_device()) \
            if a.device.type == "cuda" else (CPU, 0)
        if a.device.type not in ("cpu", "cuda"):
            raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"{name} is on {a.device}: normjit runs CUDA and CPU arrays")
        v.framework = "torch"
        return v
    if not hasattr(a, "__dlpack__"):
        raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"{name} ({type(a).__name__}) is not a DLPack array")
    cap = _export(a)
    dl = _DLTensor.from_address(_capsule_pointer(cap, b"dltensor"))
    code = (dl.dtype.code, dl.dtype.bits)
    if code not in _DL_DTYPES or dl.dtype.lanes != 1:
        raise DtypeError("NJ_ERR_BAD_DTYPE", f"{name} has unsupported DLPack dtype code {code[0]} bits {code[1]} "
                         "(float32, float16 or bfloat16)")
    v.dtype = _DL_DTYPES[code]
    n = dl.ndim
    v.shape = tuple(dl.shape[i] for i in range(n))
    if dl.strides:
        v.strides = tuple(dl.strides[i] for i in range(n))
    else:  # NULL strides: row-major contiguous
        st, acc = [], 1
        for e in reversed(v.shape):
            st.append(acc)
            acc *= max(e, 1)
        v.strides = tuple(reversed(st))
    dev = dl.device.device_type
    if dev in (_DL_CPU, _DL_CUDA_HOST):
        v.device = (CPU, 0)
    elif dev in (_DL_CUDA, _DL_CUDA_MANAGED):
        v.device = (CUDA, dl.device.device_id)
    else:
        raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"{name} is on DLPack device type {dev}: normjit runs CUDA and CPU")
    v.ptr = (dl.data or 0) + dl.byte_offset
    v.keep = cap  # the capsule's destructor releases the producer's buffer once we are done with it
    v.framework = type(a).__module__.split(".")[0]
    return v


def consumer_stream(framework):
    """The CUDA stream normjit launches on for a non-torch producer: CuPy's current stream, else the
    legacy default stream (DLPack's stream=1)."""
    if framework == "cupy":
        return sys.modules["cupy"].cuda.get_current_stream().ptr or 1
    return 1


def _export(a):
    # A CUDA producer is told the stream we launch on, so it orders its pending work before ours.
    dev = a.__dlpack_device__() if hasattr(a, "__dlpack_device__") else None
    if dev is not None and int(dev[0]) in (_DL_CUDA, _DL_CUDA_MANAGED):
        try:
            return a.__dlpack__(stream=consumer_stream(type(a).__module__.split(".")[0]))
        except TypeError:  # a producer of the older protocol, without stream=
            pass
    return a.__dlpack__()


# ---- output allocation, by the input's framework ----

def _torch_dtype_of(torch, d):
    return {_capi.F32: torch.float32, _capi.F16: torch.float16, _capi.BF16: torch.bfloat16}[d]


class Allocator:
    """Allocates outputs like the reference input `ref` (a View), on its device, by its framework."""

    def __init__(self, ref):
        self.ref = ref
        self.torch = ref.framework == "torch"
        if not self.torch:
            self.np = None
            if ref.device[0] == CPU:
                import numpy
                self.np = numpy

    def like(self, v):
        """An array shaped and laid out as View v (empty_like: memory format preserved)."""
        if self.torch:
            torch = _torch_module()
            return torch.empty_like(v.obj, memory_format=torch.preserve_format)
        if self.np is not None and v.framework == "numpy":
            return self.np.empty_like(v.obj)
        return self._foreign(v.shape, v.dtype)

    def empty(self, shape, dtype):
        if self.torch:
            torch = _torch_module()
            return torch.empty(shape, dtype=_torch_dtype_of(torch, dtype), device=self.ref.obj.device)
        if self.np is not None and dtype != _capi.BF16:
            return self.np.empty(shape, dtype=self.np.float32 if dtype == _capi.F32 else self.np.float16)
        return self._foreign(shape, dtype)

    def workspace(self, nbytes):
        """(buffer, 16-byte aligned address) of nbytes of device memory."""
        if self.torch:
            torch = _torch_module()
            buf = torch.empty(nbytes + 16, dtype=torch.uint8, device=self.ref.obj.device)
        elif self.ref.device[0] == CPU:
            import numpy
            buf = numpy.empty(nbytes + 16, dtype=numpy.uint8)
        else:
            buf = self._torch_cuda_bytes(nbytes + 16)
        addr = view_bytes_addr(buf)
        return buf, (addr + 15) // 16 * 16

    def _foreign(self, shape, dtype):
        # Another DLPack producer (CuPy, JAX...): allocate with torch (CUDA) or numpy (CPU float32/16),
        # then hand the result back through the producer's from_dlpack when it has one.
        mod = sys.modules.get(self.ref.framework)
        if self.ref.framework == "cupy" and dtype != _capi.BF16:
            return mod.empty(shape, dtype="float32" if dtype == _capi.F32 else "float16")
        torch = _torch_module()
        if torch is None:
            try:
                import torch  # noqa: F811
            except ImportError:
                raise ArgumentError("NJ_ERR_UNSUPPORTED", f"allocating a {DTYPE_NAMES[dtype]} output for "
                                    f"{self.ref.framework} needs torch") from None
        dev = "cpu" if self.ref.device[0] == CPU else f"cuda:{self.ref.device[1]}"
        return torch.empty(shape, dtype=_torch_dtype_of(torch, dtype), device=dev)

    def _torch_cuda_bytes(self, n):
        import torch
        return torch.empty(n, dtype=torch.uint8, device=f"cuda:{self.ref.device[1]}")

    def finish(self, out):
        """Hands an output back in the input's framework (foreign producers: through their from_dlpack)."""
        if self.torch or out is None:
            return out
        mod = sys.modules.get(self.ref.framework)
        if type(out).__module__.split(".")[0] == self.ref.framework or mod is None:
            return out
        conv = getattr(mod, "from_dlpack", None)
        if conv is None and hasattr(mod, "numpy"):
            conv = getattr(mod.numpy, "from_dlpack", None)  # jax.numpy.from_dlpack
        return conv(out) if conv is not None else out


def view_bytes_addr(buf):
    torch = _torch_module()
    if torch is not None and isinstance(buf, torch.Tensor):
        return buf.data_ptr()
    return buf.ctypes.data
