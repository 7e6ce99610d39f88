"""normjit.Error and its subclasses: every failure carries the C status name and the detail message."""


class Error(Exception):
    """A normjit failure: `.status` is the nj_status name (e.g. "NJ_ERR_BAD_AXIS"), `.detail` the message."""

    def __init__(self, status, detail):
        self.status, self.detail = status, detail
        super().__init__(f"{status}: {detail}")


class LibraryError(Error, ImportError):
    """libnormjit missing, or of a version or struct layout this package was not written for."""

    def __init__(self, detail):
        super().__init__("NJ_ERR_LIBRARY", detail)


class ArgumentError(Error, ValueError):
    """Bad input: axes, extents, strides, flags, activation, devices."""


class ShapeError(ArgumentError):
    """Operand shapes do not match, or groups do not divide the channels."""


class DtypeError(Error, TypeError):
    """Unsupported dtype or dtype pairing."""


class CompileError(Error):
    """Kernel rendering or compilation failed (NVRTC, or the host compiler under the emulator)."""


class DeviceError(Error):
    """No driver or device, a CUDA call failed, or an emulated kernel faulted."""


class CacheError(Error):
    """Kernel cache I/O, safety, corruption, lock timeouts, or a miss with compilation disabled."""


class UnsupportedError(Error, NotImplementedError):
    """A problem the library does not support."""


_BY_STATUS = {
    "NJ_ERR_SHAPE_MISMATCH": ShapeError, "NJ_ERR_BAD_GROUPS": ShapeError, "NJ_ERR_BAD_DTYPE": DtypeError,
    "NJ_ERR_TEMPLATE": CompileError, "NJ_ERR_NVRTC_MISSING": CompileError, "NJ_ERR_COMPILE": CompileError,
    "NJ_ERR_HOST_COMPILER": CompileError, "NJ_ERR_NO_DRIVER": DeviceError, "NJ_ERR_NO_DEVICE": DeviceError,
    "NJ_ERR_CUDA": DeviceError, "NJ_ERR_EMULATOR": DeviceError, "NJ_ERR_CACHE_IO": CacheError,
    "NJ_ERR_CACHE_UNSAFE": CacheError, "NJ_ERR_CACHE_CORRUPT": CacheError, "NJ_ERR_LOCK_TIMEOUT": CacheError,
    "NJ_ERR_NOT_CACHED": CacheError, "NJ_ERR_UNSUPPORTED": UnsupportedError, "NJ_ERR_OUT_OF_MEMORY": Error,
    "NJ_ERR_INTERNAL": Error,
}


def error_for(status, detail):
    """The exception for an nj_status name (argument errors by default)."""
    return _BY_STATUS.get(status, ArgumentError)(status, detail)
