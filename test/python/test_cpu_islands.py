"""Eager islands run their prims ops as aten ops (partition.eager_prims_to_aten):
eager prims ops are Python reference implementations, 35-160 µs a call. Values
and view-ness against the prims ops themselves and against eager."""
import gc

import pytest
import torch
import torch.fx as fx

import mlircap
from mlircap.partition import PartitionedGraph, eager_prims_to_aten

P = torch.ops.prims


def _graph_of(target, extra, n_inputs):
    g = fx.Graph()
    xs = [g.placeholder(f"x{i}") for i in range(n_inputs)]
    g.output(g.call_function(target, (*xs, *extra)))
    return g


CASES = [   # name, prims op, its non-tensor arguments, inputs
    ("squeeze", P.squeeze.default, ([0, 2],), lambda: (torch.randn(1, 5, 1, 3),)),
    ("convert", P.convert_element_type.default, (torch.float64,), lambda: (torch.randn(4, 6).t(),)),
    ("convert_int", P.convert_element_type.default, (torch.int32,), lambda: (torch.randn(4, 6) * 9,)),
    ("view_of", P.view_of.default, (), lambda: (torch.randn(3, 4)[:, 1:],)),
    ("transpose", P.transpose.default, ([2, 0, 1],), lambda: (torch.randn(2, 3, 4),)),
    ("where", P.where.default, (), lambda: (torch.randn(3, 4) > 0, torch.randn(3, 4), torch.randn(3, 4))),
    ("collapse_view", P.collapse_view.default, (1, 3), lambda: (torch.randn(2, 3, 4, 5),)),
    ("collapse_view_one", P.collapse_view.default, (1, 2), lambda: (torch.randn(2, 3, 4),)),
    ("collapse_view_same", P.collapse_view.default, (1, 1), lambda: (torch.randn(2, 3, 4),)),
    ("split_dim", P.split_dim.default, (1, 3), lambda: (torch.randn(2, 12, 5),)),
    ("broadcast_in_dim", P.broadcast_in_dim.default, ([2, 3, 4, 5], [1, 3]), lambda: (torch.randn(3, 5),)),
    ("broadcast_in_dim_unit", P.broadcast_in_dim.default, ([6, 4], [0, 1]), lambda: (torch.randn(1, 4),)),
]


@pytest.mark.parametrize("name,target,extra,inputs", CASES, ids=[c[0] for c in CASES])
def test_prims_as_aten_match_prims(name, target, extra, inputs):
    args = inputs()
    g = _graph_of(target, extra, len(args))
    want = fx.GraphModule(torch.nn.Module(), g)(*args)
    eager_prims_to_aten(g)
    assert not any(n.op == "call_function" and str(n.target).startswith("prims.") for n in g.nodes), g
    got = fx.GraphModule(torch.nn.Module(), g)(*args)
    assert got.dtype == want.dtype and got.shape == want.shape
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    if name not in ("convert", "convert_int", "where"):   # views stay views of the input
        assert got.untyped_storage().data_ptr() == args[0].untyped_storage().data_ptr()


def _islands():
    found = []
    for o in gc.get_objects():
        if isinstance(o, PartitionedGraph):
            found += [fn for fn, _, _, _ in o.steps if hasattr(fn, "reasons")]
    return found


@pytest.mark.parametrize("batch_first", [True, False])
def test_lstm_island_matches_eager_without_prims(batch_first):
    torch.manual_seed(0)
    m = torch.nn.LSTM(8, 16, batch_first=batch_first).eval()
    x = torch.randn(3, 5, 8)
    fast = mlircap.compile(m)
    with torch.no_grad():
        want = m(x)
        for _ in range(2):
            got = fast(x)
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1][0], want[1][0])
            torch.testing.assert_close(got[1][1], want[1][1])
    islands = _islands()
    assert islands
    for isl in islands:
        assert "prims." not in isl.gm.code, isl.gm.code


def test_linalg_error_checks_run_without_the_effects_op():
    """linalg.solve / linalg.inv islands call aten._linalg_check_errors directly, not through
    the with_effects higher-order op (Python dispatch, 44 us a call against 8); the check
    still raises eager's error on a singular matrix, and the token reaches the graph's end."""
    def f(a, b):
        x = torch.linalg.solve(a, b)
        return x + torch.linalg.inv(a) @ b

    torch.manual_seed(0)
    a, b = torch.randn(4, 4) + 4 * torch.eye(4), torch.randn(4, 2)
    fast = mlircap.compile(f)
    for _ in range(3):
        torch.testing.assert_close(fast(a, b), f(a, b))
    islands = [i for i in _islands() if "_linalg_check_errors" in i.gm.code]
    assert islands
    for isl in islands:
        assert "with_effects(" not in isl.gm.code, isl.gm.code
    singular = torch.zeros(4, 4)
    with pytest.raises(RuntimeError) as want:
        f(singular, b)
    with pytest.raises(RuntimeError) as got:
        fast(singular, b)
    assert str(got.value) == str(want.value)
