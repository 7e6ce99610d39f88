"""ctypes bindings of include/normjit.h (the public header only) and the library loader.

The structs below mirror the header of normjit 0.1; `load()` refuses a library whose version or struct
layout differs (a struct laid out differently would be read as garbage by the C side, not rejected).
"""
import ctypes
import ctypes.util
import os
from ctypes import (POINTER, Structure, c_char_p, c_float, c_int32, c_int64, c_size_t, c_uint16,
                    c_uint32, c_uint64, c_void_p, CFUNCTYPE)

from ._errors import LibraryError

# The C library this package was written for: major.minor must match, any patch level is accepted.
VERSION_MAJOR, VERSION_MINOR = 0, 1
MAX_RANK = 8

F32, F16, BF16 = 1, 2, 3
ACT = {None: 0, "none": 0, "relu": 1, "silu": 2, "gelu_tanh": 3, "gelu": 4, "gelu_erf": 4, "sigmoid": 5}
FLAG_CENTER, FLAG_SCALE, FLAG_BIAS = 1, 2, 4
FLAG_RESIDUAL, FLAG_RESIDUAL_OUT, FLAG_SAVE_STATS = 8, 16, 32
PRESET = {"general": 0, "layernorm": 1, "rmsnorm": 2, "instancenorm": 3, "groupnorm": 4, "batchnorm": 5}
BACKEND_CUDA, BACKEND_EMULATOR = 1, 2
PASS_FORWARD, PASS_BACKWARD = 1, 2


class TensorDesc(Structure):
    _fields_ = [("dtype", c_int32), ("rank", c_int32), ("extents", c_int64 * MAX_RANK),
                ("strides", c_int64 * MAX_RANK)]


class ProblemDesc(Structure):
    _fields_ = [("struct_size", c_uint32), ("flags", c_uint32), ("activation", c_int32),
                ("param_dtype", c_int32), ("reduce_axes", c_uint32), ("feature_axes", c_uint32),
                ("preset", c_int32), ("groups", c_int32), ("x", TensorDesc), ("y", TensorDesc),
                ("residual", TensorDesc), ("residual_out", TensorDesc), ("dy", TensorDesc),
                ("dx", TensorDesc)]


LOG_FN = CFUNCTYPE(None, c_void_p, c_int32, c_char_p)


class ContextOptions(Structure):
    _fields_ = [("struct_size", c_uint32), ("backend", c_int32), ("arch", c_int32), ("device", c_int32),
                ("flags", c_uint32), ("max_parallel_compiles", c_int32), ("cache_max_bytes", c_uint64),
                ("cache_dir", c_char_p), ("seed", c_uint64), ("log_level", c_int32), ("log_fn", LOG_FN),
                ("log_user", c_void_p), ("remote_cache", c_char_p), ("max_background_compiles", c_int32)]


class ForwardArgs(Structure):
    _fields_ = [("struct_size", c_uint32), ("eps", c_float), ("x", c_void_p), ("residual", c_void_p),
                ("gamma", c_void_p), ("beta", c_void_p), ("y", c_void_p), ("residual_out", c_void_p),
                ("mean", c_void_p), ("rstd", c_void_p), ("workspace", c_void_p), ("stream", c_void_p),
                ("workspace_size", c_size_t)]


class BackwardArgs(Structure):
    _fields_ = [("struct_size", c_uint32), ("dy", c_void_p), ("x", c_void_p), ("gamma", c_void_p),
                ("beta", c_void_p), ("mean", c_void_p), ("rstd", c_void_p), ("dx", c_void_p),
                ("dgamma", c_void_p), ("dbeta", c_void_p), ("workspace", c_void_p), ("stream", c_void_p),
                ("workspace_size", c_size_t), ("eps", c_float)]


class CacheStats(Structure):
    _fields_ = [("struct_size", c_uint32)] + [
        (n, c_uint64) for n in ("hits_memory", "hits_disk", "misses", "compiles", "compile_failures", "evictions",
                                "corrupt_entries", "disk_bytes", "disk_entries", "store_failures", "lock_fallbacks")
    ] + [("disk_status", c_int32)]


# The sizes this package was written for (x86-64 / aarch64 LP64); checked against ctypes at import.
EXPECTED_SIZES = {TensorDesc: 136, ProblemDesc: 848, ContextOptions: 88, ForwardArgs: 96, BackwardArgs: 112,
                  CacheStats: 104}

