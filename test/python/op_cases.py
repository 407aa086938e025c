"""Inputs shared by test_op_coverage.py and gpu/test_op_coverage_gpu.py (imported
like simt.py: pytest puts test/python, the conftest's directory, on sys.path)."""
import torch

POOLS = [  # shape, kernel, stride, padding, dilation, ceil_mode
    ((2, 3, 9, 9), 3, 2, 1, 1, False), ((2, 3, 9, 9), 3, 1, 1, 1, False),
    ((1, 2, 7, 8), (2, 3), (1, 2), (1, 1), (2, 1), True), ((3, 10, 10), 4, 1, 2, 1, True),
    ((2, 2, 6, 6), 5, 1, 2, 1, False), ((1, 1, 5, 5), 2, 3, 0, 1, True),
]


def _pair(v, n):
    return [v] * n if isinstance(v, int) else list(v)


def max_pool2d_backward(case: int, dtype: torch.dtype, device: str):
    """(fn, grad, x, indices) for POOLS[case]: overlapping windows (stride < kernel)
    over inputs of few distinct values, so many windows pick the same element."""
    shape, k, s, p, d, ceil = POOLS[case]
    g = torch.Generator().manual_seed(case)
    x = torch.randint(0, 3, shape, generator=g).to(dtype).to(device)
    _, idx = torch.nn.functional.max_pool2d(x, k, s, p, d, ceil, return_indices=True)
    grad = torch.randn(idx.shape, generator=g).to(dtype).to(device)
    args = (_pair(k, 2), _pair(s, 2), _pair(p, 2), _pair(d, 2), ceil)
    return (lambda gr, x, i: torch.ops.aten.max_pool2d_with_indices_backward(gr, x, *args, i)), grad, x, idx
