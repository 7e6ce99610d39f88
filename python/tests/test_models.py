"""A ConvNeXt block and a UNet ResNet block, trained a few steps with normjit's layers and with PyTorch's:
the same losses within tolerance."""

import pytest
import torch

import normjit.torch as njt


class ConvNeXtBlock(torch.nn.Module):
    """Depthwise 7x7 conv, LayerNorm over C (NCHW, no permutes with normjit), 1x1 MLP, residual."""

    def __init__(self, c, norm):
        super().__init__()
        self.dw = torch.nn.Conv2d(c, c, 7, padding=3, groups=c)
        self.norm = norm
        self.pw1, self.pw2 = torch.nn.Conv2d(c, 4 * c, 1), torch.nn.Conv2d(4 * c, c, 1)

    def forward(self, x):
        return x + self.pw2(torch.nn.functional.gelu(self.pw1(self.norm(self.dw(x)))))


class ChannelsLastLN(torch.nn.LayerNorm):
    """PyTorch's way: permute to channels-last, LayerNorm, permute back."""

    def forward(self, x):
        return super().forward(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)


class ResBlock(torch.nn.Module):
    """Diffusion UNet ResNet block: GroupNorm + SiLU, conv, GroupNorm + SiLU, conv, skip."""

    def __init__(self, c, gn1, gn2):
        super().__init__()
        self.gn1, self.gn2 = gn1, gn2
        self.c1, self.c2 = torch.nn.Conv2d(c, c, 3, padding=1), torch.nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x):
        return x + self.c2(self.gn2(self.c1(self.gn1(x))))


def _train(model, x, target, steps=4):
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), target)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def _compare(ref, ours, x, target):
    ours.load_state_dict(ref.state_dict())
    a, b = _train(ref, x, target), _train(ours, x, target)
    assert a[-1] < a[0], "the reference did not train"
    for s, (la, lb) in enumerate(zip(a, b)):
        assert abs(la - lb) <= 1e-4 * abs(la) + 1e-6, f"step {s}: torch {la} vs normjit {lb}"


def test_convnext_block(device):
    torch.manual_seed(0)
    ref = ConvNeXtBlock(16, ChannelsLastLN(16, eps=1e-6)).to(device)
    ours = ConvNeXtBlock(16, njt.LayerNorm(16, eps=1e-6, axes=1)).to(device)
    x = torch.randn(2, 16, 8, 8, device=device)
    _compare(ref, ours, x, torch.randn_like(x))


@pytest.mark.parametrize("channels_last", [True])
def test_unet_resblock(device, channels_last):
    torch.manual_seed(1)

    def gn():
        return torch.nn.Sequential(torch.nn.GroupNorm(4, 16), torch.nn.SiLU())

    ref = ResBlock(16, gn(), gn()).to(device)
    ours = ResBlock(16, torch.nn.Sequential(njt.GroupNorm(4, 16, activation="silu")),
                    torch.nn.Sequential(njt.GroupNorm(4, 16, activation="silu"))).to(device)
    x = torch.randn(2, 16, 8, 8, device=device)
    if channels_last:
        ref, ours = ref.to(memory_format=torch.channels_last), ours.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    _compare(ref, ours, x, torch.randn_like(x))
    assert ours(x).is_contiguous(memory_format=torch.channels_last)
