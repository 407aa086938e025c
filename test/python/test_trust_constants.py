"""Ops on values the graph's inputs do not decide (constants, fills, *_like) and
ops torch-mlir lowers to an assert that can never hold: both gave silently wrong
results before (found by outside-style programs, 2026-12-02).

* torch-mlir folds ops on splat literals, some wrongly: a float splat compared with
  an integer scalar compared the float's bits (`torch.ones(4) == 1` was all False,
  so F.cosine_embedding_loss returned 0), add/sub with alpha=-1 gave 1.8e19,
  comparisons of f16/bf16/f64 splats and `where` over a constant condition were
  wrong. constfold.py computes such values with torch first.
* adaptive_max_pool2d(8 -> 3) (windows of unequal size) lowered to a fixed-window
  pooling behind `cf.assert false, "unimplemented: ..."`, which mlircap dropped:
  every call after the first returned wrong maxima. Such a lowering now counts as
  torch-mlir rejecting the op, which runs through torch inside the compiled graph.
"""
import warnings

import pytest
import torch
import torch.nn.functional as F

import mlircap
from mlircap.constfold import fold_constants

X = torch.tensor([0.5, 1.0, 3.0, -2.0])

CASES = {
    "eq_int": lambda t, s: t == s, "ne_int": lambda t, s: t != s, "lt_int": lambda t, s: t < s,
    "le_int": lambda t, s: t <= s, "gt_int": lambda t, s: t > s, "ge_int": lambda t, s: t >= s,
    "where_const_cond": lambda t, s: torch.where(t > 2, t, s),
    "masked_fill": lambda t, s: t.masked_fill(t > 0, s),
    "bool_eq": lambda t, s: (t > 0) == s,
    "add_alpha": lambda t, s: torch.add(t, t, alpha=s), "sub_alpha": lambda t, s: torch.sub(t, t * 2, alpha=s),
    "ne_f16": lambda t, s: t.half() != s, "lt_bf16": lambda t, s: t.bfloat16() < s,
    "eq_f64": lambda t, s: t.double() == s, "lt_f64": lambda t, s: t.double() < s,
}
MAKERS = {"ones": lambda x: torch.ones(4), "three": lambda x: torch.full((4,), 3.0),
          "full_like_x": lambda x: torch.full_like(x, 1), "x": lambda x: x}


