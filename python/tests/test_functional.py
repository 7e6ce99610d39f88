"""Every function forward and backward, f32/f16/bf16, four memory layouts, against the float64 NumPy
reference and PyTorch's own function."""
import numpy as np
import pytest
import torch

import normjit
import normjit.torch as njt
import reference
from cases import CASES, DTYPES, TOL, close, f64, make

# float32 in every layout; the 16-bit types in two each (their kernels differ by dtype, not by layout code)
COMBOS = [("f32", lay) for lay in ("contiguous", "channels_last", "transposed", "sliced")] + \
         [("f16", "contiguous"), ("f16", "sliced"), ("bf16", "channels_last"), ("bf16", "transposed")]


@pytest.mark.parametrize("dtype,layout", COMBOS, ids=[f"{d}-{l}" for d, l in COMBOS])
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_forward_backward(case, dtype, layout, device):
    dt = DTYPES[dtype]
    pdt = dt if dtype == "bf16" else torch.float32  # both parameter pairings: x's dtype and float32
    x = make(case.shape, dt, layout, device, 1, scale=2.0, offset=0.5)
    r = make(case.shape, dt, layout, device, 2) if case.residual else None
    w = (torch.rand(case.wshape, generator=torch.Generator().manual_seed(3)) + 0.5).to(device, pdt)
    b = (torch.randn(case.wshape, generator=torch.Generator().manual_seed(4)) * 0.1).to(device, pdt)
    if case.rms:
        b = None
    out = case.call(x, w, b, r, return_stats=True, **({"return_residual": True} if r is not None else {}))
    y, mean, rstd = out[0], out[-2], out[-1]
    xs = out[1] if r is not None else x

    rx = case.ref_view(f64(x))
    rr = case.ref_view(f64(r)) if r is not None else None
    wv = f64(w)
    ry, rmean, rrstd, rh = reference.forward(rx, case.reduce, case.feature, wv, f64(b) if b is not None else None,
                                             1e-5, case.rms, case.act, rr)
    tol = TOL[dtype]
    close(case.ref_view(f64(y)), ry, tol, "y")
    close(rstd, rrstd * 1, 1e-4 * max(1.0, 1 / np.abs(rrstd).max()), "rstd")
    if case.rms:
        assert mean is None
    else:
        close(mean, rmean, 1e-5, "mean")
    if r is not None:
        close(case.ref_view(f64(xs)), rh, tol, "residual_out")
    if layout != "sliced":  # dense inputs keep their memory format
        assert y.stride() == x.stride(), f"y strides {y.stride()} != x strides {x.stride()}"
    if case.torch_ref is not None:
        tx = f64(xs)  # the summed input when there is a residual
        ty = case.torch_ref(torch.from_numpy(tx).float(), w.cpu().float(), b.cpu().float() if b is not None else None)
        close(f64(y), f64(ty), tol, "y vs torch")

    dy = make(case.shape, dt, layout, device, 5)
    dx, dw, db = case.bwd(dy, xs, mean, rstd, w, b)
    rdx, rdw, rdb = reference.backward(case.ref_view(f64(dy)), case.ref_view(f64(xs)), case.reduce, case.feature,
                                       wv, f64(b) if b is not None else None, 1e-5, case.rms, case.act)
    close(case.ref_view(f64(dx)), rdx, 4 * tol, "dx")
    close(f64(dw).reshape(rdw.shape), rdw, 4 * tol, "dweight")
    assert dw.dtype == pdt and dw.shape == w.shape
    if b is not None:
        close(f64(db).reshape(rdb.shape), rdb, 4 * tol, "dbias")
    if layout != "sliced":
        assert dx.stride() == x.stride()


@pytest.mark.parametrize("act", ["relu", "silu", "gelu", "gelu_tanh", "sigmoid"])
def test_activations(act, device):
    """Each fused activation, forward and backward (beta recomputes the activation's input)."""
    x = make((5, 24), torch.float32, "contiguous", device, 11)
    w = torch.linspace(0.5, 1.5, 24, device=device)
    b = torch.linspace(-0.3, 0.3, 24, device=device)
    y, mean, rstd = normjit.layer_norm(x, -1, w, b, activation=act, return_stats=True)
    ry, _, _, _ = reference.forward(f64(x), (1,), (1,), f64(w), f64(b), act=act)
    close(y, ry, 2e-5, "y")
    tf = {"relu": torch.relu, "silu": torch.nn.functional.silu, "gelu": torch.nn.functional.gelu,
          "sigmoid": torch.sigmoid, "gelu_tanh": lambda t: torch.nn.functional.gelu(t, approximate="tanh")}[act]
    ty = tf(torch.nn.functional.layer_norm(x.cpu(), (24,), w.cpu(), b.cpu()))
    close(y, f64(ty), 2e-5, "y vs torch")
    dy = make((5, 24), torch.float32, "contiguous", device, 12)
    dx, dw, db = normjit.layer_norm_backward(dy, x, mean, rstd, -1, w, b, activation=act)
    rdx, rdw, rdb = reference.backward(f64(dy), f64(x), (1,), (1,), f64(w), f64(b), act=act)
    close(dx, rdx, 1e-4, "dx")
    close(dw, rdw, 1e-4, "dweight")
    close(db, rdb, 1e-4, "dbias")


def _rel_close(got, ref, tol, what):
    """Relative to the result's own size: the degenerate sets' dx is ~eps * rstd^3, far below 1."""
    got, ref = f64(got).reshape(ref.shape), np.asarray(ref, np.float64)
    err, scale = np.abs(got - ref).max(), np.abs(ref).max()
    assert scale > 0 and err <= tol * scale, f"{what}: max error {err:.3g} > {tol * scale:.3g}"


@pytest.mark.parametrize("rms,n", [(True, 1), (False, 2)], ids=["rms-1", "layernorm-2"])
def test_degenerate_sets(rms, n, device):
    """Sets of one element (two, centred) have dx = eps * rstd^3 * (g - mean g): with the forward's eps
    (functional and autograd), exact to 1e-5 of itself, where the general form is off by up to 3%."""
    x = make((64, n), torch.float32, "contiguous", device, 21) * 3  # the general form: 5e-4 off here
    w = torch.linspace(0.5, 1.5, n, device=device)
    dy = make((64, n), torch.float32, "contiguous", device, 22)
    rdx, _, _ = reference.backward(f64(dy), f64(x), (1,), (1,), f64(w), None, 1e-5, rms)
    if rms:
        _, _, rstd = normjit.rms_norm(x, -1, w, eps=1e-5, return_stats=True)
        dx, _, _ = normjit.rms_norm_backward(dy, x, rstd, -1, w, eps=1e-5)
    else:
        _, mean, rstd = normjit.layer_norm(x, -1, w, eps=1e-5, return_stats=True)
        dx, _, _ = normjit.layer_norm_backward(dy, x, mean, rstd, -1, w, eps=1e-5)
    _rel_close(dx, rdx, 1e-5, "dx")
    xg = x.clone().requires_grad_()
    fn = njt.rms_norm if rms else njt.layer_norm
    fn(xg, -1, w, eps=1e-5).backward(dy)
    _rel_close(xg.grad, rdx, 1e-5, "autograd dx")
