"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), session 23: seeds
2551:2800 of each mode, userops 1251:1400 and the new `edges` group (type promotion against
0-dim tensors and Python scalars, in-place ops casting back, out=, metadata in-place ops,
aliased inputs, size-0 reductions): what it found, minimized, and the group's own checks."""
import pytest
import torch

import mlircap
from compiled_check import check_compiled, same  # test/python/compiled_check.py
from test_trust_fuzz17 import _load_fuzz  # bench/fuzz_graphs.py as a module (test/python is on sys.path)


# ------------------------------------------------------------- bool numbers of clamp / clip
# edges seeds 112, 116: `torch.clamp(x, max=True)` (a bool where the schema takes a number,
# `Scalar?`): torch-mlir's importer wrote it as !torch.bool, which clamp's optional number
# operands reject ('operand #2 must be Optional torch scalar type'): the whole graph ran
# eagerly. frontend._bool_scalars_as_ints passes the int it stands for.
_CLAMPS = {
    "max": lambda x: torch.clamp(x, max=True) * 3,
    "min": lambda x: torch.clamp(x, min=True) + x,
    "both": lambda x: torch.clamp(x, False, True),
    "clip": lambda x: x.clip(min=False),
    "in_place": lambda x: x.clone().clamp_(max=True),
    "clamp_min": lambda x: torch.clamp_min(x, True),
    "clamp_max": lambda x: torch.clamp_max(x, False),
}
_SOURCES = {
    "int64": torch.arange(-3, 9).view(3, 4),
    "uint8": torch.arange(0, 12, dtype=torch.uint8).view(3, 4),
    "float32": torch.linspace(-2, 2, 12).view(3, 4),
    "float16": torch.linspace(-2, 2, 12).view(3, 4).half(),
}


@pytest.mark.parametrize("dtype", list(_SOURCES))
@pytest.mark.parametrize("form", list(_CLAMPS))
def test_clamp_with_bool_bounds_compiles(form, dtype, fallback_log):
    check_compiled(_CLAMPS[form], [_SOURCES[dtype]], fallback_log)


def test_bool_numbers_of_other_ops_unchanged(fallback_log):
    # the importer's own Int.bool for a number that is not optional (fill values, exponents,
    # an alpha / value / beta): same results as before
    def f(x):
        return (x.masked_fill(x > 0, True), torch.pow(x, True), torch.lerp(x, x * 2, True),
                torch.addcmul(x, x, x, value=True), torch.nn.functional.softplus(x, beta=True),
                torch.full_like(x, True) + x)

    check_compiled(f, [torch.linspace(-2, 2, 12).view(3, 4)], fallback_log, exact=False)


# ------------------------------------------------------------------ the edges group itself
@pytest.fixture(scope="module")
def fuzz():
    return _load_fuzz()


def test_edges_group_is_deterministic_and_its_own(fuzz):
    for seed in (3, 17, 112):
        p = fuzz.generate(seed, ["edges"])
        assert p["v2"] and p == fuzz.generate(seed, ["edges"])
        assert set(p["families"]) <= set(fuzz.GROUPS["edges"])
    # generator v1's programs are unchanged by the new family
    assert "edges" not in fuzz.family_weights(None)


def test_aliased_inputs_view_one_storage(fuzz):
    # an input of layout "alias" is a view of an earlier one in every input set (the same
    # tensor passed twice, or two views of one storage), and the run's copies keep it so
    progs = [p for p in (fuzz.generate(s, ["edges"]) for s in range(40))
             if any(i["layout"] == "alias" for i in p["inputs"])]
    assert progs
    for p in progs[:5]:
        for alt in (False, True, "values"):
            ins = fuzz.make_inputs(p, alt=alt)
            copies = fuzz.opinfo._clone(ins)
            for i, spec in enumerate(p["inputs"]):
                if spec["layout"] == "alias":
                    j = spec["alias"]
                    for ts in (ins, copies):
                        assert ts[i].untyped_storage().data_ptr() == ts[j].untyped_storage().data_ptr()
        assert fuzz.fp64_reference(p, fuzz.make_inputs(p)) is None   # float64 copies would not alias


