"""normjit for PyTorch: autograd-aware functions and drop-in nn.Modules.

LayerNorm, GroupNorm, InstanceNorm1d/2d/3d and BatchNorm2d subclass PyTorch's own modules, so parameters,
buffers, state_dict keys and checkpoints are PyTorch's; RMSNorm mirrors torch.nn.RMSNorm (weight). With
torch >= 2.4 the kernels are registered as torch.library custom ops (normjit::norm_fwd, normjit::norm_bwd)
with fake implementations, so torch.compile graphs do not break on them; older torch (Debian's 1.13) uses an
autograd Function. NORMJIT_TORCH_OPS=0 forces the autograd Function.
"""
import os
from typing import List, Optional, Tuple

import torch
import torch.nn.functional as TF
from torch import Tensor

from . import _core, functional as _F

__all__ = ["norm", "layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm", "LayerNorm", "RMSNorm",
           "GroupNorm", "InstanceNorm1d", "InstanceNorm2d", "InstanceNorm3d", "BatchNorm2d", "USES_TORCH_LIBRARY"]


def _spec(reduce, feature, rms, act, preset, groups):
    s = _core.Spec(reduce, feature, rms, None, preset, groups, split=(1, groups) if preset == "groupnorm" else None)
    s.act = act
    return s


def _dense_grad(g):
    # autograd may hand a broadcast (stride 0) gradient, e.g. from .sum(): give the kernels real elements
    return g if all(s != 0 or e <= 1 for e, s in zip(g.shape, g.stride())) else g.contiguous()


def _fwd_impl(x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps):
    spec = _spec(reduce, feature, rms, act, preset, groups)
    y, h, mean, rstd = _core.forward(x, spec, weight, bias, eps, residual, residual is not None, True)
    return y, (h if h is not None else x.new_empty(0)), (mean if mean is not None else rstd.new_empty(0)), rstd


def _bwd_impl(dy, x, mean, rstd, weight, bias, reduce, feature, rms, act, preset, groups, need_dw, need_db, eps):
    spec = _spec(reduce, feature, rms, act, preset, groups)
    dx, dw, db = _core.backward(_dense_grad(dy), x, None if rms else mean, rstd, spec, weight, bias,
                                need_dweight=need_dw, need_dbias=need_db, eps=eps)
    e = x.new_empty(0)
    return dx, (dw if dw is not None else e), (db if db is not None else e)


def _kept(x, reduce, preset, groups):
    shape = list(x.shape)
    if preset == "groupnorm":
        shape = shape[:1] + [groups, shape[1] // groups] + shape[2:]
    return [e for i, e in enumerate(shape) if i not in reduce]


class _NormFunction(torch.autograd.Function):
    """forward(x, weight, bias, residual, *spec, eps) -> (y, h, mean, rstd), as the custom op."""

    @staticmethod
    def forward(ctx, x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps):
        out = _fwd_impl(x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps)
        _setup(ctx, (x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps), out)
        ctx.mark_non_differentiable(out[2], out[3])
        return out

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gh, gmean, grstd):
        return _backward(ctx, gy, gh, gmean, grstd)


def _setup(ctx, inputs, output):
    x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps = inputs
    _, h, mean, rstd = output
    ctx.save_for_backward(h if residual is not None else x, weight, bias, mean, rstd)
    ctx.spec = (reduce, feature, rms, act, preset, groups)
    ctx.eps = eps
    ctx.has_residual = residual is not None


def _backward(ctx, gy, gh, gmean, grstd):
    xs, w, b, mean, rstd = ctx.saved_tensors
    need = ctx.needs_input_grad
    if gy is None:  # only h = x + residual was used
        gy = torch.zeros_like(xs)
    need_dw, need_db = bool(w is not None and need[1]), bool(b is not None and need[2])
    dx, dw, db = _BWD(gy, xs, mean, rstd, w, b, *ctx.spec, need_dw, need_db, ctx.eps)
    if ctx.has_residual and gh is not None and gh.numel():
        dx = dx + gh  # h = x + residual is an output too: its gradient flows to both
    return (dx, dw if need_dw else None, db if need_db else None, dx if ctx.has_residual else None,
            None, None, None, None, None, None, None)


