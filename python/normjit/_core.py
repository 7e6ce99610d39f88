"""Contexts, problem descriptors and launches: what every public function goes through.

One nj_context per (process, device), created on first use: the emulator backend for CPU arrays, the cuda
backend on the array's device for CUDA arrays. NORMJIT_* environment variables are read by the C library
(NORMJIT_CACHE_DIR: the cache is the one the C library and the `normjit` tool use).
"""
import ctypes
import threading

from . import _capi
from ._arrays import CPU, CUDA, DTYPE_NAMES, Allocator, consumer_stream, view
from ._errors import ArgumentError, DtypeError, ShapeError, error_for

_lib = _capi.load()
_contexts = {}
_contexts_lock = threading.Lock()


def library():
    """The loaded ctypes library (its `.path` says which file)."""
    return _lib


def check(status):
    if status != 0:
        name = _lib.nj_status_name(status).decode()
        detail = (_lib.nj_last_error() or b"").decode(errors="replace")
        raise error_for(name, detail or _lib.nj_status_string(status).decode())


def context(device):
    """The process's nj_context for device ("cpu", 0) or ("cuda", ordinal), created on first use."""
    ctx = _contexts.get(device)
    if ctx is not None:
        return ctx
    with _contexts_lock:
        ctx = _contexts.get(device)
        if ctx is None:
            o = _capi.ContextOptions()
            _lib.nj_context_options_init(ctypes.byref(o))
            o.backend = _capi.BACKEND_EMULATOR if device[0] == CPU else _capi.BACKEND_CUDA
            o.device = device[1]
            h = ctypes.c_void_p()
            check(_lib.nj_context_create(ctypes.byref(o), ctypes.byref(h)))
            ctx = _contexts[device] = h
    return ctx


