"""BatchNorm in train mode on CUDA with CUDA graphs: the running statistics the graph writes
come out of the replay without a clone each (backend._hoist_input_copies marks them transient)
and go back into the module's buffers with one foreach copy per dtype; values and buffers
against eager over several calls."""
import pytest
import torch
from torch.profiler import ProfilerActivity, profile

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


def _net():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16), torch.nn.ReLU(),
                               torch.nn.Conv2d(16, 16, 3, padding=1), torch.nn.BatchNorm2d(16)).cuda().train()


def test_batchnorm_train_cuda_graph_writes_buffers_without_clones(monkeypatch):
    monkeypatch.setenv("MLIRCAP_CUDA_GRAPHS", "1")
    torch.manual_seed(0)
    mine, ref = _net(), _net()
    ref.load_state_dict(mine.state_dict())
    fast = mlircap.compile(mine)
    g = torch.Generator(device="cuda").manual_seed(0)
    with torch.no_grad():
        for i in range(6):
            x = torch.randn(8, 3, 16, 16, device="cuda", generator=g)
            if i == 5:
                with profile(activities=[ProfilerActivity.CPU]) as p:
                    got = fast(x)
                names = [e.name for e in p.events()]
            else:
                got = fast(x)
            torch.testing.assert_close(got, ref(x), rtol=1e-4, atol=1e-4)
    for (k, a), b in zip(mine.state_dict().items(), ref.state_dict().values()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, msg=k)
    ex = fast.explain()
    assert ex.graph_count == 1 and not ex.eager_reasons, str(ex)
    exe = fast.graphs[0].executable
    assert type(exe).__name__ == "GpuExecutable" and exe._graph is not None
    # nine written buffers: none cloned out of the graph, two foreach copies (float32, int64)
    assert names.count("aten::clone") <= 1, [n for n in names if "clone" in n or "copy" in n]
    assert names.count("aten::_foreach_copy_") == 2, sorted(set(names))
