"""torch >= 2.4: the kernels are torch.library custom ops with fake implementations; torch.compile traces
a model through them without graph breaks, and opcheck finds real and fake implementations consistent."""
import pytest
import torch

import normjit.torch as njt
from cases import close, f64

needs_ops = pytest.mark.skipif(not njt._want_library(), reason="torch < 2.4 (or NORMJIT_TORCH_OPS=0): the "
                               "autograd Function path, tested by the other suites")


@needs_ops
def test_registered():
    assert njt.USES_TORCH_LIBRARY, njt.TORCH_LIBRARY_ERROR
    assert hasattr(torch.ops.normjit, "norm_fwd") and hasattr(torch.ops.normjit, "norm_bwd")


@needs_ops
def test_opcheck(device):
    x = torch.randn(2, 16, 4, 4, device=device).contiguous(memory_format=torch.channels_last).requires_grad_()
    w = torch.rand(16, device=device, requires_grad=True)
    b = torch.randn(16, device=device, requires_grad=True)
    torch.library.opcheck(torch.ops.normjit.norm_fwd.default,
                          (x, w, b, None, [2, 3, 4], [1, 2], False, 2, "groupnorm", 4, 1e-5))


@needs_ops
def test_compile_fullgraph(device):
    """No graph break (fullgraph=True); outputs and gradients as eager."""
    m = torch.nn.Sequential(torch.nn.Conv2d(8, 16, 3, padding=1), njt.GroupNorm(4, 16, activation="silu"),
                            njt.LayerNorm(16, axes=1)).to(device)
    x = torch.randn(2, 8, 6, 6, device=device)
    cm = torch.compile(m, backend="aot_eager", fullgraph=True)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = m(xa), cm(xb)
    close(yb, f64(ya), 1e-5, "compiled output")
    ya.sum().backward()
    yb.sum().backward()
    close(xb.grad, f64(xa.grad), 1e-4, "compiled input gradient")
