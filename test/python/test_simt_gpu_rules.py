"""mlircap.compile(fn, device="cuda") of CPU tensors, the GPU path run by simt.py's interpreter
on a machine without a GPU, follows the CUDA device rules (target.py): the partition's islands,
bounds checks and the decompositions that reproduce one device's eager kernels read the
compile's target, not the tensors' device, so `bench/opinfo.py --device simt` falls back where
a GPU run falls back. The same program compiled for the CPU (device="auto") keeps the CPU's
rules."""
import re

import pytest
import simt  # test/python/simt.py
import torch

import mlircap
from mlircap import target


@pytest.fixture(scope="module", autouse=True)
def simt_gpu():
    import mlircap.runtime.cuda as cuda

    real = cuda.GpuExecutable
    simt.install_simt_gpu()
    yield
    cuda.GpuExecutable = real


def test_device_type_follows_the_named_target():
    x = torch.ones(2)
    assert target.device_type(x) == "cpu" and target.current() is None
    with target.targeting("cuda"):
        assert target.device_type(x) == "cuda" and target.device_type("cpu") == "cuda"
        assert target.device_type(torch.empty(2, device="meta")) == "meta"   # (only the CPU's is renamed)
    with target.targeting("auto"):
        assert target.device_type(x) == "cpu" and target.current() is None
    assert target.current() is None


def _islands(fn, args, device, log):
    """The eager islands of `fn` compiled for `device` (its values checked against eager's)."""
    want = fn(*args)
    c = mlircap.compile(fn, device=device)
    log.readouterr()
    for _ in range(2):
        got = c(*args)
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert c.graphs and all(g.fallback_reason is None for g in c.graphs), [g.fallback_reason for g in c.graphs]
    if device == "cuda":
        assert any(type(g.executable).__name__ == "SimtExecutable" for g in c.graphs)
    return log.readouterr().err


def _x(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def test_index_op_is_an_island_for_cuda(fallback_log):
    """An index op whose indices come from an input: the CPU bounds-checks it and compiles it
    (bounds.py); CUDA has no bounds checks (MLIRCAP_GPU_BOUNDS_CHECKS off) and runs it through
    torch, the rest compiled (OpInfo scatter_reduce on the H100: 'eager islands: scatter_reduce
    (index)', where the SIMT path compiled it)."""
    idx = torch.tensor([[0, 2, 1], [3, 0, 0]])

    def fn(x, i, s):
        return x.scatter_reduce(0, i, s, "amax") * 2 + 1

    args = (_x(4, 3), idx, _x(2, 3, seed=1))
    assert re.search(r"eager islands: .*scatter_reduce", _islands(fn, args, "cuda", fallback_log))
    assert "eager islands" not in _islands(fn, args, "auto", fallback_log)


def test_integer_linspace_of_a_tensor_endpoint_is_an_island_for_cuda(fallback_log):
    """Integer linspace with a tensor endpoint: the CPU follows eager's CPU kernel (ranges.py's
    rewrite with an error flag); eager's CUDA kernel computes otherwise, so for CUDA the op runs
    through torch (partition._CUDA_EAGER_NUMERICS; OpInfo linspace.tensor_overload int64 on the
    H100: 'eager islands: linspace (numerics)')."""
    def fn(s, x):
        return torch.linspace(s, 40, 7, dtype=torch.int64) + x

    args = (torch.tensor(-3), torch.arange(7))
    assert re.search(r"eager islands: .*linspace", _islands(fn, args, "cuda", fallback_log))
    assert "eager islands" not in _islands(fn, args, "auto", fallback_log)


@pytest.mark.parametrize("reduce", ["amax", "amin", "sum", "prod", "mean"])
def test_integer_scatter_reduce_compiles_for_cuda(reduce, fallback_log):
    """A reduction of integers at indices from an input is the same in any order, so for CUDA
    (whose eager kernel applies the writes in no set order) it compiles as on the CPU, its
    indices checked (torch._assert_async, eager's device-side assert): scatter.cuda_order_free.
    Duplicate indices included."""
    idx = torch.tensor([[0, 2, 1, 2], [3, 0, 0, 3]])

    def fn(x, i, s):
        return x.scatter_reduce(0, i, s, reduce, include_self=reduce != "amin") * 3 + 1

    args = (torch.arange(-8, 8, dtype=torch.int32).reshape(4, 4), idx,
            torch.tensor([[5, -7, 2, 9], [-3, 4, 6, -1]], dtype=torch.int32))
    assert "eager islands" not in _islands(fn, args, "cuda", fallback_log)


def test_integer_scatter_reduce_index_out_of_range_asserts_for_cuda():
    """The check is there: an index out of range reaches torch._assert_async (on the CPU
    tensors of the SIMT path it raises at once, as eager's CUDA kernel's device-side assert
    fails the call)."""
    def fn(x, i, s):
        return x.scatter_reduce(0, i, s, "amax") + 1

    x, s = torch.zeros(4, 2, dtype=torch.int64), torch.ones(2, 2, dtype=torch.int64)
    c = mlircap.compile(fn, device="cuda")
    ok = torch.tensor([[0, 1], [2, 3]])
    for _ in range(2):
        torch.testing.assert_close(c(x, ok, s), fn(x, ok, s))
    assert any(type(g.executable).__name__ == "SimtExecutable" for g in c.graphs)
    with pytest.raises(RuntimeError):
        c(x, torch.tensor([[0, 1], [4, 3]]), s)


def test_floating_scatter_add_stays_an_island_for_cuda(fallback_log):
    """A floating sum at indices rounds in the order CUDA's atomics land: an island there."""
    def fn(x, i, s):
        return x.scatter_add(0, i, s) * 2

    args = (_x(4, 3), torch.tensor([[0, 2, 1], [0, 0, 3]]), _x(2, 3, seed=1))
    assert re.search(r"eager islands: .*scatter_add", _islands(fn, args, "cuda", fallback_log))


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.uint8])
def test_integer_cumprod_compiles_for_cuda(dtype, fallback_log):
    """cumprod of integers (wrapping products, the same in any order: CUDA's parallel scan
    gives them too) compiles for CUDA as on the CPU (cumulative.py); a floating one keeps
    the island there (its scan rounds in another order than the CPU's kernel)."""
    def fn(x):
        return torch.cumprod(x, 1) * 2 + 1

    x = torch.tensor([[1, 2, -3, 4, 5, 7], [7, -1, 2, 2, 3, 9], [300, 5, 1 << 20, 3, 9, 4]]).to(dtype)
    assert "eager islands" not in _islands(fn, (x,), "cuda", fallback_log)


