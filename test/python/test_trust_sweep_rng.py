"""OpInfo sweep (bench/opinfo.py, issue 10), seed 17 on 2026-12-03: fallbacks turned into
compiled code: torch.testing's reseeding helpers (OpInfo's random ops and attention are
wrapped in wrapper_set_seed). Each case compares compiled calls with eager and checks that
the first call's recording is replayed by the next ones with every graph compiled."""
import os
import re
import types

import pytest
import torch
import torch.nn.functional as F
from torch.testing._utils import freeze_rng_state, wrapper_set_seed

import mlircap


def _islands(err: str) -> list[str]:
    found = []
    for m in re.finditer(r"eager islands: ([^\n]*)", err):
        found += [i.strip() for i in m.group(1).split(", ") if i.strip()]
    return found


def _replayed(fast):
    cap = fast._compiled._mlircap_capture
    assert cap.stats.records == 1 and cap.stats.replays >= 1, cap.stats
    assert not any(getattr(v, "eager", False) for v in cap.variants), [v.reason for v in cap.variants]
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs), \
        [g.fallback_reason for g in fast.graphs]


# ----------------------------------------------------------------- reseeding library helpers
def _in_torch(fn):
    """fn as if defined in torch's own (untraced) library code, as OpInfo's lambdas are
    (`op=lambda inp, *a, **k: wrapper_set_seed(torch.Tensor.uniform_, inp, *a, **k)`)."""
    code = fn.__code__.replace(co_filename=os.path.join(os.path.dirname(torch.__file__), "testing",
                                                        "_mlircap_test_lambdas.py"))
    return types.FunctionType(code, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)


_mha_op = _in_torch(lambda *a, **k: wrapper_set_seed(F.multi_head_attention_forward, *a, **k))
_linear_op = _in_torch(lambda *a, **k: wrapper_set_seed(F.linear, *a, **k))
_dropout_op = _in_torch(lambda x, **k: wrapper_set_seed(F.dropout, x, **k))


def _mha_args(seed=0):
    g = torch.Generator().manual_seed(seed)
    e, n = 4, 2
    q = torch.randn(3, e, generator=g)
    k = torch.randn(5, e, generator=g)
    v = torch.randn(5, e, generator=g)
    return [q, k, v, torch.randn(3 * e, e, generator=g), torch.randn(3 * e, generator=g),
            torch.randn(e, e, generator=g), torch.randn(e, generator=g)], n, e


@pytest.mark.parametrize("case", ["linear", "mha"])
def test_op_inside_wrapper_set_seed_compiles(fallback_log, case):
    # torch.testing's wrapper_set_seed (freeze_rng_state, manual_seed(42), the op) used to
    # write the RNG state in untraced code: the whole call ran eagerly ("no graph captured").
    # It is traced now: the reseeding is replayed between graphs, the op compiled.
    if case == "linear":
        def fn(x, w, b):
            return _linear_op(x, w, b)
        g = torch.Generator().manual_seed(1)
        args = [torch.randn(3, 5, generator=g), torch.randn(4, 5, generator=g), torch.randn(4, generator=g)]
    else:
        ts, n, e = _mha_args()

        def fn(q, k, v, w_in, b_in, w_out, b_out):
            return _mha_op(q, k, v, e, n, w_in, b_in, None, None, False, 0.0, w_out, b_out,
                           training=False, need_weights=True)
        args = ts
    fast = mlircap.compile(fn)
    for seed in range(3):
        torch.manual_seed(seed)
        want = fn(*[a.clone() for a in args])
        want_state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = fast(*[a.clone() for a in args])
        assert torch.equal(torch.get_rng_state(), want_state)
        torch.testing.assert_close(got, want, equal_nan=True)
    err = fallback_log.readouterr().err
    assert "untraced library code" not in err and not _islands(err), err
    _replayed(fast)


def test_random_op_inside_wrapper_set_seed_draws_like_eager(fallback_log):
    # the dropout draws from the generator wrapper_set_seed seeded (42), whatever the seed
    # outside, and the generator is restored after, as in eager; the rest is compiled
    def fn(x):
        return _dropout_op(x * 2, p=0.5, training=True) + torch.rand_like(x)

    fast = mlircap.compile(fn)
    x = torch.randn(6, 7)
    for seed in range(3):
        torch.manual_seed(seed)
        want = fn(x)
        want_state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = fast(x)
        assert torch.equal(got, want)
        assert torch.equal(torch.get_rng_state(), want_state)
    assert "untraced library code" not in fallback_log.readouterr().err
    _replayed(fast)


def test_freeze_rng_state_in_the_function(fallback_log):
    # `with freeze_rng_state():` (a contextlib manager of library code that saves and restores
    # the RNG state) runs its __enter__ / __exit__ between graphs, as `with fork_rng():`
    def fn(x):
        with freeze_rng_state():
            torch.manual_seed(3)
            y = x.sin() + torch.rand_like(x)
        return y * 2 + torch.rand_like(x)

    fast = mlircap.compile(fn)
    x = torch.randn(5)
    for seed in range(3):
        torch.manual_seed(seed)
        want = fn(x)
        want_state = torch.get_rng_state()
        torch.manual_seed(seed)
        got = fast(x)
        torch.testing.assert_close(got, want)
        assert torch.equal(torch.get_rng_state(), want_state)
    _replayed(fast)
