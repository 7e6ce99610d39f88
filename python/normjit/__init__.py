"""normjit: run-time generated normalization kernels for NumPy, PyTorch and any DLPack array.

CUDA arrays run on the cuda backend (the array's device, the framework's current stream); CPU arrays run
on the emulator backend, which executes the same generated kernels on the CPU: exact but slow, a testing
path. `normjit.torch` holds autograd Functions and drop-in nn.Modules.
"""
from ._errors import (ArgumentError, CacheError, CompileError, DeviceError, DtypeError, Error, LibraryError,
                      ShapeError, UnsupportedError)
from ._core import context_info, library
from .functional import (batch_norm, batch_norm_backward, group_norm, group_norm_backward, instance_norm,
                         instance_norm_backward, layer_norm, layer_norm_backward, norm, norm_backward, rms_norm,
                         rms_norm_backward)

__version__ = "0.1.0"


def c_version():
    """Version string of the loaded C library."""
    return library().nj_version().decode()
