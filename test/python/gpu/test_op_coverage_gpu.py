"""test_op_coverage.py on CUDA: ops whose eager CUDA kernels compute otherwise than
the CPU's (linspace/logspace, max_pool2d backward) compile with eager's CUDA values,
bit for bit, and every graph compiles whole (no eager island)."""
import pytest
import torch

import mlircap
from mlircap import logs

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


@pytest.fixture
def compiled_whole(capsys, monkeypatch):
    monkeypatch.setattr(logs, "_enabled", logs._enabled | {"fallback"})

    def check(fn, *args):
        want = fn(*args)
        fast = mlircap.compile(fn)
        capsys.readouterr()
        for _ in range(3):   # records, compiled, CUDA-graph replay
            got = fast(*[a.clone() for a in args])
        err = capsys.readouterr().err
        assert got.device == want.device and got.dtype == want.dtype and got.shape == want.shape
        if want.is_floating_point():
            assert torch.equal(got.isnan(), want.isnan())
        assert torch.equal(torch.nan_to_num(got), torch.nan_to_num(want)), (got, want)
        assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)
        assert "eager islands" not in err and "no part of the graph compiled" not in err, err
        return got

    return check


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64,
                                   torch.bfloat16, torch.float16])
def test_constant_linspace_logspace_fold_to_eager_cuda_values(compiled_whole, dtype):
    # Endpoints known when the graph is traced: eager's CUDA kernel (which rounds
    # otherwise than the CPU's) evaluates the range then, on the GPU.
    x = torch.zeros((), dtype=dtype, device="cuda")
    hi = 255 if dtype == torch.uint8 else 100
    for start, end, steps in ((4.3, -3 if dtype != torch.uint8 else 3, 50), (0, hi, 37), (50, 50, 7),
                              (2.5, hi, 1), (0, 1, 0)):
        compiled_whole(lambda x: torch.linspace(start, end, steps, dtype=dtype, device="cuda") + x, x)
        compiled_whole(lambda x: torch.logspace(start / 30, end / 60, steps, 2.0, dtype=dtype, device="cuda") + x,
                       x)


_POOLS = [  # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 9, 9), 3, 2, 1, 1, False), ((2, 3, 9, 9), 3, 1, 1, 1, False),
    ((1, 2, 7, 8), (2, 3), (1, 2), (1, 1), (2, 1), True), ((3, 10, 10), 4, 1, 2, 1, True),
    ((2, 2, 6, 6), 5, 1, 2, 1, False), ((1, 1, 5, 5), 2, 3, 0, 1, True),
]


def _pair(v, n):
    return [v] * n if isinstance(v, int) else list(v)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", range(len(_POOLS)))
def test_max_pool2d_backward_compiles_like_eager_cuda(compiled_whole, dtype, case):
    # Overlapping windows and few distinct values: many windows pick the same element;
    # CUDA's kernel adds their gradients in window order in float32, rounds once.
    shape, k, s, p, d, ceil = _POOLS[case]
    g = torch.Generator().manual_seed(case)
    x = torch.randint(0, 3, shape, generator=g).to(dtype).cuda()
    _, idx = torch.nn.functional.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    grad = torch.randn(idx.shape, generator=g).to(dtype).cuda()
    args = (_pair(k, 2), _pair(s, 2), _pair(p, 2), _pair(d, 2), ceil)
    compiled_whole(lambda gr, x, i: torch.ops.aten.max_pool2d_with_indices_backward(gr, x, *args, i), grad, x, idx)


def test_max_pool2d_backward_low_precision_sums_in_float32_cuda(compiled_whole):
    x = torch.zeros(1, 1, 1, 9, dtype=torch.bfloat16, device="cuda")
    x[..., 4] = 10                                  # every window of 5 picks element 4
    grad = torch.tensor([[[[1.0, 2 ** -8, 2 ** -8, 2 ** -8, 2 ** -8]]]], dtype=torch.bfloat16, device="cuda")
    _, idx = torch.nn.functional.max_pool2d(x, (1, 5), 1, return_indices=True)
    got = compiled_whole(lambda gr, x, i: torch.ops.aten.max_pool2d_with_indices_backward(
        gr, x, [1, 5], [1, 1], [0, 0], [1, 1], False, i), grad, x, idx)
    assert got[..., 4].item() == 1.015625           # the CPU's bfloat16 sums give 1.0
