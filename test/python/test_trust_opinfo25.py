"""OpInfo sweep (bench/opinfo.py, issue 10 and issue 12 item 1), session 25 (held-out seeds
2211-2213): op forms that ran through torch (an eager island, a whole graph eagerly) or gave
another result than eager, and the warnings that name what runs eagerly."""
import inspect
import warnings

import torch

import mlircap
from mlircap import backend


# ------------------------------------------------------------- a failing CPU pass pipeline
# When a pass of the CPU pipeline failed ('pass pipeline failed': the fpowi rewrite of
# mlircap-simplify-math did, bb44b8b), the backend probed only the graph's non-pointwise
# ops to find the culprit: a failing pointwise op was never found, and the whole graph ran
# eagerly with a warning naming no op. Now the pointwise ops are probed too: the op that
# fails alone is an island through torch, named with the user's line; the rest compiles.
# (The failing codegen is simulated: the compile worker's CPU plan error, as the core
# gives it, for any graph holding aten.atan2.)

def _failing_atan2(monkeypatch, error):
    real = backend._lower

    def lower(raw_ir, device, options, check=False):
        out = real(raw_ir, device, options, check)
        if "torch.aten.atan2" in raw_ir:
            return {**out, "cpu_plan_error": error}
        return out

    monkeypatch.setattr(backend, "_lower", lower)
    monkeypatch.setattr(backend, "_PROBES", {})
    monkeypatch.setattr(backend, "_ACCEPTED_KINDS", set())


_PIPELINE_ERROR = ("pass pipeline failed\nloc(\"-\":3:10): error: failed to legalize operation "
                   "'math.atan2' that was explicitly marked illegal")


def _atan2_graph(x, y):
    a = x.sum(1, keepdim=True) * 2
    b = torch.atan2(a, y)   # the failing op
    return (b + 1).softmax(-1) @ x.t()


def test_cpu_pipeline_failure_on_a_pointwise_op_is_an_island_named_with_its_line(monkeypatch):
    _failing_atan2(monkeypatch, _PIPELINE_ERROR)
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    fast = mlircap.compile(_atan2_graph)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(x, y) for _ in range(2)]
    for out in outs:
        torch.testing.assert_close(out, _atan2_graph(x, y))
    text = "\n".join(str(w.message) for w in seen)
    line = inspect.getsourcelines(_atan2_graph)[1] + 2
    assert f"aten.atan2 at {__file__}:{line} (CPU codegen failed)" in text, text
    assert "eagerly" not in text, text   # no whole graph ran eagerly
    # the ops around it compiled: the graph before atan2 and the one after
    assert len(fast.graphs) >= 2 and all(g.fallback_reason is None and g.executable is not g.gm
                                         for g in fast.graphs), [g.fallback_reason for g in fast.graphs]


def test_codegen_failure_probe_names_the_cpu_or_gpu(monkeypatch):
    from torch.fx.experimental.proxy_tensor import make_fx

    _failing_atan2(monkeypatch, _PIPELINE_ERROR)
    gm = make_fx(_atan2_graph)(torch.randn(4, 5), torch.randn(4, 5))
    e = backend._PlanRejected("CPU", _PIPELINE_ERROR)
    assert backend._codegen_failed(e, "cpu") and "math.atan2" in str(e)
    found = backend._probe_rejected(gm, "cpu", backend.Options(), pointwise=backend._codegen_failed(e, "cpu"))
    assert [v.split(" at ")[0] for v in found.values()] == ["aten.atan2"], found
    # a plan builder's rejection (no kernel for an op) is not a pipeline failure: as before
    assert not backend._codegen_failed(backend._PlanRejected("CPU", "error: mlircap: unsupported op 'topk'"), "cpu")



# ------------------------------------------------------------------ fractional max pooling
# F.fractional_max_pool2d/3d ran through torch ('aten.fractional_max_pool2d ... not supported':
# torch-mlir cannot lower it; a known leftover of session 24's sweep). maxpool.fractional_max_pool
# computes eager's CPU kernel: per plane the window starts from its random sample (each step
# rounded to the dtype), each window scanned for the last NaN, else the first maximum.
import pytest  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from compiled_check import check_compiled  # noqa: E402  (test/python/compiled_check.py)


def _frac_case(nd, dtype, kind, seed):
    g = torch.Generator().manual_seed(seed)
    sizes = [7, 9] if nd == 2 else [5, 6, 5]
    ks = [2, 3] if nd == 2 else [2, 1, 3]
    outs = [4, 5] if nd == 2 else [3, 4, 2]
    x = torch.randn([2, 3] + sizes, generator=g).to(dtype)
    if kind == "ties":
        x = (x * 2).round()
    elif kind == "nan":
        x[x > 0.8] = float("nan")
    elif kind == "neg_inf":
        x[x < 0.3] = float("-inf")
    rs = torch.rand(2, 3, nd, generator=g).to(dtype)
    pool = F.fractional_max_pool2d if nd == 2 else F.fractional_max_pool3d

    def f(x, rs):
        v, i = pool(x * 1, ks, output_size=outs, return_indices=True, _random_samples=rs)
        return v + 0, i

    return f, (x, rs)


