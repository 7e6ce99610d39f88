"""float64 NumPy reference of the general problem (docs/design.md, Semantics), forward and backward."""
import math

import numpy as np

_erf = np.vectorize(math.erf)


def _act(name, z):
    if name is None:
        return z, np.ones_like(z)
    if name == "relu":
        return np.maximum(z, 0), (z > 0).astype(z.dtype)
    s = 1 / (1 + np.exp(-z))
    if name == "sigmoid":
        return s, s * (1 - s)
    if name == "silu":
        return z * s, s * (1 + z * (1 - s))
    if name == "gelu":
        cdf = 0.5 * (1 + _erf(z / math.sqrt(2)))
        return z * cdf, cdf + z * np.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    if name == "gelu_tanh":
        k = math.sqrt(2 / math.pi)
        u = k * (z + 0.044715 * z ** 3)
        t = np.tanh(u)
        return 0.5 * z * (1 + t), 0.5 * (1 + t) + 0.5 * z * (1 - t * t) * k * (1 + 3 * 0.044715 * z * z)
    raise ValueError(name)


def _param(p, shape, feature):
    """A parameter over `feature` axes broadcast against x of `shape`."""
    if p is None:
        return None
    full = [shape[i] if i in feature else 1 for i in range(len(shape))]
    return np.asarray(p, dtype=np.float64).reshape(full)


def forward(x, reduce, feature, w=None, b=None, eps=1e-5, rms=False, act=None, residual=None):
    """-> y, mean (kept shape; zeros under RMS), rstd (kept shape), h = x + residual."""
    x = np.asarray(x, np.float64)
    if residual is not None:
        x = x + np.asarray(residual, np.float64)
    red = tuple(reduce)
    mean = np.zeros_like(x.mean(axis=red, keepdims=True)) if rms else x.mean(axis=red, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=red, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    z = (x - mean) * rstd
    if w is not None:
        z = z * _param(w, x.shape, feature)
    if b is not None:
        z = z + _param(b, x.shape, feature)
    y, _ = _act(act, z)
    return y, mean.squeeze(red), rstd.squeeze(red), x


def backward(dy, x, reduce, feature, w=None, b=None, eps=1e-5, rms=False, act=None):
    """Gradients (dx, dw, db) of forward() at the summed input x."""
    x, dy = np.asarray(x, np.float64), np.asarray(dy, np.float64)
    red = tuple(reduce)
    n = np.prod([x.shape[i] for i in red])
    mean = np.zeros_like(x.mean(axis=red, keepdims=True)) if rms else x.mean(axis=red, keepdims=True)
    rstd = 1 / np.sqrt(((x - mean) ** 2).mean(axis=red, keepdims=True) + eps)
    xhat = (x - mean) * rstd
    wf = _param(w, x.shape, feature) if w is not None else 1.0
    z = xhat * wf + (_param(b, x.shape, feature) if b is not None else 0.0)
    g = dy * _act(act, z)[1]
    gx = g * wf
    dx = gx - xhat * (gx * xhat).sum(axis=red, keepdims=True) / n
    if not rms:
        dx -= gx.sum(axis=red, keepdims=True) / n
    dx *= rstd
    nonf = tuple(i for i in range(x.ndim) if i not in feature)
    dw = (g * xhat).sum(axis=nonf) if w is not None else None
    db = g.sum(axis=nonf) if b is not None else None
    return dx, dw, db