def _register_library():
    """torch >= 2.4: custom ops with fake implementations (torch.compile traces through them)."""

    @torch.library.custom_op("normjit::norm_fwd", mutates_args=())
    def norm_fwd(x: Tensor, weight: Optional[Tensor], bias: Optional[Tensor], residual: Optional[Tensor],
                 reduce: List[int], feature: List[int], rms: bool, act: int, preset: str, groups: int,
                 eps: float) -> Tuple[Tensor, Tensor, Tensor, Tensor]:
        return _fwd_impl(x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps)

    @norm_fwd.register_fake
    def _(x, weight, bias, residual, reduce, feature, rms, act, preset, groups, eps):
        y = torch.empty_like(x, memory_format=torch.preserve_format)
        h = torch.empty_like(x, memory_format=torch.preserve_format) if residual is not None else x.new_empty(0)
        kept = _kept(x, reduce, preset, groups)
        rstd = x.new_empty(kept, dtype=torch.float32)
        mean = x.new_empty(0, dtype=torch.float32) if rms else x.new_empty(kept, dtype=torch.float32)
        return y, h, mean, rstd

    @torch.library.custom_op("normjit::norm_bwd", mutates_args=())
    def norm_bwd(dy: Tensor, x: Tensor, mean: Tensor, rstd: Tensor, weight: Optional[Tensor],
                 bias: Optional[Tensor], reduce: List[int], feature: List[int], rms: bool, act: int, preset: str,
                 groups: int, need_dw: bool, need_db: bool, eps: float) -> Tuple[Tensor, Tensor, Tensor]:
        return _bwd_impl(dy, x, mean, rstd, weight, bias, reduce, feature, rms, act, preset, groups, need_dw,
                         need_db, eps)

    @norm_bwd.register_fake
    def _(dy, x, mean, rstd, weight, bias, reduce, feature, rms, act, preset, groups, need_dw, need_db, eps):
        dx = torch.empty_like(x, memory_format=torch.preserve_format)
        dw = torch.empty_like(weight) if need_dw else x.new_empty(0)
        db = torch.empty_like(bias) if need_db else x.new_empty(0)
        return dx, dw, db

    def backward(ctx, gy, gh, gmean, grstd):
        return _backward(ctx, gy, gh, gmean, grstd)

    norm_fwd.register_autograd(backward, setup_context=_setup)
    return norm_fwd, norm_bwd


def _want_library():
    if os.environ.get("NORMJIT_TORCH_OPS", "1") == "0" or not hasattr(torch.library, "custom_op"):
        return False
    major, minor = (int(p) for p in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 4)


TORCH_LIBRARY_ERROR = None  # why torch >= 2.4 fell back to the autograd Function (tests assert it is None)
USES_TORCH_LIBRARY = _want_library()
_FWD, _BWD = _NormFunction.apply, _bwd_impl
if USES_TORCH_LIBRARY:
    try:
        _FWD, _BWD = _register_library()
    except Exception as e:  # a torch whose custom-op API differs: stay usable, say why
        USES_TORCH_LIBRARY, TORCH_LIBRARY_ERROR = False, f"{type(e).__name__}: {e}"


def _compiling():
    c = getattr(torch, "compiler", None)
    return bool(c is not None and hasattr(c, "is_compiling") and c.is_compiling())


def _needs_graph(*ts):
    if _compiling():
        return True
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in ts)


