"""The functional API: normalization layers on any DLPack array (NumPy, PyTorch, JAX, CuPy) or torch tensor.

Every forward function returns y, or with return_stats=True the tuple (y, mean, rstd) (mean is None under
RMS normalization); with residual= and return_residual=True the summed input x + residual comes second:
(y, h) or (y, h, mean, rstd). mean and rstd are float32, shaped as x without its normalized axes.
Each forward has a backward taking what it saved and returning (dx, dweight, dbias).
"""
from . import _core
from ._arrays import view
from ._errors import ArgumentError, ShapeError

__all__ = ["norm", "layer_norm", "rms_norm", "group_norm", "instance_norm", "batch_norm", "norm_backward",
           "layer_norm_backward", "rms_norm_backward", "group_norm_backward", "instance_norm_backward",
           "batch_norm_backward"]


def _rank(x):
    return len(x.shape) if hasattr(x, "shape") else len(view(x).shape)


def _axes(axes, rank, what):
    if isinstance(axes, int):
        axes = (axes,)
    out = []
    for a in axes:
        a = int(a)
        if not -rank <= a < rank:
            raise ArgumentError("NJ_ERR_BAD_AXIS", f"{what} axis {a} is out of range for a tensor of rank {rank}")
        a %= rank
        if a in out:
            raise ArgumentError("NJ_ERR_DUPLICATE_AXIS", f"{what} axis {a} is listed twice")
        out.append(a)
    if not out and what == "reduce":
        raise ArgumentError("NJ_ERR_EMPTY_REDUCTION", "no axis to normalize over")
    return tuple(sorted(out))


def _ret(out, return_stats, return_residual):
    y, h, mean, rstd = out
    r = (y,) + ((h,) if return_residual else ())
    r += (mean, rstd) if return_stats else ()
    return r if len(r) > 1 else y


def _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual):
    if return_residual and residual is None:
        raise ArgumentError("NJ_ERR_BAD_FLAGS", "return_residual needs a residual")
    if eps is None or not eps >= 0:
        raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"eps must be >= 0 (got {eps})")
    out = _core.forward(x, spec, weight, bias, float(eps), residual, return_residual, return_stats)
    return _ret(out, return_stats, return_residual)


def _spatial_check(x, what, min_rank=2):
    r = _rank(x)
    if r < min_rank:
        raise ArgumentError("NJ_ERR_BAD_RANK", f"{what} needs x of rank >= {min_rank} ([N, C, ...]), got {r}")
    return r


# ---- general ----

def _norm_spec(x, reduce_axes, feature_axes, rms, activation):
    r = _rank(x)
    red = _axes(reduce_axes, r, "reduce")
    feat = _axes(reduce_axes if feature_axes is None else feature_axes, r, "feature")
    return _core.Spec(red, feat, rms, activation)


