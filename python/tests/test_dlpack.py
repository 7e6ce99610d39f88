"""Arrays through DLPack: NumPy in and out, any __dlpack__ producer, strides honoured, nothing copied."""
import numpy as np
import pytest
import torch

import normjit
import reference
from cases import close
from conftest import DEVICE

cpu_only = pytest.mark.skipif(DEVICE != "cpu", reason="NumPy arrays run on the CPU: covered by the CPU run")


class DLPackOnly:
    """An array known only through the DLPack protocol (as a JAX or CuPy array is to normjit)."""

    def __init__(self, a):
        self.a = a

    def __dlpack__(self, stream=None):
        return self.a.__dlpack__()

    def __dlpack_device__(self):
        return self.a.__dlpack_device__()


@cpu_only
def test_numpy_layer_norm_over_channels():
    x = np.random.default_rng(0).standard_normal((2, 8, 3, 5)).astype(np.float32)
    w = np.linspace(0.5, 1.5, 8, dtype=np.float32)
    y, mean, rstd = normjit.layer_norm(x, 1, w, None, 1e-5, return_stats=True)
    assert isinstance(y, np.ndarray) and y.dtype == np.float32 and mean.shape == (2, 3, 5)
    ry, rm, rr, _ = reference.forward(x, (1,), (1,), w)
    close(y, ry, 2e-5, "y")
    close(mean, rm, 1e-5, "mean")
    dy = np.ones_like(x)
    dx, dw, db = normjit.layer_norm_backward(dy, x, mean, rstd, 1, w)
    rdx, rdw, _ = reference.backward(dy, x, (1,), (1,), w)
    close(dx, rdx, 1e-4, "dx")
    close(dw, rdw, 1e-4, "dw")
    assert db is None


@cpu_only
def test_numpy_strided_f16():
    """A transposed float16 NumPy view: read in place, the output keeps its layout (order K)."""
    base = np.random.default_rng(1).standard_normal((12, 6)).astype(np.float16)
    x = base.T  # (6, 12), strides (1, 6) elements
    y = normjit.rms_norm(x, -1, None, 1e-6)
    assert y.strides == x.strides
    ry, _, _, _ = reference.forward(x, (1,), (1,), rms=True, eps=1e-6)
    close(y, ry, 2e-3, "y")


def test_generic_producer(device):
    """An array known only by __dlpack__ (NumPy's on the CPU, a torch tensor's on CUDA)."""
    x = np.random.default_rng(2).standard_normal((4, 6, 5)).astype(np.float32)
    src = x if device == "cpu" else torch.from_numpy(x).to(device)
    y = normjit.group_norm(DLPackOnly(src), 2, None, None, 1e-5)
    y = y.cpu().numpy() if isinstance(y, torch.Tensor) else np.asarray(y)
    ry, _, _, _ = reference.forward(x.reshape(4, 2, 3, 5), (2, 3), (1, 2))
    close(y.reshape(4, 2, 3, 5), ry, 2e-5, "y")


def test_torch_through_dlpack_bf16():
    """A torch bfloat16 tensor seen only through __dlpack__: the View reads the tensor's own memory."""
    from normjit._arrays import view
    t = torch.randn(3, 10)[:, 1:].bfloat16()
    v = view(DLPackOnly(t))
    assert v.ptr == t.data_ptr() and v.strides == t.stride() and v.shape == tuple(t.shape)
    v2 = view(t)
    assert (v2.ptr, v2.strides) == (v.ptr, v.strides)


def test_no_copy_of_input(device):
    """The kernels read x where it lies: a view into a bigger buffer, normalized in place of a copy."""
    base = torch.randn(4, 33, device=device)
    x = base[:, 1:]
    y = normjit.layer_norm(x)
    ref = torch.nn.functional.layer_norm(x.cpu(), (32,))
    close(y.cpu(), ref.double().numpy(), 2e-5, "y")


def test_plan_describe(device):
    from normjit import _core
    from normjit.functional import _ln_spec
    x = torch.randn(4, 32, device=device)
    text = _core.describe(x, _ln_spec(x, -1, False, None))
    assert "row" in text


def test_context_shares_the_cache(device):
    """One context per device, on the C library's cache root (NORMJIT_CACHE_DIR, as the CLI's)."""
    import os
    normjit.layer_norm(torch.randn(4, 32, device=device))
    info = normjit.context_info(device)
    assert info["backend"] == ("emulator" if device == "cpu" else "cuda")
    assert os.path.realpath(info["cache_dir"]) == os.path.realpath(os.environ["NORMJIT_CACHE_DIR"])
    normjit.layer_norm(torch.randn(9, 32, device=device))  # another batch: the same kernels, nothing built
    after = normjit.context_info(device)
    assert (after["compiles"], after["misses"]) == (info["compiles"], info["misses"])
