"""Functions compiled with @torch.jit.script called from captured code (fused activations in
older public model code: Megatron's bias_gelu, ...).  TorchScript runs their ops where no torch
function mode sees them, so the result was a tensor of unknown origin and capture gave up
(bench/capture2.py jit_scripted_helper).  The tracer calls the Python function torch keeps for
Dynamo (`_torchdynamo_inline`) instead, traced into the graph like any helper.
(TorchScript needs the functions' source file: they are defined here, not by run_program.)"""
import copy
import warnings

import torch
import torch.nn as nn

from harness import EAGER, same
from mlircap.capture import capture


@torch.jit.script
def bias_gelu(bias: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x = bias + y
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


@torch.jit.script
def swish(x: torch.Tensor, beta: float) -> torch.Tensor:
    if beta == 1.0:
        return x * torch.sigmoid(x)
    return x * torch.sigmoid(beta * x)


class FusedBiasGelu(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8, bias=False)
        self.b = nn.Parameter(torch.randn(8))

    def forward(self, x):
        return bias_gelu(self.b, self.fc(x)).sum(-1)


def _swishes(x):
    return swish(x, 1.0) + swish(x * 2, 1.5)


def _check(fn, ref):
    fast = capture(fn, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # capture giving up warns
        for i in range(3):
            x = torch.randn(4, 8)
            same(fast(x), ref(x), f"call {i}")
    c = fast._mlircap_capture
    assert c.graph_count == 1 and c.recompiles == 0 and c.stats.replays == 2
    assert not any(v.eager or v.breaks for v in c.variants), [(v.reason, v.breaks) for v in c.variants]


def test_scripted_activation_in_forward():
    torch.manual_seed(0)
    ref = FusedBiasGelu()
    _check(copy.deepcopy(ref), ref)


def test_scripted_function_with_control_flow_and_float_argument():
    """A scripted function branching on a Python float argument, called with two values."""
    _check(_swishes, _swishes)
