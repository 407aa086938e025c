"""Floats that change from call to call (a float argument, a Python or NumPy random draw)
and reach tensor arithmetic (`x * s`, `(1 - r) * x`, `logits / t`) are inputs of the graph
(a 0-d float64 tensor made from the replay's own value), not constants guarded by value:
a new value does not recompile.  Where the program needs the value itself (a branch on it,
a call that is not replayed with it, a return value, an integer tensor whose result dtype
it changes, locals()), it is guarded as before.  Every call is compared with eager (outputs,
module state, the RNG states)."""
import numpy as np
import torch

from harness import run_program


def _x(i):
    torch.manual_seed(i)
    return torch.randn(3, 4)


def test_float_argument_in_arithmetic_is_an_input():
    run_program("""
def make():
    def f(x, s, t=0.5):
        return (1 - s) * x + s * x.sin() - x / t
    return f
""", [(_x(i), 0.1 * i + 0.05, 0.3 + i) for i in range(6)], recompiles=0, graphs=1)


def test_float_argument_needed_by_value_is_guarded():
    run_program("""
def make():
    def f(x, s):
        y = x * s                       # an input ...
        if s > 0.5:                     # ... and a branch: guarded by the branch it takes
            y = y + 1
        return y
    return f
""", [(_x(i), v) for i, v in enumerate((0.7, 0.8, 0.2, 0.9, 0.1))], recompiles=1)
    run_program("""
def make():
    def f(x, s):
        return x * s, torch.full_like(x, s), s   # full_like and the return take the value
    return f
""", [(_x(i), v) for i, v in enumerate((0.7, 0.8, 0.7))], recompiles=1)
    run_program("""
def make():
    def f(x, s):
        return x.long() * s                  # float32 (default dtype), not float64: a constant
    return f
""", [(_x(i), v) for i, v in enumerate((0.7, 0.8, 0.7))], recompiles=1)
    run_program("""
def make():
    def f(x, s):
        return x * locals()["s"]
    return f
""", [(_x(i), v) for i, v in enumerate((0.7, 0.8, 0.7))], recompiles=1)


def test_numpy_float64_argument():
    run_program("""
def make():
    def f(x, s):
        return x * s + 1
    return f
""", [(_x(i), np.float64(0.25 * i)) for i in range(4)], recompiles=0)


def test_random_draws_in_arithmetic_are_inputs():
    """random.random(), random.uniform() (traced random.py code returning its result),
    a NumPy RandomState's draws: one variant over calls with new draws."""
    run_program("""
import random
import numpy as np
RNG = random.Random(3)
RS = np.random.RandomState(4)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        x = x * RNG.random() + (1 - RNG.uniform(0.5, 1.5)) * x.cos()
        x = x * RS.uniform(0.9, 1.1) + RS.rand() * x
        return self.fc(x)
def make():
    return M()
def state(m):
    return RNG.getstate(), RS.get_state()[1].tolist(), RS.get_state()[2]
""", [(_x(i),) for i in range(5)], recompiles=0)   # (each draw is a step between graphs)


def test_inference_mode_forward_with_float_argument():
    """The 0-d input is a normal tensor also under @torch.inference_mode() (graphs read
    their inputs' version counters)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
    @torch.inference_mode()
    def forward(self, x, scale=2.0):
        return self.fc(x) * scale
def make():
    return M()
""", [(_x(0),), ((_x(1), 3.0), {}), ((_x(2), 0.5), {})], recompiles=0, graphs=1)


def test_float_input_through_the_compiler():
    """mlircap.compile: the 0-d float64 input through aot_autograd and the compiler, one
    variant for every value, results equal eager's."""
    import mlircap

    def f(x, s):
        return torch.relu(x * s + (1 - s) * x.sin()) / s

    fast = mlircap.compile(f)
    for i, s in enumerate((0.5, 0.25, 1.5, 3.0)):
        x = _x(i)
        torch.testing.assert_close(fast(x, s), f(x, s), rtol=1e-5, atol=1e-6)
    assert fast.explain().graph_count == 1