class Spec:
    """A normalization as the package describes it: axes over the (possibly regrouped) logical shape."""
    __slots__ = ("reduce", "feature", "rms", "act", "preset", "groups", "split")

    def __init__(self, reduce, feature, rms=False, activation=None, preset="general", groups=0, split=None):
        self.reduce, self.feature, self.rms = tuple(reduce), tuple(feature), bool(rms)
        if activation not in _capi.ACT:
            raise ArgumentError("NJ_ERR_BAD_ACTIVATION", f"unknown activation {activation!r} "
                                f"(one of {sorted(k for k in _capi.ACT if k)})")
        self.act = _capi.ACT[activation]
        self.preset, self.groups, self.split = preset, groups, split

    def logical(self, v):
        """(extents, strides) of View v as the problem sees it (GroupNorm: C split into (G, C/G))."""
        if self.split is None:
            return v.shape, v.strides
        ax, g = self.split
        c, s = v.shape[ax], v.strides[ax]
        shape = v.shape[:ax] + (g, c // g) + v.shape[ax + 1:]
        strides = v.strides[:ax] + (s * (c // g), s) + v.strides[ax + 1:]
        return shape, strides


def _mask(axes):
    m = 0
    for a in axes:
        m |= 1 << a
    return m


def _same_device(ref, v, name):
    if v.device != ref.device:
        raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"{name} is on {v.device[0]}:{v.device[1]}, x on "
                            f"{ref.device[0]}:{ref.device[1]}: all operands must be on one device")


def _act_view(vx, a, name):
    """View of an activation operand (residual, dy): x's shape and dtype, x's device."""
    v = view(a, name)
    _same_device(vx, v, name)
    if v.shape != vx.shape:
        raise ShapeError("NJ_ERR_SHAPE_MISMATCH", f"{name} has shape {list(v.shape)}, x {list(vx.shape)}")
    if v.dtype != vx.dtype:
        raise DtypeError("NJ_ERR_BAD_DTYPE", f"{name} is {DTYPE_NAMES[v.dtype]}, x {DTYPE_NAMES[vx.dtype]}")
    return v


def _contiguous(a):
    """Parameters are read contiguous (the C layout of gamma): a strided one is copied, it is small."""
    if hasattr(a, "is_contiguous"):
        return a if a.is_contiguous() else a.contiguous()
    if type(a).__module__.split(".")[0] == "numpy":
        import numpy
        return numpy.ascontiguousarray(a)
    return a


def _param_views(vx, spec, lshape, weight, bias):
    nfeat = 1
    for a in spec.feature:
        nfeat *= lshape[a]
    out, dtype = [], None
    for a, name in ((weight, "weight"), (bias, "bias")):
        if a is None:
            out.append(None)
            continue
        v = view(_contiguous(a), name)
        _same_device(vx, v, name)
        if v.numel != nfeat:
            want = [lshape[i] for i in spec.feature]
            raise ShapeError("NJ_ERR_SHAPE_MISMATCH", f"{name} has {v.numel} elements ({list(v.shape)}), the "
                             f"normalized features {nfeat} ({want})")
        if v.dtype not in (_capi.F32, vx.dtype):
            raise DtypeError("NJ_ERR_BAD_DTYPE", f"{name} is {DTYPE_NAMES[v.dtype]}: parameters are float32 or "
                             f"x's dtype ({DTYPE_NAMES[vx.dtype]})")
        if dtype is not None and v.dtype != dtype:
            raise DtypeError("NJ_ERR_BAD_DTYPE", "weight and bias have different dtypes")
        dtype = v.dtype
        out.append(v)
    return out[0], out[1], dtype or _capi.F32


def _problem(spec, vx, flags, pdtype):
    p = _capi.ProblemDesc()
    p.struct_size = ctypes.sizeof(p)
    p.flags = flags | (0 if spec.rms else _capi.FLAG_CENTER)
    p.activation = spec.act
    p.param_dtype = pdtype
    p.reduce_axes = _mask(spec.reduce)
    p.feature_axes = _mask(spec.feature) if flags & (_capi.FLAG_SCALE | _capi.FLAG_BIAS) else 0
    affine = flags & (_capi.FLAG_SCALE | _capi.FLAG_BIAS)
    # the GroupNorm label names its G axis among the feature axes, which exist only with an affine
    p.preset = _capi.PRESET["general" if spec.preset == "groupnorm" and not affine else spec.preset]
    p.groups = spec.groups if affine else 0
    p.x = vx.desc(spec.logical(vx))
    return p


def _stream(v):
    if v.device[0] != CUDA:
        return None
    if v.framework == "torch":
        import torch
        return torch.cuda.current_stream(v.device[1]).cuda_stream or None
    s = consumer_stream(v.framework)  # other producers: the stream their array was exported for
    return None if s == 1 else s


def _plan(ctx, p, passes):
    plan = ctypes.c_void_p()
    check(_lib.nj_plan_get(ctx, ctypes.byref(p), passes, ctypes.byref(plan)))
    return plan


def _ptr(v):
    return v.ptr if v is not None else None


def kept_shape(spec, lshape):
    return tuple(e for i, e in enumerate(lshape) if i not in spec.reduce)


def _launch(fn, plan, pass_, a, alloc, vx):
    """Gives args `a` the pass's workspace (from the input's framework) and stream, then runs the pass."""
    ws = _lib.nj_plan_workspace_size(plan, pass_)
    keep = None
    if ws:
        keep, a.workspace = alloc.workspace(ws)
        a.workspace_size = ws
    a.stream = _stream(vx)
    check(fn(plan, ctypes.byref(a)))
    del keep  # the framework's allocator orders its reuse after the stream's work (torch)


def forward(x, spec, weight=None, bias=None, eps=1e-5, residual=None, want_residual=False, want_stats=False):
    """Runs the forward pass: returns (y, residual_out or None, mean or None, rstd or None)."""
    vx = view(x, "x")
    lshape, _ = spec.logical(vx)
    vw, vb, pdtype = _param_views(vx, spec, lshape, weight, bias)
    vr = _act_view(vx, residual, "residual") if residual is not None else None
    flags = (_capi.FLAG_SCALE if vw else 0) | (_capi.FLAG_BIAS if vb else 0)
    if vr is not None:
        flags |= _capi.FLAG_RESIDUAL | (_capi.FLAG_RESIDUAL_OUT if want_residual else 0)
    if want_stats:
        flags |= _capi.FLAG_SAVE_STATS
    alloc = Allocator(vx)
    y = alloc.like(vx)
    h = alloc.like(vx) if vr is not None and want_residual else None
    kshape = kept_shape(spec, lshape)
    mean = alloc.empty(kshape, _capi.F32) if want_stats and not spec.rms else None
    rstd = alloc.empty(kshape, _capi.F32) if want_stats else None
    if vx.numel > 0:
        vy, vh = view(y, "y"), (view(h, "residual_out") if h is not None else None)
        p = _problem(spec, vx, flags, pdtype)
        p.y = vy.desc(spec.logical(vy))
        if vr is not None:
            p.residual = vr.desc(spec.logical(vr))
        if vh is not None:
            p.residual_out = vh.desc(spec.logical(vh))
        ctx = context(vx.device)
        plan = _plan(ctx, p, _capi.PASS_FORWARD)
        a = _capi.ForwardArgs()
        a.struct_size = ctypes.sizeof(a)
        a.eps = eps
        a.x, a.residual, a.gamma, a.beta = vx.ptr, _ptr(vr), _ptr(vw), _ptr(vb)
        a.y, a.residual_out = vy.ptr, _ptr(vh)
        a.mean = view(mean).ptr if mean is not None else None
        a.rstd = view(rstd).ptr if rstd is not None else None
        _launch(_lib.nj_forward, plan, _capi.PASS_FORWARD, a, alloc, vx)
    f = alloc.finish
    return f(y), f(h), f(mean), f(rstd)


def backward(dy, x, mean, rstd, spec, weight=None, bias=None, need_dx=True, need_dweight=True, need_dbias=True,
             eps=None):
    """Gradients of forward(): (dx, dweight or None, dbias or None). x is the normalized (residual-summed)
    input; mean (None under RMS) and rstd are what forward saved; eps the forward's (sets of one or two
    elements need it for an exact dx; None: the general form there)."""
    vx = view(x, "x")
    vdy = _act_view(vx, dy, "dy")
    lshape, _ = spec.logical(vx)
    vw, vb, pdtype = _param_views(vx, spec, lshape, weight, bias)
    kshape = kept_shape(spec, lshape)
    stats = []
    for a, name in ((mean, "mean"), (rstd, "rstd")):
        if name == "mean" and spec.rms:  # RMS normalization subtracts no mean
            stats.append(None)
            continue
        if a is None:
            raise ArgumentError("NJ_ERR_NULL_POINTER", f"backward needs the forward's {name}")
        v = view(_contiguous(a), name)
        _same_device(vx, v, name)
        if v.dtype != _capi.F32 or v.numel != _prod(kshape):
            raise ShapeError("NJ_ERR_SHAPE_MISMATCH", f"{name} must be float32 of shape {list(kshape)}")
        stats.append(v)
    flags = (_capi.FLAG_SCALE if vw else 0) | (_capi.FLAG_BIAS if vb else 0)
    alloc = Allocator(vx)
    dx = alloc.like(vx)
    dw = alloc.empty(tuple(view(weight).shape), pdtype) if vw is not None and need_dweight else None
    db = alloc.empty(tuple(view(bias).shape), pdtype) if vb is not None and need_dbias else None
    if vx.numel > 0:
        vdx = view(dx, "dx")
        p = _problem(spec, vx, flags, pdtype)
        p.dy, p.dx = vdy.desc(spec.logical(vdy)), vdx.desc(spec.logical(vdx))
        plan = _plan(context(vx.device), p, _capi.PASS_BACKWARD)
        a = _capi.BackwardArgs()
        a.struct_size = ctypes.sizeof(a) if eps is not None else _capi.BackwardArgs.eps.offset  # revision 2
        if eps is not None:
            if not eps >= 0:
                raise ArgumentError("NJ_ERR_BAD_ARGUMENT", f"eps must be >= 0 (got {eps})")
            a.eps = float(eps)
        a.dy, a.x, a.gamma = vdy.ptr, vx.ptr, _ptr(vw)
        a.beta = _ptr(vb) if spec.act else None
        a.mean, a.rstd = _ptr(stats[0]), _ptr(stats[1])
        a.dx = vdx.ptr
        a.dgamma = view(dw).ptr if dw is not None else None
        a.dbeta = view(db).ptr if db is not None else None
        _launch(_lib.nj_backward, plan, _capi.PASS_BACKWARD, a, alloc, vx)
    elif dw is not None or db is not None:  # sums over nothing
        for t in (dw, db):
            if t is not None:
                t[...] = 0
    f = alloc.finish
    return f(dx), f(dw), f(db)


def _prod(s):
    n = 1
    for e in s:
        n *= e
    return n


def describe(x, spec, weight=None, bias=None, passes=_capi.PASS_FORWARD):
    """The plan text (`normjit plan`) of a problem, and its problem text."""
    vx = view(x, "x")
    lshape, _ = spec.logical(vx)
    vw, vb, pdtype = _param_views(vx, spec, lshape, weight, bias)
    p = _problem(spec, vx, (_capi.FLAG_SCALE if vw else 0) | (_capi.FLAG_BIAS if vb else 0), pdtype)
    p.y = vx.desc(spec.logical(vx))
    plan = _plan(context(vx.device), p, passes)
    n = ctypes.c_size_t()
    _lib.nj_plan_describe(plan, None, 0, ctypes.byref(n))
    buf = ctypes.create_string_buffer(n.value + 1)
    check(_lib.nj_plan_describe(plan, buf, len(buf), None))
    return buf.value.decode()


def context_info(device=("cpu", 0)):
    """The context of a device ("cpu" or ("cuda", n)): backend, arch, cache root and cache counters."""
    if isinstance(device, str):
        device = (CPU, 0) if device == "cpu" else (CUDA, int(device.partition(":")[2] or 0))
    ctx = context(device)
    st = _capi.CacheStats()
    st.struct_size = ctypes.sizeof(st)
    check(_lib.nj_context_cache_stats(ctx, ctypes.byref(st)))
    backend = {_capi.BACKEND_CUDA: "cuda", _capi.BACKEND_EMULATOR: "emulator"}.get(_lib.nj_context_backend(ctx))
    return {"backend": backend, "arch": _lib.nj_context_arch(ctx),
            "cache_dir": (_lib.nj_context_cache_dir(ctx) or b"").decode(),
            **{name: getattr(st, name) for name, _ in _capi.CacheStats._fields_ if name != "struct_size"}}