@pytest.mark.parametrize("nd", [2, 3])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
@pytest.mark.parametrize("kind", ["random", "ties", "nan", "neg_inf"])
def test_fractional_max_pool_compiles_as_eager(fallback_log, nd, dtype, kind):
    f, args = _frac_case(nd, dtype, kind, seed=nd * 100 + len(kind))
    check_compiled(f, args, fallback_log, calls=2)


def test_fractional_max_pool_unbatched_and_its_own_draw(fallback_log):
    # the functional draws its samples (an eager island: the draw); the pool compiles
    def f(x):
        return F.fractional_max_pool2d(x * 2, 3, output_size=3, return_indices=True)

    x = torch.randn(3, 8, 8)
    fast = mlircap.compile(f)
    for seed in (5, 6):
        torch.manual_seed(seed)
        got = fast(x)
        torch.manual_seed(seed)
        want = f(x)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert "fractional_max_pool2d" not in fallback_log.readouterr().err


def test_fractional_max_pool_sequences_against_eager_many_shapes():
    # the decomposition itself (run eagerly) against eager's kernel over random sizes, kernels,
    # outputs and samples in every floating dtype: the window starts are where eager's are
    from mlircap.maxpool import fractional_max_pool

    aten = torch.ops.aten
    g = torch.Generator().manual_seed(0)
    for nd, op in ((2, aten.fractional_max_pool2d.default), (3, aten.fractional_max_pool3d.default)):
        dec = fractional_max_pool(nd)
        for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16):
            for trial in range(60):
                sizes = [int(torch.randint(2, 12 if nd == 2 else 7, (1,), generator=g)) for _ in range(nd)]
                ks = [int(torch.randint(1, s + 1, (1,), generator=g)) for s in sizes]
                outs = [int(torch.randint(1, s - k + 2, (1,), generator=g)) for s, k in zip(sizes, ks)]
                x = torch.randn([2, 3] + sizes, generator=g).to(dtype)
                rs = torch.rand(2, 3, nd, generator=g).to(dtype)
                try:
                    want = op(x, ks, outs, rs)
                except RuntimeError:   # eager rejects the sizes: the op is kept
                    assert dec(x, ks, outs, rs) is NotImplemented
                    continue
                got = dec(x, ks, outs, rs)
                assert torch.equal(got[1], want[1]) and torch.equal(got[0], want[0]), (nd, dtype, sizes, ks, outs)



# ------------------------------------------------------------ pooling lists of one element
# OpInfo nn.functional.avg_pool2d int64 #4 (seed 2212): avg_pool2d(x, (2, 2), (), (0,), False,
# True, -2) ran through torch ('aten.avg_pool2d (torch-mlir cannot lower it)'): eager reads
# padding=(0,) as 0 for both dims, torch-mlir's lowering rejects a list of one element. So
# did kernel_size=(2,), stride=(1,) and dilation=(1,) of avg/max pool 2d/3d (any dtype).
# maxpool.full_pool_lists makes such lists nd long.
_POOLS = {
    "opinfo_int64_avg_pool2d_override": (lambda x: F.avg_pool2d(x, (2, 2), (), (0,), False, True, -2),
                                         (1, 1, 4, 4), torch.int64, True),
    "int64_avg_pool2d_kernel_1_list": (lambda x: F.avg_pool2d(x * 3, (2,), (1,), (1,)), (2, 3, 5, 6), torch.int64, True),
    "f32_avg_pool2d": (lambda x: F.avg_pool2d(x + 1, (3,), (2,), (1,), True), (2, 3, 7, 6), torch.float32, False),
    "f32_avg_pool3d": (lambda x: F.avg_pool3d(x + 1, (2, 2, 2), (), (0,)), (1, 2, 4, 5, 4), torch.float32, False),
    "f32_max_pool2d_indices": (lambda x: F.max_pool2d(x + 1, (3,), (2,), (1,), (1,), return_indices=True),
                               (2, 3, 7, 6), torch.float32, True),
    "bf16_max_pool3d": (lambda x: F.max_pool3d(x + 1, (2,), (1,), (1,)), (1, 2, 4, 5, 4), torch.bfloat16, True),
}


