"""The guard kinds (mlircap/capture/guard_kinds.py): each record's typed `check` and its
compiled `code` agree, on the recorded value and on values that must fail it."""
import math

import pytest
import torch

from mlircap.capture import capture
from mlircap.capture.guard_kinds import (
    Equals, GuardEnv, Is, Keys, Lengths, NoKey, Number, SameAs, TypeLen,
)
from mlircap.capture.guard_tensors import TensorMatch
from mlircap.capture.guards import _compile_guard

EAGER = lambda gm, ex: gm.forward  # noqa: E731


class _Consts:
    """A constant table, as the recorder's."""

    def __init__(self):
        self.consts, self.idx = [], {}

    def const(self, v, name=None):
        k = self.idx.setdefault(id(v), len(self.consts))
        if k == len(self.consts):
            self.consts.append(v)
        return f"C[{k}]"

    def _lit(self, v):
        return repr(v) if v is None or type(v) in (bool, int, str) else self.const(v)


def _agree(g, values):
    """For each value placed at L[0]: (typed check, compiled code) answers, which must agree."""
    k = _Consts()
    fn = _compile_guard([g.code(k)], k.consts, None)
    out = []
    for v in values:
        env = GuardEnv((v,), None, k.consts)
        try:
            typed = bool(g.check(env))
        except Exception:
            typed = False
        assert typed == fn((v,), None), (g, v)
        out.append(typed)
    return out


def test_number_guard_is_exact():
    assert _agree(Number("L[0]", "x", 0.0, float), [0.0, -0.0, 0, False, 1e-300]) == [True] + [False] * 4
    assert _agree(Number("L[0]", "x", -0.0, float), [-0.0, 0.0]) == [True, False]
    assert _agree(Number("L[0]", "x", math.nan, float), [math.nan, float("nan"), 0.0]) == [True, True, False]
    assert _agree(Number("L[0]", "x", 3, int), [3, 3.0, True, 4]) == [True, False, False, False]
    assert _agree(Number("L[0]", "x", complex(-0.0, 1), complex), [complex(-0.0, 1), complex(0.0, 1)]) == \
        [True, False]


def test_container_and_identity_guards():
    o = object()
    assert _agree(Is("L[0]", "x", o, "o"), [o, object(), None]) == [True, False, False]
    assert _agree(Is("L[0]", "x", None, "None"), [None, 0]) == [True, False]
    assert _agree(Equals("L[0]", "x", (1, 2), exact=tuple), [(1, 2), [1, 2], (1, 3)]) == [True, False, False]
    assert _agree(TypeLen("L[0]", "x", list, 2), [[1, 2], (1, 2), [1]]) == [True, False, False]
    assert _agree(Keys("L[0]", "x", ("a", "b")), [{"a": 1, "b": 2}, {"b": 2, "a": 1}, {"a": 1}]) == \
        [True, False, False]
    assert _agree(Keys("L[0]", "x", ()), [{}, {"a": 1}]) == [True, False]
    assert _agree(NoKey("L[0]", "x", "k"), [{}, {"k": 1}]) == [True, False]
    assert _agree(SameAs("L[0][0]", "x", "L[0][1]", "y"), [(o, o), (o, object())]) == [True, False]
    h = {}
    assert _agree(Lengths((h,), (0,), "m"), [None]) == [True]
    h[1] = 1
    assert _agree(Lengths((h,), (0,), "m"), [None]) == [False]


def test_tensor_match():
    t = torch.randn(2, 3)
    g = TensorMatch.of("L[0]", "x", t)
    assert _agree(g, [torch.randn(2, 3), torch.randn(3, 2), t.t(), t.double(), t.requires_grad_(True)]) == \
        [True, False, False, False, False]
    assert "shape=(2, 3)" in g.describe()


def test_tensor_read_under_autocast_keeps_its_variant():
    """A tensor first read inside `with torch.autocast(...)` is guarded with the caller's
    dispatch state (the guard runs outside the block): before, its TensorGuards took the
    autocast keys and failed on every call, recording a new variant each time."""
    W = torch.randn(4, 4)

    def f(s):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = W * s
        return y.float() + 1

    w = capture(f, EAGER)
    for _ in range(3):
        torch.testing.assert_close(w(2.0), f(2.0))
    c = w._mlircap_capture
    assert c.recompiles == 0, c.stats.recompile_reasons


@pytest.mark.parametrize("bad", ["shape", "dtype"])
def test_first_failure_names_the_guard(bad):
    def f(x, n):
        return x * n

    w = capture(f, EAGER)
    x = torch.randn(3)
    w(x, 2)
    v = w._mlircap_capture.variants[0]
    y = torch.randn(4) if bad == "shape" else x.double()
    assert v.guard((y, 2), f) is False
    assert v.first_failure((y, 2), f).startswith("x: Tensor")
    assert v.guard((x, 3), f) is False and v.first_failure((x, 3), f) == "n == 2"
