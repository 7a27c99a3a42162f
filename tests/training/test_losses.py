"""The seed-000 losses on hand-computed tensors."""

from __future__ import annotations

import math

import pytest
import torch

from samelang.training.losses import InfoNCELoss, JSDLoss, js_divergence


def test_jsd_hand_computed():
    # softmax([0, ln 3]) = [1/4, 3/4]; softmax([ln 3, 0]) = [3/4, 1/4]; M = [1/2, 1/2]
    zp = torch.tensor([[0.0, math.log(3)]])
    zq = torch.tensor([[math.log(3), 0.0]])
    kl = 0.25 * math.log(0.25 / 0.5) + 0.75 * math.log(0.75 / 0.5)
    assert js_divergence(zp, zq).item() == pytest.approx(kl, abs=1e-6)  # both KL terms are equal here
    eps = 1e-8
    assert JSDLoss(eps)(zp, zq).item() == pytest.approx(math.sqrt(kl + eps) + eps, abs=1e-6)


def test_jsd_properties():
    torch.manual_seed(0)
    a, b, c = torch.randn(3, 64, 384) * 3
    assert js_divergence(a, a).abs().max().item() < 1e-6  # identity
    assert JSDLoss()(a, a).item() < 1e-3
    torch.testing.assert_close(js_divergence(a, b), js_divergence(b, a))  # symmetry
    assert (js_divergence(a, b) <= math.log(2) + 1e-6).all()
    d_ab, d_bc, d_ac = (js_divergence(x, y).sqrt() for x, y in ((a, b), (b, c), (a, c)))
    assert (d_ac <= d_ab + d_bc + 1e-6).all()  # sqrt(JSD) obeys the triangle inequality
    # shift invariance: softmax ignores a constant added to every dimension
    torch.testing.assert_close(js_divergence(a + 5.0, b), js_divergence(a, b), atol=1e-5, rtol=1e-4)


def test_jsd_gradient_is_finite_at_identity():
    z = torch.randn(2, 8, requires_grad=True)
    JSDLoss()(z, z.detach()).backward()
    assert torch.isfinite(z.grad).all()


def test_info_nce_hand_computed():
    # anchors and candidates: unit vectors; cos(a0,c0)=1, cos(a0,c1)=0, cos(a1,c0)=0, cos(a1,c1)=1
    a = torch.tensor([[1.0, 0.0], [0.0, 2.0]])
    c = torch.tensor([[3.0, 0.0], [0.0, 1.0]])
    tau = 0.5
    want = -math.log(math.exp(1 / tau) / (math.exp(1 / tau) + math.exp(0)))
    assert InfoNCELoss(tau)(a, c).item() == pytest.approx(want, abs=1e-6)
    # swapping the candidates makes the positives orthogonal: the loss grows
    assert InfoNCELoss(tau)(a, c.flip(0)).item() > want
    with pytest.raises(ValueError):
        InfoNCELoss(0)