@pytest.mark.parametrize("name", sorted(_POOLS))
def test_pool_lists_of_one_element_compile(fallback_log, name):
    f, shape, dtype, exact = _POOLS[name]
    g = torch.Generator().manual_seed(len(name))
    x = torch.randint(-50, 50, shape, generator=g) if dtype == torch.int64 else \
        torch.randn(shape, generator=g).to(dtype)
    # (float avg pools: the compiled sums round in their own order, as for full lists)
    check_compiled(f, (x,), fallback_log, calls=2, exact=exact)


def test_pool_lists_of_one_element_training(fallback_log):
    x = torch.randn(2, 3, 6, 6, requires_grad=True)

    def f(x):
        return F.max_pool2d(x * 2, (3,), (2,), (1,)).square().sum()

    fast = mlircap.compile(f)
    for _ in range(2):
        x.grad = None
        fast(x).backward()
        got = x.grad.clone()
    x.grad = None
    f(x).backward()
    assert torch.equal(got, x.grad)
    assert "torch-mlir cannot lower" not in fallback_log.readouterr().err


# ---------------------------------------------------------------------------- int8 arange
# OpInfo arange int8 #9 (seed 2211, --dtypes without float32): torch.arange(0, end=3,
# dtype=torch.int8) crashed torch-mlir's lowering (SIGSEGV in the compile worker) and the
# graph ran eagerly with a warning naming no op. ranges.arange computes int8 as eager's
# kernel does: start + step * i in int64, converted (wrapping past 127 as eager's).
@pytest.mark.parametrize("args", [(0, 3), (3,), (0, 200), (0, 300), (-200, 5), (250, -3, -7), (-5, 100, 7)])
def test_int8_arange_compiles(fallback_log, args):
    def f(x):
        return torch.arange(*args, dtype=torch.int8) + x

    check_compiled(f, (torch.tensor(1, dtype=torch.int8),), fallback_log, calls=2)


# ----------------------------------------------------- a crash in torch-mlir's lowering
# A SIGSEGV in torch-mlir's lowering (int8 arange, above, before the fix) ended the compile
# worker and the whole graph ran eagerly, the warning naming no op: "running graph1
# eagerly. WorkerCrashed: the compile worker died with SIGSEGV in stage 'torch-mlir
# lowering'". Now the graph's ops are probed one at a time (each crash ends a worker only)
# and the op torch-mlir crashes on runs through torch, named with its line; the rest
# compiles. (The crash is injected: MLIRCAP_WORKER_FAULT=lowering-segv:TEXT kills the
# worker in the lowering of any graph whose IR holds TEXT.)
def test_lowering_crash_is_probed_to_the_op_and_its_line(monkeypatch):
    monkeypatch.setenv("MLIRCAP_WORKER_FAULT", "lowering-segv:torch.aten.atan2")
    monkeypatch.setattr(backend, "_PROBES", {})
    monkeypatch.setattr(backend, "_ACCEPTED_KINDS", set())
    x, y = torch.randn(4, 5), torch.randn(4, 5)
    fast = mlircap.compile(_atan2_graph)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        outs = [fast(x, y) for _ in range(2)]
    for out in outs:
        torch.testing.assert_close(out, _atan2_graph(x, y))
    text = "\n".join(str(w.message) for w in seen)
    line = inspect.getsourcelines(_atan2_graph)[1] + 2
    assert f"aten.atan2 at {__file__}:{line} (torch-mlir crashed on it)" in text, text
    assert "eagerly" not in text, text
    assert len(fast.graphs) >= 2 and all(g.fallback_reason is None and g.executable is not g.gm
                                         for g in fast.graphs), [g.fallback_reason for g in fast.graphs]


# -------------------------------------------------------------------- floating arange
# OpInfo arange bfloat16 #15 (found re-running the arange samples): arange(2.1, -2.9, -1.0,
# dtype=bfloat16) gave 0.09375 where eager gives 0.1001 (and float32 / float64 / float16 of
# fractional arguments were ulps off): the compiled form rounded start and step to the dtype
# first; eager computes start + step * i in its accumulate type, a vectorized part from a
# base rounded to the dtype. ranges.arange now folds eager's own values into a constant
# (up to 2^14 elements; larger ones run through torch: 'numerics'); integer values the dtype
# holds exactly compile as before.
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("args", [(2.1, -2.9, -1.0), (0.0, 1.0, 0.1), (-1.3, 70.9, 0.7), (1, 1000, 3),
                                  (0, 10000), (0, 40, 1)])
def test_floating_arange_is_eagers(fallback_log, dtype, args):
    def f(x):
        return torch.arange(*args, dtype=dtype) * x

    check_compiled(f, (torch.ones((), dtype=dtype),), fallback_log, calls=2)


def test_large_fractional_arange_runs_through_torch():
    def f(x):
        return torch.arange(0.1, 3000.1, 0.1, dtype=torch.float32) + x

    x = torch.zeros(())
    fast = mlircap.compile(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            got = fast(x)
    assert torch.equal(got, f(x))