def test_aliased_input_written_through_the_other(fuzz):
    # what the aliased inputs test: a write through one argument read through the other
    def f(a, b):
        a.mul_(2)
        return b + 1

    x = torch.randn(4, 4)
    fast = mlircap.compile(f)
    for _ in range(2):
        e, c = x.clone(), x.clone()
        same(fast(c, c.t()), f(e, e.t()))
        same(c, e)


@pytest.mark.parametrize("seed", [69, 112, 116, 283, 361, 423, 450])
def test_edges_seeds_not_wrong(fuzz, seed):
    rec = fuzz.run_programs([fuzz.generate(seed, ["edges"])], jobs=1, timeout=120, progress=False)[0]
    assert rec["category"] in ("compiled", "fallback"), rec


@pytest.mark.parametrize("seed", [134, 137, 173])
def test_edges_programs_run_eagerly_at_their_first_inputs(fuzz, seed):
    # the generator's copies after an op eager rejected keep each input's layout: an expanded
    # input cloned dense accepted an in-place op the run's expanded input raises on (these
    # seeds raised in eager and compiled alike, every call recorded again)
    assert not fuzz._eager_raises(fuzz.generate(seed, ["edges"]), alt=False)


# ------------------------------------------- x == x read through as_strided (tensorops 2656)
# `v == v` becomes ~isnan(v) before import (frontend._self_equality_as_not_nan), and the
# inserted isnan node took a copy of the eq node's meta: one FakeTensor, one storage.
# torch-mlir's as_strided rewrite follows shared storages back to the tensor it indexes, so
# `(v == v).as_strided(...)` indexed isnan(v): all False where eager is all True (94 of 94
# values, replayed call). Both the rewrite's own value and frontend._fresh_values fix it.
_SELF_EQ = {
    "overlapping": lambda x: (lambda v: v == v)(x * 2).as_strided((47, 2), (1, 1)),
    "offset": lambda x: (lambda v: v == v)(x.float().sigmoid()).as_strided((5, 3), (4, 2), 3),
    "isfinite": lambda x: torch.isfinite(x * 2).as_strided((20,), (2,)),
    "with_other_output": lambda x: (lambda v: ((v == v).as_strided((10, 4), (4, 1)), v.sum()))(x - 1),
}


@pytest.mark.parametrize("form", list(_SELF_EQ))
def test_self_equality_read_through_as_strided(form, fallback_log):
    x = torch.randn(3, 2, 2, 4)
    x[0, 1, 0, 2] = float("nan")
    x[1, 0, 1, 1] = float("inf")
    check_compiled(_SELF_EQ[form], [x], fallback_log)


def test_op_value_sharing_its_arguments_storage_gets_its_own():
    # frontend._fresh_values on a graph whose logical_not holds the very FakeTensor of the
    # isnan it reads (what the rewrite left): a value of its own after preparation
    from torch._subclasses.fake_tensor import FakeTensorMode

    from mlircap import frontend

    aten = torch.ops.aten
    g = torch.fx.Graph()
    x = g.placeholder("x")
    a = g.call_function(aten.isnan.default, (x,))
    b = g.call_function(aten.logical_not.default, (a,))
    v = g.call_function(aten.view.default, (b, [6]))
    g.output((v,))
    with FakeTensorMode():
        xv = torch.empty(2, 3)
        av = torch.empty(2, 3, dtype=torch.bool)
        vv = av.view(6)
    x.meta["val"], a.meta["val"], b.meta["val"], v.meta["val"] = xv, av, av, vv
    out = frontend._prepare_for_import(torch.fx.GraphModule(torch.nn.Module(), g))
    nodes = {n.target: n for n in out.graph.nodes if n.op == "call_function"}
    nv, bv = nodes[aten.isnan.default].meta["val"], nodes[aten.logical_not.default].meta["val"]
    assert nv.untyped_storage() is not bv.untyped_storage()
    assert bv.shape == av.shape and bv.dtype == torch.bool
    assert nodes[aten.view.default].meta["val"] is vv    # a view keeps its argument's storage