@pytest.mark.parametrize("maker", sorted(MAKERS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_ops_on_constants_match_eager(case, maker):
    op, make = CASES[case], MAKERS[maker]
    for s in (1, 2, 3, 0, -1, 2.5, True):
        def f(x):
            return op(make(x), s)
        try:
            want = f(X)
        except RuntimeError:
            continue   # eager rejects it (sub with a bool alpha, ...)
        fast = mlircap.compile(f)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")   # a part that runs eagerly must still be right
            for _ in range(2):
                torch.testing.assert_close(fast(X), want, equal_nan=True, msg=f"{case} {maker} {s!r}")


def test_cosine_embedding_loss_with_constant_target():
    def f(x, y):
        return F.cosine_embedding_loss(x, y, torch.ones(4)), F.cosine_embedding_loss(x, y, -torch.ones(4), margin=0.1)

    x, y = torch.randn(4, 10), torch.rand(4, 10)
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            for got, want in zip(fast(x, y), f(x, y)):
                torch.testing.assert_close(got, want)



def test_fold_leaves_no_op_on_literals_only():
    # what torch-mlir gets: no op whose operands are all literals
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        t = torch.full_like(x, 1)
        m = (t == 1) & (torch.arange(4) < 3)
        return torch.where(m, x, t * 2), torch.ones(4) + torch.zeros(4, dtype=torch.float64)

    gm = make_fx(f)(X)
    assert fold_constants(gm) >= 2
    gm.recompile()
    computed = [n for n in gm.graph.nodes if n.op == "call_function" and n.all_input_nodes]
    for n in computed:
        assert any(a.op == "placeholder" or a in computed for a in n.all_input_nodes), n.format_node()
    for got, want in zip(gm(X), f(X)):
        torch.testing.assert_close(got, want)


def test_random_and_uninitialized_values_are_not_folded():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return x + torch.rand(4) * 0, torch.empty(4).fill_(2.0) + x

    gm = make_fx(f)(X)
    fold_constants(gm)
    names = {str(n.target) for n in gm.graph.nodes}
    assert any("rand" in t for t in names)


def test_adaptive_max_pool_with_unequal_windows():
    def f(x):
        return F.adaptive_max_pool2d(x, 3), F.adaptive_avg_pool2d(x, (3, 5)), F.adaptive_max_pool2d(x, 4)

    x = torch.randn(2, 3, 8, 8)
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            x = torch.randn(2, 3, 8, 8)
            for got, want in zip(fast(x), f(x)):
                torch.testing.assert_close(got, want)


def test_always_failing_assert_is_a_lowering_failure():
    from torch.fx.experimental.proxy_tensor import make_fx

    from mlircap.frontend import FrontendError, import_fx, lower_torch_ir

    gm = make_fx(lambda x: F.adaptive_max_pool2d(x, 3))(torch.randn(1, 1, 8, 8))
    with pytest.raises(FrontendError, match="unimplemented") as e:
        lower_torch_ir(import_fx(gm))
    assert e.value.stage == "torch-to-linalg"
    # equal windows lower fine
    gm = make_fx(lambda x: F.adaptive_max_pool2d(x, 4))(torch.randn(1, 1, 8, 8))
    assert "pooling" in lower_torch_ir(import_fx(gm)).linalg_ir


def test_graph_of_constants_only():
    # every output folded: a graph output is a folded (non-uniform) constant
    def f():
        return torch.linspace(0, 1, 50) * 3, (torch.arange(10, dtype=torch.float32).exp(), torch.eye(4))

    fast = mlircap.compile(f)
    for _ in range(3):
        got, want = fast(), f()
        torch.testing.assert_close(got, want)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs)


def test_distinct_bool_constants_stay_distinct():
    """torch-mlir's FX importer maps id(tensor) to the literal it made, and converts each
    bool constant to a uint8 temporary it drops at once: the next mask's temporary could get
    the same id and reuse the first mask's data (found by bench/modules3.py's
    repetition_penalty_no_repeat_ngram: `scores[1, [3, 5]] = -inf` after `scores[0, [2]]`
    wrote the wrong column, in a compile worker that had compiled other graphs first).
    frontend._pinning_tracker keeps the temporaries alive for the import."""
    import re

    from torch._subclasses.fake_tensor import FakeTensorMode

    from mlircap.frontend import _pinning_tracker, import_fx

    # the importer's conversion: a temporary per constant, tracked, then dropped
    tracker = _pinning_tracker()
    for i in range(20):
        mapping = tracker.track(torch.full((3,), i, dtype=torch.uint8))
        assert mapping.is_empty, "a new tensor took the literal of a dropped one"
        mapping.value = i

    gm = torch.fx.GraphModule(torch.nn.Module(), torch.fx.Graph())
    g, fm = gm.graph, FakeTensorMode()
    x = g.placeholder("x")
    x.meta["val"] = fm.from_tensor(torch.randn(10))
    cur = x
    for i in range(8):
        m = torch.zeros(10, dtype=torch.bool)
        m[i] = True
        gm.register_buffer(f"m{i}", m)
        a = g.get_attr(f"m{i}")
        a.meta["val"] = m
        cur = g.call_function(torch.ops.aten.where.ScalarSelf, (a, 0.0, cur))
        cur.meta["val"] = fm.from_tensor(torch.randn(10))
    g.output((cur,))
    gm.recompile()
    blobs = re.findall(r'torch_tensor_10_torch\.uint8\w*: "(0x[0-9A-F]+)"', import_fx(gm))
    assert len(set(blobs)) == 8


def _returns_constant_and_views(x):
    b = torch.ones(3, 4) * 3
    b.add_(1)
    return x * 2, b, b[1:], b.t()


def test_folded_output_and_its_views_share_memory_as_eagers():
    """constfold: a returned view of a folded value stays a view of it. Folded into constants of
    their own, `b` and `b[1:]` came back as separate tensors from the second call on (a write
    through one was not seen through the other, as it is in eager)."""
    fast = mlircap.compile(_returns_constant_and_views)
    for _ in range(3):
        x = torch.randn(3, 4)
        got, want = fast(x), _returns_constant_and_views(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w)
        a, b, c, t = got
        assert b.untyped_storage().data_ptr() == c.untyped_storage().data_ptr() == t.untyped_storage().data_ptr()
        b[1, 0] = -7.0
        assert c[0, 0].item() == -7.0 and t[0, 1].item() == -7.0