def test_floating_cumprod_stays_an_island_for_cuda(fallback_log):
    def fn(x):
        return torch.cumprod(x, 1) * 2

    with pytest.warns(UserWarning, match="aten.cumprod"):
        assert re.search(r"eager islands: .*cumprod", _islands(fn, (_x(3, 6),), "cuda", fallback_log))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_linspace_of_tensor_endpoints_compiles_for_cuda(dtype, fallback_log):
    """bfloat16/float16 linspace with tensor endpoints: CUDA's kernel takes the CPU kernel's
    steps in the same c10 arithmetic (the step and each product rounded to the dtype), so
    ranges._linspace_low is eager's there too and the op compiles; values bit for bit the
    CPU kernel's (OpInfo linspace.tensor_overload bfloat16 on the H100: an island)."""
    def fn(s, e, x):
        return torch.linspace(s, e, 37, dtype=dtype) * x

    args = (torch.tensor(-3.3), torch.tensor(17), torch.full((37,), 2.0, dtype=dtype))
    assert "eager islands" not in _islands(fn, args, "cuda", fallback_log)


def test_float32_histc_compiles_for_cuda(fallback_log):
    """histc of float32 with number bounds: CUDA's kernel places an element as the CPU's
    (float32 `(x - min) * bins / (max - min)`, truncated; the last bin holds max), so
    histogram.histc compiles for CUDA too; elements on the edges, outside and NaN included."""
    def fn(x):
        return torch.histc(x, bins=7, min=-1.5, max=2.0) * 2

    x = torch.cat([_x(60), torch.tensor([-1.5, 2.0, -1.0, 0.5, 2.5, -3.0, float("nan"), 1e-8, 1.0])])
    assert "eager islands" not in _islands(fn, (x,), "cuda", fallback_log)


def test_bfloat16_histc_stays_an_island_for_cuda(fallback_log):
    """bfloat16: CUDA computes the position in float32, the CPU's kernel (followed by
    histogram.histc) rounds every step: not compiled for CUDA."""
    def fn(x):
        return torch.histc(x, bins=5, min=-1.0, max=1.0) + 1

    with pytest.warns(UserWarning, match="aten.histc"):
        err = _islands(fn, (_x(40).to(torch.bfloat16),), "cuda", fallback_log)
    assert re.search(r"eager islands: .*histc", err)
