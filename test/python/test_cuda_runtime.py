"""Host-side logic of the CUDA runtime that runs without a GPU: which inputs a
CUDA graph replay may use in place (runtime/cuda.py _StaticInputs, shared by
GpuExecutable and WholeGraph)."""
import torch

from mlircap.runtime.cuda import GpuExecutable, WholeGraph, _StaticInputs


def test_static_inputs_replay_check_and_moved_inputs():
    class Graph(_StaticInputs):
        def __init__(self):
            self._unstable = set()

    w, b, x = torch.randn(3), torch.randn(3), torch.randn(3)
    g = Graph()
    g._set_static([w, x, b], [0, 2])   # parameters in place, x copied in
    assert g._static_match([w, torch.randn(3), b])
    moved = torch.randn(3)
    assert not g._static_match([moved, x, b])
    g._note_moved([moved, x, b])
    assert g._unstable == {0}
    assert not g._static_match([w.to(torch.float64), x, b])   # same index, other dtype
    for cls in (GpuExecutable, WholeGraph):
        assert issubclass(cls, _StaticInputs)
