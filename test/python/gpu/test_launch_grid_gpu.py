"""Grid-stride (pointwise) kernels launch one wave: as many blocks as the device holds at once
for their register and shared-memory use (cuOccupancyMaxActiveBlocksPerMultiprocessor), at most
the plan's grid; their loops stride by the launched grid, so every element is still computed.
Before, the plan's 8 blocks per SM were launched whatever ptxas gave the kernel: a 38-register
kernel fits 6, and the 2 left per SM ran their whole share after the first wave."""
import pytest
import torch
import torch.nn.functional as F

import mlircap
from mlircap.runtime.schema import KernelStep

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


def _swiglu(a, b):
    return F.silu(a) * b


def _gelu_bias(x, b):
    return F.gelu(x + b)


@pytest.mark.parametrize("fn,dtype", [(_swiglu, torch.bfloat16), (_gelu_bias, torch.float32),
                                      (_swiglu, torch.float32)])
def test_grid_stride_kernels_launch_one_wave(fn, dtype):
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(2048, 4096, device="cuda", dtype=dtype, generator=g)
    b = torch.randn(2048, 4096, device="cuda", dtype=dtype, generator=g) if fn is _swiglu else \
        torch.randn(4096, device="cuda", dtype=dtype, generator=g)
    fast = mlircap.compile(fn)
    for _ in range(3):
        torch.testing.assert_close(fast(a, b), fn(a, b), rtol=2e-2 if dtype == torch.bfloat16 else 1e-5,
                                   atol=2e-2 if dtype == torch.bfloat16 else 1e-5)
    (graph,) = fast.graphs
    ex = graph.executable
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    kernels = [s for s in ex.plan.steps if isinstance(s, KernelStep)]
    assert kernels and len(kernels) == len(ex.launch_grids)
    strided = 0
    for step, grid in zip(kernels, ex.launch_grids):
        if not step.grid_stride:
            assert list(grid) == list(step.grid)
            continue
        strided += 1
        assert grid[0] <= step.grid[0]
        assert grid[0] == step.grid[0] or grid[0] % sms == 0, (step.name, grid, step.grid, sms)
    assert strided >= 1
