"""Test problems shared by the suites: small shapes reused so each kernel compiles once a session."""
import numpy as np
import torch

import normjit

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
# Tolerance of an output against the float64 reference, relative to the reference's largest magnitude:
# float32 arithmetic throughout, so the output's own rounding dominates for 16-bit types.
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}


class Case:
    """fn(x, w, b, residual, **kw) of normjit.functional (or normjit.torch), its backward, and the
    reference's view of it (x reshaped for GroupNorm, reduce and feature axes)."""

    def __init__(self, name, shape, reduce, feature, call, bwd, rms=False, act=None, groups=None, residual=False,
                 wshape=None, torch_ref=None):
        self.name, self.shape, self.reduce, self.feature = name, shape, reduce, feature
        self.call, self.bwd, self.rms, self.act, self.groups = call, bwd, rms, act, groups
        self.residual, self.wshape, self.torch_ref = residual, wshape, torch_ref

    def ref_view(self, a):
        """x as the reference sees it (GroupNorm: C split into (G, C/G))."""
        if self.groups is None:
            return a
        n, c = a.shape[:2]
        return a.reshape((n, self.groups, c // self.groups) + a.shape[2:])


F = normjit  # the functional API
CASES = [
    Case("layer_norm", (6, 40), (1,), (1,), lambda x, w, b, r, **k: F.layer_norm(x, -1, w, b, 1e-5, residual=r, **k),
         lambda dy, x, m, s, w, b: F.layer_norm_backward(dy, x, m, s, -1, w, b), residual=True, wshape=(40,),
         torch_ref=lambda x, w, b: torch.nn.functional.layer_norm(x, (40,), w, b, 1e-5)),
    Case("layer_norm_c", (2, 12, 5, 3), (1,), (1,), lambda x, w, b, r, **k: F.layer_norm(x, 1, w, b, 1e-5, **k),
         lambda dy, x, m, s, w, b: F.layer_norm_backward(dy, x, m, s, 1, w, b), wshape=(12,),
         torch_ref=lambda x, w, b: torch.nn.functional.layer_norm(x.permute(0, 2, 3, 1), (12,), w, b,
                                                                  1e-5).permute(0, 3, 1, 2)),
    Case("rms_norm", (6, 40), (1,), (1,), lambda x, w, b, r, **k: F.rms_norm(x, -1, w, 1e-5, residual=r, **k),
         lambda dy, x, m, s, w, b: F.rms_norm_backward(dy, x, s, -1, w), rms=True, residual=True, wshape=(40,)),
    Case("group_norm", (2, 12, 5, 3), (2, 3, 4), (1, 2),
         lambda x, w, b, r, **k: F.group_norm(x, 3, w, b, 1e-5, activation="silu", **k),
         lambda dy, x, m, s, w, b: F.group_norm_backward(dy, x, m, s, 3, w, b, activation="silu"), act="silu",
         groups=3, wshape=(12,),
         torch_ref=lambda x, w, b: torch.nn.functional.silu(torch.nn.functional.group_norm(x, 3, w, b, 1e-5))),
    Case("instance_norm", (2, 6, 5, 4), (2, 3), (1,), lambda x, w, b, r, **k: F.instance_norm(x, w, b, 1e-5, **k),
         lambda dy, x, m, s, w, b: F.instance_norm_backward(dy, x, m, s, w, b), wshape=(6,),
         torch_ref=lambda x, w, b: torch.nn.functional.instance_norm(x, weight=w, bias=b, eps=1e-5)),
    Case("batch_norm", (4, 6, 3, 5), (0, 2, 3), (1,), lambda x, w, b, r, **k: F.batch_norm(x, w, b, 1e-5, **k),
         lambda dy, x, m, s, w, b: F.batch_norm_backward(dy, x, m, s, w, b), wshape=(6,),
         torch_ref=lambda x, w, b: torch.nn.functional.batch_norm(x, None, None, w, b, True, 0.0, 1e-5)),
    Case("norm", (4, 6, 5), (0, 2), (1,),
         lambda x, w, b, r, **k: F.norm(x, (0, 2), 1, w, b, 1e-5, residual=r, activation="gelu_tanh", **k),
         lambda dy, x, m, s, w, b: F.norm_backward(dy, x, m, s, (0, 2), 1, w, b, activation="gelu_tanh"),
         act="gelu_tanh", residual=True, wshape=(6,)),
]


def make(shape, dtype, layout, device, seed, scale=1.0, offset=0.0):
    """A tensor of logical `shape` laid out as `layout`: contiguous, channels_last (4-D; 2- and 3-D arrays
    get the axes reversed in memory), transposed (every axis reversed in memory) or sliced (a view one
    element into a wider tensor: misaligned and not dense)."""
    g = torch.Generator().manual_seed(seed)
    full = torch.randn(shape, generator=g, dtype=torch.float64) * scale + offset
    if layout == "contiguous":
        t = full
    elif layout == "channels_last" and len(shape) == 4:
        t = full.contiguous(memory_format=torch.channels_last)
    elif layout in ("channels_last", "transposed"):
        perm = tuple(reversed(range(len(shape))))
        t = full.permute(perm).contiguous().permute(perm)
    elif layout == "sliced":
        wide = torch.zeros(shape[:-1] + (shape[-1] + 1,), dtype=torch.float64)
        t = wide[..., 1:]
        t.copy_(full)
    else:
        raise ValueError(layout)
    return _to(t, dtype, device)


def _to(t, dtype, device):
    # keep the layout: empty_strided with the same strides, then copy (to() may compact a view)
    base = t if t.storage_offset() == 0 else None
    if base is not None:
        out = torch.empty_strided(t.shape, t.stride(), dtype=dtype, device=device)
        out.copy_(t)
        return out
    wide = torch.zeros(t.shape[:-1] + (t.shape[-1] + 1,), dtype=dtype, device=device)
    out = wide[..., 1:]
    out.copy_(t)
    return out


def f64(t):
    return t.detach().to("cpu", torch.float64).numpy()


def close(got, ref, tol, what):
    got = np.asarray(f64(got) if isinstance(got, torch.Tensor) else got, np.float64)
    ref = np.asarray(ref, np.float64)
    assert got.shape == ref.shape, f"{what}: shape {got.shape} != {ref.shape}"
    scale = max(np.abs(ref).max(), 1.0)
    err = np.abs(got - ref).max()
    assert err <= tol * scale, f"{what}: max error {err:.3g} > {tol * scale:.3g}"
