"""Session 30 findings of bench/fuzz_graphs.py on fresh seeds (issue 10: compiled code never
crashes, never returns a wrong result, never raises an error eager does not raise)."""
from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path

import pytest
import torch

import mlircap
from mlircap.capture.overlaps import internal_overlap


def _calls(fn, make, n=3):
    c = mlircap.compile(fn)
    for i in range(n):
        torch.manual_seed(100 + i)
        x = make()
        want, got = fn(x.clone()), c(x.clone())
        assert got.shape == want.shape and got.stride() == want.stride(), i
        assert torch.equal(got, want), (i, (got - want).abs().max())


def _overlapping_rows(x):
    # rows i and i + 1 share an element: eager's add_ doubles it once per position
    v = (x * 1).as_strided((47, 2), (1, 1))
    v.add_(v)
    return v.flatten()


def _window_rows(x):
    v = x.clone().as_strided((5, 3), (2, 1))
    v.mul_(2)
    return v + 0


def _strided_rows(x):
    # rows do not overlap (stride 3 past the row's span of 2): stays compiled
    v = x.clone().as_strided((5, 2), (3, 1))
    v.mul_(2)
    return v + 0


@pytest.mark.parametrize("fn", [_overlapping_rows, _window_rows, _strided_rows])
def test_in_place_write_to_overlapping_as_strided_is_eager(fn):
    """fuzz_graphs --grad seed 6065: an in-place op on an as_strided view whose positions share
    elements (torch's own overlap test says 'too hard', not 'yes'): eager writes a shared
    element once per position, a graph's functional form once; 64 of 94 values differed from
    the second call.  The function now runs eagerly there."""
    _calls(fn, lambda: torch.randn(48, dtype=torch.float64))


def test_overlapping_as_strided_argument_written_through_a_view():
    """An argument with overlapping rows, written through a view of its storage."""
    def fn(x):
        x[:, 0].mul_(3)
        return x.sum(1)

    c = mlircap.compile(fn)
    for i in range(3):
        base = torch.randn(48)
        want_base, got_base = base.clone(), base.clone()
        want = fn(want_base.as_strided((47, 2), (1, 1)))
        got = c(got_base.as_strided((47, 2), (1, 1)))
        assert torch.equal(got, want) and torch.equal(got_base, want_base), i


@pytest.mark.parametrize("size, stride, shared", [
    ((47, 2), (1, 1), True), ((5, 3), (2, 1), True), ((5, 2), (3, 1), False),
    ((4, 3), (1, 4), False), ((2, 3, 4), (1, 8, 2), False), ((3, 4), (4, 2), True),
    ((6, 2), (2, 3), False), ((4, 3), (2, 3), True), ((0, 3), (1, 1), False), ((3, 1), (1, 1), False),
    ((4, 2), (0, 1), True),
])
def test_internal_overlap_decides_too_hard(size, stride, shared):
    t = torch.zeros(64).as_strided(size, stride)
    positions = t.numel()
    elements = len({sum(i * s for i, s in zip(idx, stride))
                    for idx in itertools.product(*map(range, size))})
    assert (elements < positions) == shared
    assert internal_overlap(t) is shared


@pytest.fixture(scope="module")
def fuzz():
    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs30", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _eager_call(f, tensors):
    ins = [t.clone() for t in tensors]
    with torch.no_grad():
        return f(*ins), ins, None


def _fmod_by_mean(x):
    v = x.expand(15) * 1
    return (torch.fmod(v, v.mean(-1, keepdim=True)),)


def test_a_jump_of_eager_s_own_rounding_is_not_wrong(fuzz):
    """tensorops seed 6061: fmod(v, v.mean()) of 15 equal float32 values: eager's mean one ulp
    toward zero gives about 0, a mean rounded the other way gives v (the float64 program sits on
    the jump at exactly 0): the other side of the jump is accepted, a value neither side gives
    is still wrong, and so is one where no op jumps."""
    x = torch.tensor([-2.662721633911133])
    want = _eager_call(_fmod_by_mean, [x])
    v = x.expand(15) * 1
    other = (torch.fmod(v, v.mean() * (1 + 4 * torch.finfo(torch.float32).eps)),)
    assert not torch.allclose(other[0], want[0][0], atol=1e-3)
    assert fuzz._eager_near_jump(_eager_call, _fmod_by_mean, [x], (other, [x]), want[:2], 0.0)
    # a real wrong value: the sign lost (remainder's convention for a positive divisor), or the
    # value off by 0.5
    wrong = (-other[0],)
    assert not fuzz._eager_near_jump(_eager_call, _fmod_by_mean, [x], (wrong, [x]), want[:2], 0.0)
    off = (other[0] + 0.5,)
    assert not fuzz._eager_near_jump(_eager_call, _fmod_by_mean, [x], (off, [x]), want[:2], 0.0)

    def no_jump(t):
        return (t.expand(15) * 1 - t.expand(15).mean(),)
    w = _eager_call(no_jump, [x])
    assert not fuzz._eager_near_jump(_eager_call, no_jump, [x], ((w[0][0] + 1,), [x]), w[:2], 0.0)


def test_tensorops_seed_6061_is_not_wrong(fuzz):
    prog = fuzz.generate(6061, ["tensorops"])
    assert "torch.fmod(v4, v4.mean(-1, keepdim=True))" in prog["source"]
    rec = fuzz.run_program(prog)
    assert rec["category"] in ("compiled", "fallback"), rec
