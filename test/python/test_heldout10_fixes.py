"""Fixes found by bench/heldout10.py (programs from other domains: diffusion, flows, metric learning, MCMC,
quantization, binarized networks, ...), each a tiny program compared with eager after every call."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import mlircap


def _tensor_attribute_program(how):
    """BinaryNet.pytorch's BinarizeLinear / training loop: the real-valued parameter kept as a Python
    attribute of the parameter itself (`p.org`), stored anew by every forward, restored into p.data before
    the step and clipped back into .org after it."""
    torch.manual_seed(0)
    lin = nn.Linear(4, 3)
    opt = torch.optim.SGD(lin.parameters(), lr=0.5)

    def step(x):
        if how == "setattr":
            setattr(lin.bias, "org", lin.bias.data.clone())
        else:
            lin.bias.org = lin.bias.data.clone()
        if not hasattr(lin.weight, "org"):
            lin.weight.org = lin.weight.data.clone()
        lin.weight.data = lin.weight.org.sign()
        out = F.linear(x, lin.weight) + lin.bias
        loss = out.pow(2).sum()
        if how == "break":
            loss.item()
        opt.zero_grad()
        loss.backward()
        for p in lin.parameters():
            p.data.copy_(p.org)
        opt.step()
        for p in lin.parameters():
            p.org.copy_(p.data.clamp_(-1, 1))
        return loss.detach()
    return step, lin


@pytest.mark.parametrize("how", ["store", "setattr", "break"])
def test_python_attribute_stored_on_parameter_is_replayed(tmp_path, monkeypatch, how):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fe, le = _tensor_attribute_program(how)
    fc, lc = _tensor_attribute_program(how)
    fast = mlircap.compile(fc)
    for _ in range(4):
        x = torch.randn(2, 4)
        assert torch.allclose(fe(x), fast(x), rtol=1e-5, atol=1e-6)
        for pe, pc in zip(le.parameters(), lc.parameters()):
            assert torch.allclose(pe, pc, rtol=1e-5, atol=1e-6)
            assert torch.allclose(pe.org, pc.org, rtol=1e-5, atol=1e-6)
        assert lc.bias.org is not lc.bias and lc.bias.org.data_ptr() != lc.bias.data_ptr()


def test_python_attribute_stored_on_argument_tensor(tmp_path, monkeypatch):
    """a tag and a derived tensor stored on an argument: each call's own, as eager's."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))

    def fn(x):
        x.scale = x.abs().amax()
        x.tag = "seen"
        return x / x.scale

    fast = mlircap.compile(fn)
    for n in range(3):
        xe, xc = torch.randn(5) * (n + 1), None
        xc = xe.clone()
        assert torch.allclose(fn(xe), fast(xc))
        assert torch.equal(xe.scale, xc.scale) and xc.tag == "seen"


class _ClipIntoCopy(torch.nn.Module):
    """the graph capture cut out of BinaryNet's step after a break: the clipped weights copied into their
    .org tensor, the copy_'s result (the written input itself) returned, beside a differentiated value."""

    def forward(self, p, org, x):
        r = org.copy_(p.data.clamp_(-1, 1))
        return r, (x * p).sum()


def test_returned_written_input_graph_compiles(tmp_path, monkeypatch):
    """aot_autograd keeps the write as a trailing copy_ whose input the output also returns: it is now
    hoisted (the output returns the new value), where before the copy_ stayed in the graph, torch-mlir
    rejected it ('torch.aten.copy_' op operand #0 must be ... Tensor type) and the graph ran eagerly."""
    import torch.fx
    import warnings
    from mlircap.backend import mlircap_backend

    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    gm = torch.fx.symbolic_trace(_ClipIntoCopy())
    w0 = torch.tensor([0.5, -2.0, 3.0, 0.1])
    p, org, x = torch.nn.Parameter(w0.clone()), torch.zeros(4), torch.randn(4, requires_grad=True)
    pe, oe, xe = torch.nn.Parameter(w0.clone()), torch.zeros(4), x.detach().clone().requires_grad_()
    want = _ClipIntoCopy()(pe, oe, xe)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn = mlircap_backend(gm, [p, org, x])
        got = fn(p, org, x)
    assert not [str(w.message) for w in caught if "eagerly" in str(w.message)]   # 'running graph1 eagerly'
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    torch.testing.assert_close(org, oe)
    torch.testing.assert_close(p.detach(), pe.detach())
    got[1].backward()
    want[1].backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(p.grad, pe.grad)


class _StepAndZeroGrad(torch.nn.Module):
    """locuslab/fast_adversarial's PGD step as capture cuts it: delta.grad read twice (two inputs, the
    same tensor), delta's data written through .data, the gradient zeroed, a differentiated loss."""

    def forward(self, g0, d, g1, w, x):
        step = g0.detach().sign() * 0.1
        d.data.narrow(0, 1, 3).copy_((d[1:] + step[1:]).clamp(-0.2, 0.2))
        g1.zero_()
        return (((x + d) * w).sum(),)


def _pgd_inputs(same):
    torch.manual_seed(0)
    d = torch.zeros(4, requires_grad=True)
    d.grad = torch.randn(4)
    return [d.grad, d, d.grad if same else d.grad.clone(), torch.randn(4, requires_grad=True), torch.randn(4)]


def test_repeated_input_with_in_graph_write_compiles(tmp_path, monkeypatch):
    """aot_autograd's own deduplication raised IndexError (remove_dupe_metadata) for a graph that takes
    one tensor twice and writes an input inside the graph: the graph ran uncompiled (bench/heldout10.py
    pgd_adv_train). The backend now passes a repeated input once; a call passing two different tensors
    there runs the graph as it is."""
    import torch.fx
    from mlircap.backend import mlircap_backend

    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    gm = torch.fx.symbolic_trace(_StepAndZeroGrad())
    fn = mlircap_backend(gm, _pgd_inputs(True))
    for same in (True, False, True):
        got_in, want_in = _pgd_inputs(same), _pgd_inputs(same)
        got, want = fn(*got_in)[0], _StepAndZeroGrad()(*want_in)[0]
        torch.testing.assert_close(got, want)
        got.backward()
        want.backward()
        for a, b in zip(got_in, want_in):
            torch.testing.assert_close(a.detach(), b.detach())
        torch.testing.assert_close(got_in[3].grad, want_in[3].grad)
        torch.testing.assert_close(got_in[1].grad, want_in[1].grad)
