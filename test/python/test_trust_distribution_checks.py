"""torch.distributions in a compiled module: its argument and sample validation
(`if not torch._is_all_true(valid): raise ValueError`) is a check after the graph
(capture/asserts.py), so the validity bools are graph values; `aten._is_all_true` /
`_is_any_true` compile as all / any of the bool tensor (frontend.decomposition_table) instead
of running through torch, an eager island per constraint.  Compared with eager for every
call, also one whose scale is invalid (eager's ValueError)."""
import warnings

import torch
import torch.nn as nn

import mlircap


class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(4, 4)
        self.register_buffer("std", torch.full((4,), 0.5))

    def forward(self, x, a):
        # (validate_args explicit: torch.compile / Dynamo, run earlier in the same process,
        # turns the default off process-wide)
        d = torch.distributions.Normal(self.mu(x), self.std, validate_args=True)
        return d.log_prob(a).sum(-1), d.entropy().sum()


def test_distribution_validation_compiles_without_islands(fallback_log):
    torch.manual_seed(0)
    m = Policy()
    fast = mlircap.compile(m)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no 'runs through torch' warning
        for i in range(3):
            x, a = torch.randn(3, 4), torch.randn(3, 4)
            for g, w in zip(fast(x, a), m(x, a)):
                torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-5)
    err = fallback_log.readouterr().err
    assert "eager islands" not in err, err
    cap = fast._compiled._mlircap_capture
    assert cap.stats.records == 1 and cap.stats.replays >= 2 and len(cap.variants[0].graphs) == 1
    assert all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
    m.std.fill_(-1.0)   # an invalid scale: eager's error
    errs = []
    for f in (m, fast):
        try:
            f(torch.randn(3, 4), torch.randn(3, 4))
        except ValueError as e:
            errs.append(str(e).split(" of distribution")[0])
    assert len(errs) == 2 and errs[0] == errs[1], errs


def test_is_all_true_and_is_any_true_compile(fallback_log):
    def f(x):
        return torch._is_all_true(x > 0), torch._is_any_true(x > 2), x * 2
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for x in (torch.rand(5), torch.randn(5) * 3, torch.rand(5) + 3):
            for g, w in zip(fast(x), f(x)):
                assert torch.equal(g, w)
    assert "eager islands" not in fallback_log.readouterr().err
