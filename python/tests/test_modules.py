"""normjit.torch modules as drop-ins: same outputs and gradients as PyTorch's modules, state_dict keys
and checkpoints interchangeable, memory format kept."""
import pytest
import torch

import normjit.torch as njt
from cases import close, f64


def _pair(nj_mod, torch_mod, x, atol=2e-5, check_buffers=()):
    """Runs both modules on copies of x (same parameters), compares outputs, gradients and buffers."""
    torch_mod.load_state_dict(nj_mod.state_dict())
    xa, xb = x.detach().clone().requires_grad_(), x.detach().clone().requires_grad_()
    ya, yb = nj_mod(xa), torch_mod(xb)
    g = torch.randn(ya.shape, generator=torch.Generator().manual_seed(9)).to(ya)
    ya.backward(g)
    yb.backward(g)
    close(ya, f64(yb), atol, "output")
    close(xa.grad, f64(xb.grad), 4 * atol, "input gradient")
    for (n, pa), (_, pb) in zip(nj_mod.named_parameters(), torch_mod.named_parameters()):
        close(pa.grad, f64(pb.grad), 4 * atol, f"{n} gradient")
    for n in check_buffers:
        close(getattr(nj_mod, n), f64(getattr(torch_mod, n)), 1e-5, n)
    return ya


def _randomize(m):
    with torch.no_grad():
        for p in m.parameters():
            p.copy_(torch.rand(p.shape, generator=torch.Generator().manual_seed(p.numel())) + 0.5)
    return m


def test_layernorm(device):
    m = _randomize(njt.LayerNorm(24).to(device))
    assert isinstance(m, torch.nn.LayerNorm)
    _pair(m, torch.nn.LayerNorm(24).to(device), torch.randn(3, 5, 24, device=device))


def test_layernorm_axes_channels(device):
    """ConvNeXt's LayerNorm over C of NCHW, without permutes: as torch's over the permuted tensor."""
    m = _randomize(njt.LayerNorm(16, axes=1).to(device))
    ref = torch.nn.LayerNorm(16).to(device)

    class Permuted(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = ref

        def forward(self, x):
            return self.ln(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)

    wrapper = Permuted()
    ref.load_state_dict(m.state_dict())
    x = torch.randn(2, 16, 4, 5, device=device)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    ya, yb = m(xa), wrapper(xb)
    ya.sum().backward()
    yb.sum().backward()
    close(ya, f64(yb), 2e-5, "output")
    close(xa.grad, f64(xb.grad), 1e-4, "input gradient")
    close(m.weight.grad, f64(ref.weight.grad), 1e-4, "weight gradient")


def test_rmsnorm(device):
    m = _randomize(njt.RMSNorm(24, eps=1e-6).to(device))
    x = torch.randn(4, 24, device=device, requires_grad=True)
    y = m(x)
    ref = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * m.weight
    close(y, f64(ref), 2e-5, "output")
    if hasattr(torch.nn, "RMSNorm"):
        t = torch.nn.RMSNorm(24, eps=1e-6).to(device)
        t.load_state_dict(m.state_dict())
        _pair(m, t, x)
    assert list(m.state_dict()) == ["weight"]


@pytest.mark.parametrize("channels_last", [False, True])
def test_groupnorm(device, channels_last):
    m = _randomize(njt.GroupNorm(4, 16).to(device))
    x = torch.randn(2, 16, 6, 5, device=device)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    y = _pair(m, torch.nn.GroupNorm(4, 16).to(device), x)
    assert y.is_contiguous(memory_format=torch.channels_last if channels_last else torch.contiguous_format)


def test_groupnorm_silu(device):
    m = _randomize(njt.GroupNorm(4, 16, activation="silu").to(device))
    seq = torch.nn.Sequential(torch.nn.GroupNorm(4, 16), torch.nn.SiLU()).to(device)
    seq[0].load_state_dict(m.state_dict())
    x = torch.randn(2, 16, 6, 5, device=device).contiguous(memory_format=torch.channels_last)
    close(m(x), f64(seq(x)), 2e-5, "output")


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_instancenorm(device, dims):
    cls = {1: (njt.InstanceNorm1d, torch.nn.InstanceNorm1d), 2: (njt.InstanceNorm2d, torch.nn.InstanceNorm2d),
           3: (njt.InstanceNorm3d, torch.nn.InstanceNorm3d)}[dims]
    shape = (2, 6) + (5, 4, 3)[:dims]
    m = _randomize(cls[0](6, affine=True, track_running_stats=True).to(device))
    t = cls[1](6, affine=True, track_running_stats=True).to(device)
    _pair(m, t, torch.randn(shape, device=device), check_buffers=("running_mean", "running_var"))
    m.eval(), t.eval()
    x = torch.randn(shape, device=device)
    close(m(x), f64(t(x)), 2e-5, "eval output")
    unbatched = njt.InstanceNorm1d(6).to(device)
    close(unbatched(torch.ones(6, 7, device=device)), f64(torch.zeros(6, 7)), 1e-6, "unbatched")


def test_batchnorm2d(device):
    m = _randomize(njt.BatchNorm2d(8).to(device))
    t = torch.nn.BatchNorm2d(8).to(device)
    x = torch.randn(4, 8, 5, 3, device=device).contiguous(memory_format=torch.channels_last)
    _pair(m, t, x, check_buffers=("running_mean", "running_var", "num_batches_tracked"))
    _pair(m, t, x * 2 + 1, check_buffers=("running_mean", "running_var", "num_batches_tracked"))
    m.eval(), t.eval()
    close(m(x), f64(t(x)), 2e-5, "eval output")


def test_state_dict_round_trip(device):
    """A checkpoint of PyTorch's modules loads into normjit's and back, keys and values unchanged."""
    pairs = [(torch.nn.LayerNorm(8), njt.LayerNorm(8)), (torch.nn.GroupNorm(2, 8), njt.GroupNorm(2, 8)),
             (torch.nn.BatchNorm2d(8), njt.BatchNorm2d(8)),
             (torch.nn.InstanceNorm2d(8, affine=True, track_running_stats=True),
              njt.InstanceNorm2d(8, affine=True, track_running_stats=True))]
    for t, n in pairs:
        _randomize(t)
        sd = t.state_dict()
        n.load_state_dict(sd)
        assert list(n.state_dict()) == list(sd)
        back = type(t)(*_args(t))
        back.load_state_dict(n.state_dict())
        for k, v in back.state_dict().items():
            assert torch.equal(v, sd[k]), k


def _args(t):
    if isinstance(t, torch.nn.LayerNorm):
        return (t.normalized_shape,)
    if isinstance(t, torch.nn.GroupNorm):
        return (t.num_groups, t.num_channels)
    if isinstance(t, torch.nn.InstanceNorm2d):
        return (t.num_features, t.eps, t.momentum, t.affine, t.track_running_stats)
    return (t.num_features,)


def test_half_module(device):
    m = njt.GroupNorm(4, 16).to(device, torch.bfloat16)
    t = torch.nn.GroupNorm(4, 16).to(device)
    t.load_state_dict({k: v.float() for k, v in m.state_dict().items()})
    x = torch.randn(2, 16, 4, 4, device=device)
    close(m(x.bfloat16()), f64(t(x.bfloat16().float())), 2e-2, "bf16 output")