def _run(x, spec, weight, bias, eps, residual, return_stats, return_residual):
    if return_residual and residual is None:
        raise _core.ArgumentError("NJ_ERR_BAD_FLAGS", "return_residual needs a residual")
    if eps is None or not eps >= 0:
        raise _core.ArgumentError("NJ_ERR_BAD_ARGUMENT", f"eps must be >= 0 (got {eps})")
    if not return_stats and not _needs_graph(x, weight, bias, residual):
        # inference (no_grad, or nothing requires grad, outside torch.compile): no statistics to save
        y, h, mean, rstd = _core.forward(x, spec, weight, bias, float(eps), residual, return_residual, False)
    else:
        y, h, mean, rstd = _FWD(x, weight, bias, residual, list(spec.reduce), list(spec.feature), spec.rms,
                                spec.act, spec.preset, spec.groups, float(eps))
    r = (y,) + ((h,) if return_residual else ())
    r += ((None if spec.rms else mean), rstd) if return_stats else ()
    return r if len(r) > 1 else y


# ---- functional API with autograd (same signatures as normjit.functional) ----

def norm(x, reduce_axes, feature_axes=None, weight=None, bias=None, eps=1e-5, *, rms=False, residual=None,
         activation=None, return_stats=False, return_residual=False):
    spec = _F._norm_spec(x, reduce_axes, feature_axes, rms, activation)
    return _run(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def layer_norm(x, axes=-1, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None,
               return_stats=False, return_residual=False):
    return _run(x, _F._ln_spec(x, axes, False, activation), weight, bias, eps, residual, return_stats,
                return_residual)


def rms_norm(x, axes=-1, weight=None, eps=None, *, bias=None, residual=None, activation=None,
             return_stats=False, return_residual=False):
    """eps=None is torch.finfo(x.dtype).eps, as torch.nn.RMSNorm."""
    eps = torch.finfo(x.dtype).eps if eps is None else eps
    return _run(x, _F._ln_spec(x, axes, True, activation), weight, bias, eps, residual, return_stats,
                return_residual)


def group_norm(x, groups, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None,
               return_stats=False, return_residual=False):
    return _run(x, _F._gn_spec(x, groups, activation), weight, bias, eps, residual, return_stats, return_residual)


def instance_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None, return_stats=False,
                  return_residual=False):
    return _run(x, _F._in_spec(x, activation), weight, bias, eps, residual, return_stats, return_residual)


def batch_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None, return_stats=False,
               return_residual=False):
    return _run(x, _F._bn_spec(x, activation), weight, bias, eps, residual, return_stats, return_residual)


# ---- modules ----

class LayerNorm(torch.nn.LayerNorm):
    """torch.nn.LayerNorm, plus axes=: the axes normalized (default: the last len(normalized_shape)), e.g.
    axes=1 normalizes the C of an NCHW tensor without permutes (ConvNeXt), weight/bias [C]."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True, device=None, dtype=None,
                 *, axes=None, activation=None):
        super().__init__(normalized_shape, eps, elementwise_affine, device=device, dtype=dtype)
        if elementwise_affine and not bias:
            self.register_parameter("bias", None)
        self.axes = tuple(range(-len(self.normalized_shape), 0)) if axes is None else \
            ((axes,) if isinstance(axes, int) else tuple(axes))
        if len(self.axes) != len(self.normalized_shape):
            raise ValueError(f"axes {self.axes} and normalized_shape {self.normalized_shape} differ in length")
        self.activation = activation

    def forward(self, x, residual=None):
        if tuple(x.shape[a] for a in self.axes) != tuple(self.normalized_shape):
            raise _core.ShapeError("NJ_ERR_SHAPE_MISMATCH", f"input {list(x.shape)} over axes {self.axes} does not "
                                   f"match normalized_shape {list(self.normalized_shape)}")
        return layer_norm(x, self.axes, self.weight, self.bias, self.eps, residual=residual,
                          activation=self.activation)

    def extra_repr(self):
        return super().extra_repr() + f", axes={self.axes}"


class RMSNorm(torch.nn.Module):
    """torch.nn.RMSNorm (torch >= 2.4) on any torch: weight of normalized_shape, eps=None meaning
    torch.finfo(x.dtype).eps; axes= as LayerNorm's."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None, dtype=None, *, axes=None):
        super().__init__()
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps, self.elementwise_affine = eps, elementwise_affine
        if elementwise_affine:
            self.weight = torch.nn.Parameter(torch.ones(self.normalized_shape, device=device, dtype=dtype))
        else:
            self.register_parameter("weight", None)
        self.axes = tuple(range(-len(self.normalized_shape), 0)) if axes is None else \
            ((axes,) if isinstance(axes, int) else tuple(axes))

    def reset_parameters(self):
        if self.weight is not None:
            torch.nn.init.ones_(self.weight)

    def forward(self, x, residual=None):
        return rms_norm(x, self.axes, self.weight, self.eps, residual=residual)

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"