# ------------------------------------------ an unused LAPACK op that raises (tensorops 2716)
# v5 = torch.linalg.matrix_norm(v4, 2), nothing reading v5, with log_softmax rows of -inf
# in v4 (NaN): eager raised _LinAlgError ('linalg.svd: The algorithm failed to converge
# because the input matrix contained non-finite values'), the compiled graph (aot_autograd
# drops unused results) returned. backend._RAISING_OPS keeps such ops as extra outputs.
_LAPACK_DEAD = {
    "matrix_norm_2": lambda x: torch.linalg.matrix_norm(x, 2),
    "svdvals": lambda x: torch.linalg.svdvals(x),
    "svd": lambda x: torch.linalg.svd(x)[0],
    "nuclear": lambda x: x.norm(p="nuc"),
    "eigvalsh": lambda x: torch.linalg.eigvalsh(x + x.mT),
    "pinv": lambda x: torch.linalg.pinv(x),
    "cond": lambda x: torch.linalg.cond(x),
}


@pytest.mark.parametrize("form", list(_LAPACK_DEAD))
def test_unused_lapack_op_raises_as_eager(form):
    from test_trust_fuzz15 import _same_outcomes

    op = _LAPACK_DEAD[form]

    def f(x):
        op(x * 1)       # nothing reads it
        return x * 2

    good = torch.randn(5, 5)
    bad = good.clone()
    bad[2, 3] = float("nan")
    _same_outcomes(f, (good,), (bad,))


# ------------------------- metadata changed in place on the function's own tensors (edges)
# An out= tensor the function made, resized by the op (edges seed 423: the graph's later ops
# read the result at the out tensor's old shape: (3,) where eager's is (2,)), as_strided_ of
# an intermediate (seed 283: 11 of 12 values read at other positions; seed 450: IndexError),
# resize_ of one: the function runs eagerly (capture.tensor_meta._inner_metadata), as it did for
# tensors from outside. (Since session 24 an out= tensor of the function's own that the op's
# result simply replaces is rebound to it and compiles, restrides._rebound_out: values then
# within the dtype's tolerance, a compiled sum.)
_INNER_META = {
    "out_resized_then_indexed": lambda x: torch.add(x.sum(0), 1, out=torch.zeros(3, dtype=x.dtype))[..., 0],
    "out_empty_then_reduced": lambda x: torch.mul(x, 2, out=torch.empty(0)).sum(-1),
    "as_strided_": lambda x: (lambda v: (v.as_strided_((12,), (2,)), v * 2)[1])(x.reshape(-1) + 1),
    "as_strided_then_slice": lambda x: (lambda v: (v.as_strided_((1,), (2,)), v[:0].sum(), v + 1)[1:])(x.clamp(min=0)),
    "resize_": lambda x: (lambda v: (v.resize_(5), v * 3)[1])(x.reshape(-1) - 1),
}


@pytest.mark.parametrize("form", list(_INNER_META))
def test_metadata_changed_in_place_on_own_tensors(form):
    fn = _INNER_META[form]
    x = torch.randn(4, 2, 3)
    fast = mlircap.compile(fn)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(3):
            want, got = fn(x.clone()), fast(x.clone())
            same(got, want, exact=not form.startswith("out_"))


def test_out_of_the_right_shape_still_compiles(fallback_log):
    # an out= tensor the op does not resize stays in the graph
    check_compiled(lambda x: torch.add(x, 1, out=torch.empty_like(x)).sum(-1), [torch.randn(4, 3)], fallback_log,
                   exact=False)
