"""Lazy modules (nn.LazyLinear, nn.LazyConv2d, ...) infer their parameters' shapes on the
first call in a forward pre-hook (LazyModuleMixin._infer_parameters) that materializes them
and initializes them in place.  The recording runs that hook as it is, unrecorded (as Dynamo
runs it before tracing), and records the call after it; before, it recorded the
initialization's ops on uninitialized parameters and gave up on the first call
(bench/capture2.py lazy_linear_model)."""
import torch

from harness import run_program

X = [torch.randn(4, 6) for _ in range(4)]


def test_lazy_linear_in_sequential():
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.LazyLinear(8), nn.ReLU(), nn.LazyLinear(3))
    def forward(self, x):
        return self.body(x)
def make():
    return M()
def state(m):
    return [type(l).__name__ for l in m.body]
""", [(x,) for x in X], breaks=0)
    assert c.stats.replays >= 2


def test_lazy_conv_and_batchnorm_attributes_train():
    """A lazy conv and a lazy batch norm held as attributes, in train mode (the batch norm's
    running statistics are buffers made by the hook too)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.LazyConv2d(4, 3, padding=1)
        self.bn = nn.LazyBatchNorm2d()
    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))
def make():
    return M()
""", [(torch.randn(2, 3, 5, 5),) for _ in range(4)], breaks=0)
