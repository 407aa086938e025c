"""A compiled function returning several outputs that require grad, the loss built from some
of them: an input (a parameter) reaching only the outputs the backward passes no gradient for
keeps .grad None, as in eager (backend._unreached_gradients_as_none). aot_autograd's
CompiledFunction materialized the missing output gradients as zeros, so such parameters got a
zero .grad, and an optimizer with momentum or weight decay then moved them where eager's skips
them (bench/fuzz_graphs.py --grad seed 26)."""
import copy

import torch
import torch.nn as nn

import mlircap


def _grads(params):
    return [None if p.grad is None else p.grad.clone() for p in params]


def test_input_reaching_only_an_unused_output_gets_no_gradient():
    def f(x0, x1):
        return x0.sin().sum(), x0 * x1

    fast = mlircap.compile(f)
    for _ in range(3):
        a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        fast(a, b)[0].backward()
        assert b.grad is None
        torch.testing.assert_close(a.grad, a.detach().cos())
        a2, b2 = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
        out = fast(a2, b2)
        (out[0] + out[1].sum()).backward()     # both outputs used: both gradients, as eager's
        torch.testing.assert_close(a2.grad, a2.detach().cos() + b2.detach())
        torch.testing.assert_close(b2.grad, a2.detach())


class TwoHeads(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(6, 8)
        self.cls = nn.Linear(8, 3)
        self.proj = nn.Linear(8, 4)     # an auxiliary head the loss does not use

    def forward(self, x):
        h = torch.relu(self.body(x))
        return self.cls(h), self.proj(h)


def test_auxiliary_head_parameters_stay_without_gradient_through_adamw_steps():
    torch.manual_seed(0)
    ref = TwoHeads()
    mine = copy.deepcopy(ref)
    fast = mlircap.compile(mine)
    opt_e = torch.optim.AdamW(ref.parameters(), lr=0.1, weight_decay=0.1)
    opt_m = torch.optim.AdamW(mine.parameters(), lr=0.1, weight_decay=0.1)
    for i in range(4):
        x, y = torch.randn(5, 6), torch.randint(0, 3, (5,))
        for f, opt in ((ref, opt_e), (fast, opt_m)):
            opt.zero_grad(set_to_none=True)
            logits, _ = f(x)
            nn.functional.cross_entropy(logits, y).backward()
        ge, gm = _grads(ref.parameters()), _grads(mine.parameters())
        assert [g is None for g in gm] == [g is None for g in ge], f"call {i}"
        for a, b in zip(gm, ge):
            if b is not None:
                torch.testing.assert_close(a, b)
        opt_e.step()
        opt_m.step()
        for (n, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q, p, msg=f"call {i} {n}")


class _CountedReach(frozenset):
    """An input's reach whose iterations are counted (the per-backward cost of the check)."""
    walks = [0]

    def __iter__(self):
        _CountedReach.walks[0] += 1
        return super().__iter__()


def test_missing_gradient_check_walks_the_reach_once_per_pattern(monkeypatch):
    # the backward hook derived the inputs to leave None from every input's reach on each
    # call (~40 us a backward for a GRU seq2seq or CTC model's forward); now once for each
    # pattern of missing output gradients, then looked up
    from mlircap import backend

    real = backend._output_reach
    monkeypatch.setattr(backend, "_output_reach",
                        lambda gm: None if (r := real(gm)) is None else [_CountedReach(x) for x in r])

    def f(x0, x1):
        return x0.sin().sum(), x0 * x1

    fast = mlircap.compile(f)
    walks = []
    for i in range(5):
        a, b = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
        fast(a, b)[0].backward()
        assert b.grad is None
        torch.testing.assert_close(a.grad, a.detach().cos())
        walks.append(_CountedReach.walks[0])
    assert walks[-1] == walks[1] > 0, walks   # the later backwards walked nothing
