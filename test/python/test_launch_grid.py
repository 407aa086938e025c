"""The CUDA runtime's launch grid of a grid-stride kernel (runtime/cuda.py _launch_grid), off the
GPU: one wave (blocks per SM from the occupancy query x SMs) at most the plan's grid; the plan's
grid where the query is missing (any grid is correct for such a kernel); other kernels as planned."""
import types

import torch

from mlircap.runtime.cuda import GpuExecutable
from mlircap.runtime.schema import KernelStep


def _exe(per_sm):
    ex = GpuExecutable.__new__(GpuExecutable)
    ex.device = torch.device("cuda", 0)

    def query(fn, block, smem):
        if per_sm is None:
            raise AttributeError("no cuda_blocks_per_sm")
        assert block == 256 and smem == 0
        return per_sm
    ex._core = types.SimpleNamespace(cuda_blocks_per_sm=query)
    return ex


def _step(grid, grid_stride=True):
    return KernelStep(name="k", grid=(grid, 1, 1), block=(256, 1, 1), args=(), grid_stride=grid_stride)


def test_launch_grid(monkeypatch):
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda d: types.SimpleNamespace(multi_processor_count=132))
    assert _exe(6)._launch_grid(_step(1056), fn=0) == [792, 1, 1]      # 6 blocks/SM fit: one wave
    assert _exe(8)._launch_grid(_step(1056), fn=0) == [1056, 1, 1]     # all fit: the plan's grid
    assert _exe(6)._launch_grid(_step(40), fn=0) == [40, 1, 1]         # small work: never more blocks
    assert _exe(6)._launch_grid(_step(1056, grid_stride=False), fn=0) == [1056, 1, 1]   # a row kernel
    assert _exe(None)._launch_grid(_step(1056), fn=0) == [1056, 1, 1]  # no query: the plan's grid
    assert _exe(0)._launch_grid(_step(1056), fn=0) == [1056, 1, 1]     # a query of 0 is ignored