class GroupNorm(torch.nn.GroupNorm):
    """torch.nn.GroupNorm on any memory layout (channels-last in, channels-last out); activation="silu"
    fuses the SiLU that follows it in diffusion UNets."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None, dtype=None, *,
                 activation=None):
        super().__init__(num_groups, num_channels, eps, affine, device=device, dtype=dtype)
        self.activation = activation

    def forward(self, x, residual=None):
        return group_norm(x, self.num_groups, self.weight, self.bias, self.eps, residual=residual,
                          activation=self.activation)


def _instance_forward(self, x, dims):
    unbatched = x.dim() == dims + 1
    if unbatched:
        x = x.unsqueeze(0)
    if x.dim() != dims + 2:
        raise _core.ArgumentError("NJ_ERR_BAD_RANK", f"{type(self).__name__} expects {dims + 1}-D or {dims + 2}-D "
                                  f"input, got {x.dim()}-D")
    if not self.training and self.track_running_stats:  # running statistics: a per-channel affine, torch's
        y = TF.instance_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0, self.eps)
    else:
        y, mean, rstd = instance_norm(x, self.weight, self.bias, self.eps, return_stats=True)
        if self.training and self.track_running_stats:
            n = x[0, 0].numel()
            _update_running(self, mean.mean(0), _var(rstd, self.eps, n).mean(0))
    return y.squeeze(0) if unbatched else y


def _var(rstd, eps, n):
    var = (1.0 / (rstd.double() * rstd.double()) - eps).clamp_min(0)  # the biased variance rstd came from
    return (var * n / max(n - 1, 1)).float()  # unbiased, as torch's running_var


def _update_running(self, mean, var):
    with torch.no_grad():
        factor = self.momentum
        if self.num_batches_tracked is not None:
            self.num_batches_tracked.add_(1)
            if self.momentum is None:
                factor = 1.0 / float(self.num_batches_tracked)
        self.running_mean.mul_(1 - factor).add_(mean.to(self.running_mean.dtype), alpha=factor)
        self.running_var.mul_(1 - factor).add_(var.to(self.running_var.dtype), alpha=factor)


class InstanceNorm1d(torch.nn.InstanceNorm1d):
    def forward(self, x):
        return _instance_forward(self, x, 1)


class InstanceNorm2d(torch.nn.InstanceNorm2d):
    def forward(self, x):
        return _instance_forward(self, x, 2)


class InstanceNorm3d(torch.nn.InstanceNorm3d):
    def forward(self, x):
        return _instance_forward(self, x, 3)


class BatchNorm2d(torch.nn.BatchNorm2d):
    """torch.nn.BatchNorm2d: training mode (or no running statistics) normalizes with batch statistics on
    normjit and updates running_mean/var as torch does; eval mode with running statistics is a per-channel
    affine, left to torch."""

    def forward(self, x):
        self._check_input_dim(x)
        if not self.training and self.track_running_stats:
            return TF.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias, False, 0.0,
                                 self.eps)
        y, mean, rstd = batch_norm(x, self.weight, self.bias, self.eps, return_stats=True)
        if self.training and self.track_running_stats:
            _update_running(self, mean, _var(rstd, self.eps, x.numel() // x.shape[1]))
        return y
