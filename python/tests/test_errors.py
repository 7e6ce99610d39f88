"""Bad input is a normjit.Error subclass with the status name and a message, never a crash; a library of
another version or struct layout is refused at import."""
import ctypes
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

import normjit
import normjit.torch as njt
from normjit._capi import ContextOptions


def _x(device, *shape, dtype=torch.float32):
    return torch.randn(shape or (2, 8, 4, 4), device=device, dtype=dtype)


def _raises(cls, status, fn, match=None):
    with pytest.raises(cls, match=match) as e:
        fn()
    assert isinstance(e.value, normjit.Error)
    assert e.value.status == status, e.value
    assert e.value.detail
    return e.value


def test_bad_axes(device):
    x = _x(device)
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_AXIS", lambda: normjit.layer_norm(x, 4), "out of range")
    _raises(ValueError, "NJ_ERR_DUPLICATE_AXIS", lambda: normjit.layer_norm(x, (1, -3)))
    _raises(ValueError, "NJ_ERR_EMPTY_REDUCTION", lambda: normjit.norm(x, ()))


def test_bad_groups(device):
    x = _x(device)
    e = _raises(normjit.ShapeError, "NJ_ERR_BAD_GROUPS", lambda: normjit.group_norm(x, 3))
    assert "8 channels" in e.detail
    _raises(normjit.ShapeError, "NJ_ERR_BAD_GROUPS", lambda: normjit.group_norm(x, 0))
    _raises(normjit.ShapeError, "NJ_ERR_BAD_GROUPS", lambda: njt.group_norm(x, 16))


def test_shape_and_dtype_mismatch(device):
    x = _x(device)
    _raises(normjit.ShapeError, "NJ_ERR_SHAPE_MISMATCH",
            lambda: normjit.layer_norm(x, 1, torch.ones(7, device=device)))
    _raises(normjit.ShapeError, "NJ_ERR_SHAPE_MISMATCH",
            lambda: normjit.layer_norm(x, -1, residual=_x(device, 2, 8, 4, 5)))
    _raises(normjit.DtypeError, "NJ_ERR_BAD_DTYPE",
            lambda: normjit.layer_norm(x, -1, residual=x.half()))
    _raises(TypeError, "NJ_ERR_BAD_DTYPE",
            lambda: normjit.layer_norm(x.half(), -1, torch.ones(4, device=device, dtype=torch.bfloat16)))
    _raises(TypeError, "NJ_ERR_BAD_DTYPE",
            lambda: normjit.layer_norm(x, -1, torch.ones(4, device=device), torch.zeros(4, device=device).half()))


def test_unsupported_dtypes(device):
    for dt in (torch.float64, torch.int32):
        _raises(normjit.DtypeError, "NJ_ERR_BAD_DTYPE", lambda: normjit.layer_norm(torch.ones(3, 4, dtype=dt)))
    np = pytest.importorskip("numpy")
    _raises(normjit.DtypeError, "NJ_ERR_BAD_DTYPE", lambda: normjit.layer_norm(np.ones((3, 4))))


def test_different_devices(device):
    other = "meta" if device == "cpu" else "cpu"
    x = _x(device)
    w = torch.ones(4, device=other)
    if other == "meta":
        _raises(normjit.ArgumentError, "NJ_ERR_BAD_ARGUMENT", lambda: normjit.layer_norm(x, -1, w), "meta")
    else:
        _raises(normjit.ArgumentError, "NJ_ERR_BAD_ARGUMENT", lambda: normjit.layer_norm(x, -1, w), "one device")


def test_bad_activation_and_eps(device):
    x = _x(device)
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_ACTIVATION", lambda: normjit.layer_norm(x, activation="tanh"))
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_ARGUMENT", lambda: normjit.layer_norm(x, eps=-1.0))
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_FLAGS", lambda: normjit.layer_norm(x, return_residual=True))


def test_bad_rank(device):
    x = torch.randn((1,) * 8 + (3,), device=device)
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_RANK", lambda: normjit.layer_norm(x))
    _raises(normjit.ArgumentError, "NJ_ERR_BAD_RANK", lambda: normjit.group_norm(x[0], 1))


@pytest.mark.skipif(os.environ.get("NORMJIT_TEST_DEVICE", "cpu") != "cpu", reason="a NumPy array: the CPU run's")
def test_library_status_reaches_python():
    """A failure only the C library detects (a negative stride, which NumPy views can have) surfaces as
    the status and message the library gave."""
    np = pytest.importorskip("numpy")
    x = np.ones((3, 4), np.float32)[:, ::-1]
    e = _raises(normjit.ArgumentError, "NJ_ERR_BAD_STRIDE", lambda: normjit.layer_norm(x))
    assert "stride" in e.detail


def test_empty_input(device):
    x = torch.randn(0, 8, device=device)
    y, mean, rstd = normjit.layer_norm(x, -1, torch.ones(8, device=device), return_stats=True)
    assert y.shape == (0, 8) and rstd.shape == (0,)


_SHIM = """
#include <stdint.h>
#include <string.h>
const char *nj_version(void) { return "%s"; }
uint32_t nj_version_number(void) { return %d; }
void nj_context_options_init(void *o) { uint32_t s = %d; memset(o, 0, s); memcpy(o, &s, 4); }
int nj_preset_layernorm(void *p, int d, int r, const int64_t *e, int k, unsigned f) { return 13; }
#define STUB(n) int n(void) { return 33; }
STUB(nj_status_name) STUB(nj_status_string) STUB(nj_last_error) STUB(nj_problem_validate)
STUB(nj_problem_to_text) STUB(nj_context_create) STUB(nj_context_destroy) STUB(nj_context_cache_stats)
STUB(nj_context_backend) STUB(nj_context_arch) STUB(nj_context_cache_dir) STUB(nj_plan_get)
STUB(nj_plan_describe) STUB(nj_plan_workspace_size) STUB(nj_forward) STUB(nj_backward) STUB(nj_synchronize)
"""


# The sizes follow the package's own struct so the cases stay right when the options grow.
_OPTS = ctypes.sizeof(ContextOptions)


@pytest.mark.parametrize("version,number,opts_size,message", [
    ("0.2.0", 200, _OPTS, "is normjit 0.2.0, this package needs 0.1.x"),
    ("0.1.7", 107, _OPTS - 8, f"nj_context_options is {_OPTS - 8} bytes in the loaded library, {_OPTS}"),
    ("0.1.7", 107, _OPTS, "nj_problem_desc is laid out differently"),
])
@pytest.mark.skipif(not shutil.which("cc"), reason="needs a C compiler to build the stand-in library")
def test_library_refused(tmp_path, version, number, opts_size, message):
    src = tmp_path / "shim.c"
    src.write_text(_SHIM % (version, number, opts_size))
    lib = tmp_path / "libnormjit.so"
    subprocess.check_call(["cc", "-shared", "-fPIC", "-w", "-o", str(lib), str(src)])
    env = dict(os.environ, NORMJIT_LIBRARY=str(lib))
    code = textwrap.dedent("""
        import normjit
    """)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode != 0
    assert "LibraryError" in r.stderr and message in r.stderr, r.stderr