def norm(x, reduce_axes, feature_axes=None, weight=None, bias=None, eps=1e-5, *, rms=False, residual=None,
         activation=None, return_stats=False, return_residual=False):
    """The general problem (Flax semantics): normalize over reduce_axes; weight/bias span feature_axes
    (default: the reduce axes), shaped as x restricted to them in axis order."""
    spec = _norm_spec(x, reduce_axes, feature_axes, rms, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def norm_backward(dy, x, mean, rstd, reduce_axes, feature_axes=None, weight=None, bias=None, *, rms=False,
                  activation=None, eps=None):
    spec = _norm_spec(x, reduce_axes, feature_axes, rms, activation)
    return _core.backward(dy, x, mean, rstd, spec, weight, bias, eps=eps)


# ---- LayerNorm, RMSNorm ----

def _ln_spec(x, axes, rms, activation):
    r = _rank(x)
    a = _axes(axes, r, "reduce")
    return _core.Spec(a, a, rms, activation, "rmsnorm" if rms else "layernorm")


def layer_norm(x, axes=-1, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None,
               return_stats=False, return_residual=False):
    """LayerNorm over `axes` (any list: (-1,) as PyTorch's last axis, 1 for the C of NCHW without a permute);
    weight/bias are shaped as x restricted to axes. residual: x + residual is normalized (pre-norm block)."""
    spec = _ln_spec(x, axes, False, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def layer_norm_backward(dy, x, mean, rstd, axes=-1, weight=None, bias=None, *, activation=None, eps=None):
    return _core.backward(dy, x, mean, rstd, _ln_spec(x, axes, False, activation), weight, bias, eps=eps)


def rms_norm(x, axes=-1, weight=None, eps=1e-6, *, bias=None, residual=None, activation=None,
             return_stats=False, return_residual=False):
    """RMSNorm over `axes`: y = x / sqrt(mean(x^2) + eps) * weight (mean is None in the stats)."""
    spec = _ln_spec(x, axes, True, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def rms_norm_backward(dy, x, rstd, axes=-1, weight=None, bias=None, *, activation=None, eps=None):
    return _core.backward(dy, x, None, rstd, _ln_spec(x, axes, True, activation), weight, bias, eps=eps)


# ---- GroupNorm, InstanceNorm, BatchNorm: x is [N, C, spatial...] (any memory layout) ----

def _gn_spec(x, groups, activation):
    r = _spatial_check(x, "group_norm")
    c = (x.shape if hasattr(x, "shape") else view(x).shape)[1]
    if not isinstance(groups, int) or groups <= 0 or c % groups:
        raise ShapeError("NJ_ERR_BAD_GROUPS", f"groups = {groups} does not divide the {c} channels")
    # C viewed as (G, C/G) through strides: reduce over C/G and spatial, affine over (G, C/G).
    red = (2,) + tuple(range(3, r + 1))
    return _core.Spec(red, (1, 2), False, activation, "groupnorm", groups, split=(1, groups))


def group_norm(x, groups, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None,
               return_stats=False, return_residual=False):
    """GroupNorm of x [N, C, spatial...] (NCHW or channels-last strides alike); weight/bias [C]; the saved
    mean/rstd are [N, groups]. activation="silu" fuses the UNet's GroupNorm + SiLU."""
    spec = _gn_spec(x, groups, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def group_norm_backward(dy, x, mean, rstd, groups, weight=None, bias=None, *, activation=None, eps=None):
    return _core.backward(dy, x, mean, rstd, _gn_spec(x, groups, activation), weight, bias, eps=eps)


def _in_spec(x, activation):
    r = _spatial_check(x, "instance_norm", 3)
    return _core.Spec(tuple(range(2, r)), (1,), False, activation, "instancenorm")


def instance_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None, return_stats=False,
                  return_residual=False):
    """InstanceNorm of x [N, C, spatial...]: statistics per (N, C); mean/rstd are [N, C]."""
    spec = _in_spec(x, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def instance_norm_backward(dy, x, mean, rstd, weight=None, bias=None, *, activation=None, eps=None):
    return _core.backward(dy, x, mean, rstd, _in_spec(x, activation), weight, bias, eps=eps)


def _bn_spec(x, activation):
    r = _spatial_check(x, "batch_norm")
    return _core.Spec((0,) + tuple(range(2, r)), (1,), False, activation, "batchnorm")


def batch_norm(x, weight=None, bias=None, eps=1e-5, *, residual=None, activation=None, return_stats=False,
               return_residual=False):
    """BatchNorm with batch statistics (training mode) of x [N, C, spatial...]; mean/rstd are [C]."""
    spec = _bn_spec(x, activation)
    return _fwd(x, spec, weight, bias, eps, residual, return_stats, return_residual)


def batch_norm_backward(dy, x, mean, rstd, weight=None, bias=None, *, activation=None, eps=None):
    return _core.backward(dy, x, mean, rstd, _bn_spec(x, activation), weight, bias, eps=eps)