_SIGNATURES = {
    "nj_version": (c_char_p, []),
    "nj_version_number": (c_uint32, []),
    "nj_status_name": (c_char_p, [c_int32]),
    "nj_status_string": (c_char_p, [c_int32]),
    "nj_last_error": (c_char_p, []),
    "nj_problem_validate": (c_int32, [POINTER(ProblemDesc)]),
    "nj_preset_layernorm": (c_int32, [POINTER(ProblemDesc), c_int32, c_int32, POINTER(c_int64), c_int32,
                                      c_uint32]),
    "nj_problem_to_text": (c_int32, [POINTER(ProblemDesc), c_char_p, c_size_t, POINTER(c_size_t)]),
    "nj_context_options_init": (None, [c_void_p]),
    "nj_context_create": (c_int32, [POINTER(ContextOptions), POINTER(c_void_p)]),
    "nj_context_destroy": (None, [c_void_p]),
    "nj_context_cache_stats": (c_int32, [c_void_p, POINTER(CacheStats)]),
    "nj_context_backend": (c_int32, [c_void_p]),
    "nj_context_arch": (c_int32, [c_void_p]),
    "nj_context_cache_dir": (c_char_p, [c_void_p]),
    "nj_plan_get": (c_int32, [c_void_p, POINTER(ProblemDesc), c_uint32, POINTER(c_void_p)]),
    "nj_plan_describe": (c_int32, [c_void_p, c_char_p, c_size_t, POINTER(c_size_t)]),
    "nj_plan_workspace_size": (c_size_t, [c_void_p, c_int32]),
    "nj_forward": (c_int32, [c_void_p, POINTER(ForwardArgs)]),
    "nj_backward": (c_int32, [c_void_p, POINTER(BackwardArgs)]),
    "nj_synchronize": (c_int32, [c_void_p, c_void_p]),
}


def _candidates():
    """Where the library is looked for, first hit wins (README, Python section)."""
    env = os.environ.get("NORMJIT_LIBRARY")
    if env:
        return [env]  # an explicit choice is never second-guessed
    here = os.path.dirname(os.path.abspath(__file__))
    out = [os.path.join(here, "libnormjit.so.0")]  # bundled by `pip install ./python`
    repo = os.path.dirname(os.path.dirname(here))  # running from the source tree: python/normjit
    for b in ("build", "build-dev"):
        out.append(os.path.join(repo, b, "libnormjit.so.0"))
    out.append(ctypes.util.find_library("normjit") or "libnormjit.so.0")
    return out


def _check_layout(lib):
    for cls, size in EXPECTED_SIZES.items():
        if ctypes.sizeof(cls) != size:
            raise LibraryError(f"ctypes lays out {cls.__name__} in {ctypes.sizeof(cls)} bytes, expected {size}: "
                               "this platform's ABI is not one the package supports")
    # The library's own idea of nj_context_options: init writes struct_size into a generous buffer.
    buf = ctypes.create_string_buffer(1024)
    lib.nj_context_options_init(buf)
    got = c_uint32.from_buffer(buf).value
    if got != ctypes.sizeof(ContextOptions):
        raise LibraryError(f"nj_context_options is {got} bytes in the loaded library, {ctypes.sizeof(ContextOptions)} "
                           "in this package: rebuild the package against this library")
    # nj_problem_desc and nj_tensor_desc: a preset fills known fields, read back at their offsets.
    p = ProblemDesc()
    ext = (c_int64 * 3)(5, 7, 11)
    st = lib.nj_preset_layernorm(ctypes.byref(p), BF16, 3, ext, 2, FLAG_SCALE)
    ok = (st == 0 and p.struct_size == ctypes.sizeof(ProblemDesc) and p.preset == PRESET["layernorm"]
          and p.x.dtype == BF16 and p.x.rank == 3 and list(p.x.extents[:3]) == [5, 7, 11]
          and list(p.x.strides[:3]) == [77, 11, 1] and p.reduce_axes == 6)
    if not ok:
        raise LibraryError(f"nj_problem_desc is laid out differently in the loaded library (struct_size "
                           f"{p.struct_size}, expected {ctypes.sizeof(ProblemDesc)}): rebuild the package")


def load():
    errors = []
    for path in _candidates():
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            errors.append(f"{path}: {e}")
            continue
        for name, (res, args) in _SIGNATURES.items():
            fn = getattr(lib, name, None)
            if fn is None:
                raise LibraryError(f"{path} lacks {name}: not a normjit library of version "
                                   f"{VERSION_MAJOR}.{VERSION_MINOR}")
            fn.restype, fn.argtypes = res, args
        v = lib.nj_version_number()
        if v // 10000 != VERSION_MAJOR or (v // 100) % 100 != VERSION_MINOR:
            raise LibraryError(f"{path} is normjit {lib.nj_version().decode()}, this package needs "
                               f"{VERSION_MAJOR}.{VERSION_MINOR}.x (set NORMJIT_LIBRARY or reinstall)")
        _check_layout(lib)
        lib.path = path
        return lib
    raise LibraryError("libnormjit not found; tried:\n  " + "\n  ".join(errors) +
                       "\ninstall with `pip install ./python` or set NORMJIT_LIBRARY to libnormjit.so")
