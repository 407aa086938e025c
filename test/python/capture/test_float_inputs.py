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


# --------------------------------------------------------------------------------------
# floats that reach the graph through a variable, an attribute, a NumPy scalar, .item()

def test_float_in_a_variable_is_an_input():
    """A float stored into a variable (`s = t * 2.0`, `s = t.item()`, `s = float(...)`) is
    followed again where the variable is loaded: one variant over new values."""
    run_program("""
def make():
    def f(x, t, u):
        s = t * 2.0
        r = u.item()
        y = x * s
        z = s * y - r * x          # loaded twice, each use an input
        return y + z
    return f
""", [(_x(i), 0.1 * i + 0.05, torch.tensor(0.3 * i - 1.0)) for i in range(5)], recompiles=0)


def test_float_variable_needed_by_value_is_guarded():
    """A variable that holds a followed float and is returned, read through locals(), or
    handed to an operation that is not + - * / of a floating tensor: guarded by value."""
    for body, calls in (
        ("s = t * 2.0\n        return x * s, {s: 0}", 3),   # (a dict's key; [s] is followed: test_capture25)
        ("s = t * 2.0\n        y = x * s\n        return y + x // s", 3),
        ("s = t * 2.0\n        y = x * s\n        return y + x.long() * s", 3),
        ("s = t * 2.0\n        return x * locals()['s']", 3),
        ("s = t.item()\n        y = x * s\n        return y, {s: 0}", 3),
    ):
        run_program(f"""
def make():
    def f(x, t):
        {body}
    return f
""", [(_x(i), 0.25 * i + 0.5) if "item" not in body else (_x(i), torch.tensor(0.25 * i + 0.5))
            for i in range(calls)], recompiles=calls - 1)


def test_variable_rebound_to_a_constant_is_not_followed():
    """`s = t * 2.0` then `s = 0.5`: the variable holds another object, a constant."""
    run_program("""
def make():
    def f(x, t):
        s = t * 2.0
        y = x * s
        s = 0.5
        return y + x * s
    return f
""", [(_x(i), 0.1 * i + 0.2) for i in range(4)], recompiles=0)


def test_float_argument_used_twice_once_by_value():
    """`x * s` takes s as a graph input; `x // s` (floor division, not a scalar-input
    operator) needs its value: guarded, so a new value recompiles and every result is
    eager's (a value guard on the first use alone let the second one keep a stale constant)."""
    for expr in ("x * s + x // s", "x * s + x.long() * s", "x * s + x % s", "(x * s, {s: 0})"):
        run_program(f"""
def make():
    def f(x, s):
        return {expr}
    return f
""", [(_x(i), v) for i, v in enumerate((0.7, 0.8, 0.3))], recompiles=2)


def test_numpy_float32_argument():
    run_program("""
def make():
    def f(x, s):
        return x * s + (s - 1) * x.cos()
    return f
""", [(_x(i), np.float32(0.25 * i + 0.1)) for i in range(4)], recompiles=0)


def test_float_attribute_changed_between_calls_is_an_input():
    """`self.scale` (a module's float attribute) and `self.cfg.temperature` (a plain
    object's) set between calls (a schedule): graph inputs, read by the replay, no
    recompile; a branch on another float attribute is guarded by the branch it takes."""
    run_program("""
class Cfg:
    def __init__(self):
        self.temperature = 1.0
        self.threshold = 0.5
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 0.5
        self.cfg = Cfg()
    def forward(self, x):
        y = self.fc(x) * self.scale / self.cfg.temperature
        if self.cfg.threshold > 0.25:
            y = y.relu()
        return y * (1.0 - self.scale)
def make():
    return M()
def mutate(i, m):
    m.scale = 0.5 + 0.1 * i
    m.cfg.temperature = 1.0 + 0.5 * i
    if i == 3:
        m.cfg.threshold = 0.1
""", [(_x(i),) for i in range(5)], recompiles=1)


def test_float_attribute_read_before_a_break_is_guarded():
    """`s = self.scale`, then an uncapturable call that writes self.scale (print's file),
    then `x * s`: the replay cannot read s's value again after the call, so s is guarded by
    the value read (a new variant per value, each call's result eager's)."""
    run_program("""
class Sink:
    def __init__(self):
        self.m = None
    def write(self, s):
        if self.m is not None:
            self.m.scale = self.m.scale + 1.0
    def flush(self):
        pass
SINK = Sink()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5
        SINK.m = self
    def forward(self, x):
        s = self.scale
        print("step", file=SINK)
        return x * s
def make():
    return M()
""", [(_x(i),) for i in range(4)], recompiles=3)


def test_float_attribute_written_by_the_function_is_replayed_as_its_expression():
    """`self.momentum = self.momentum * 0.9`: the value written is computed from the
    attribute; the replayed write is that expression of the value at the call
    (flow_writes.py, test_float_writeback.py), so it needs no guard and does not recompile."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.momentum = 0.5
    def forward(self, x):
        m = self.momentum
        self.momentum = m * 0.9
        return x * m
def make():
    return M()
""", [(_x(i),) for i in range(4)], recompiles=0)


def test_pure_numeric_functions_and_clamp_bounds():
    """`max(m, 1e-6)`, `math.sqrt(d)`, `float(x.std())` as clamp bounds: expressions of
    the followed numbers, the graph's inputs; one variant over new values."""
    run_program("""
import math
def make():
    def f(x, d):
        m = x.abs().max().item()
        y = x / max(m, 1e-6) * (1.0 / math.sqrt(d))
        s = float(y.std())
        return y.clamp(-3 * s, max=3 * s) + torch.clamp(x, min=-s)
    return f
""", [(_x(i), 2.0 + i) for i in range(5)], recompiles=0)


def test_returned_float_is_its_expression():
    """`return y, lam` / `return {"loss": ..., "r": r}` / `return r`: a followed float the
    function returns is returned as its replay expression (a draw, an argument, `t.item()`),
    not as the value of the recording, so it needs no guard: one variant."""
    run_program("""
import numpy as np
RS = np.random.RandomState(0)
def make():
    def f(x, t, s):
        lam = RS.beta(0.4, 0.4)
        x = lam * x + (1 - lam) * x[torch.randperm(x.shape[0])]
        r = t.item()
        return {"y": x * r, "lam": lam, "r": r * s}
    return f
def state(f):
    return RS.get_state()[1].tolist()
""", [(_x(i), torch.tensor(0.5 + i), 0.25 * i) for i in range(4)], recompiles=0)
    run_program("""
def make():
    def f(x, s):
        return x * s, s * 2.0
    return f
""", [(_x(i), 0.25 * i) for i in range(4)], recompiles=0)
    run_program("""
def make():
    def f(x, t):
        r = t.item()
        y = x * r
        return r
    return f
""", [(_x(i), torch.tensor(0.5 + i)) for i in range(4)], recompiles=0)


def test_returned_attribute_float_is_the_value_at_the_start():
    """A float attribute returned after the function rebinds it: the replay evaluates the
    return after its writes, so it returns the attribute as bound when the replay starts
    (flows._flow_returned), the value eager returns; no guard (before: guarded by value)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 0.5
    def forward(self, x):
        s = self.scale
        self.scale = 2.0
        return x * s, s
def make():
    return M()
def mutate(i, m):
    m.scale = 0.5 + i
""", [(_x(i),) for i in range(3)], recompiles=0)


def test_float_attribute_also_read_reflectively_is_guarded():
    """`x * self.tau + x * getattr(self, "tau")`: the LOAD_ATTR read is followed (a graph
    input), the getattr read's value is used as it is: the attribute must be guarded by
    value (it was not: the second read found the expression already read and added no
    guard, and a new tau gave a stale result).  Read as an item of the instance dict
    (`vars(self)["tau"]`, `self.__dict__.get("tau")`) it is followed as a dict item
    (flow_roots._flow_item): a graph input too, no recompile."""
    for use, recompiles in (('getattr(self, "tau")', 3), ('vars(self)["tau"]', 0), ('self.__dict__.get("tau")', 0)):
        run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.tau = 1.0
    def forward(self, x):
        return x * self.tau + x * USE
def make():
    return M()
def mutate(i, m):
    m.tau = 1.0 + i
""".replace("USE", use), [(_x(i),) for i in range(4)], recompiles=recompiles)


def test_float_times_a_0d_tensor_is_an_input():
    """`loss * self.alpha` with loss a 0-d float32 tensor: a 0-d float64 input would promote
    the result to float64 (a Python float does not), so the input is a 0-d float32 tensor
    (scalar_inputs._f32_scalar_tensor); float64 0-d operands take a float64 one.  A 0-d
    float16 operand computes with the float at a higher precision than its own: the value
    stays a constant, guarded (a recompile per value)."""
    for dtype, recompiles in ((torch.float32, 0), (torch.float64, 0), (torch.float16, 3)):
        run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.alpha = 0.3
    def forward(self, x):
        loss = x.to({dtype}).pow(2).mean()
        return loss * self.alpha + (1 - self.alpha) * loss.sqrt(), loss / 2 * self.alpha
def make():
    return M()
def mutate(i, m):
    m.alpha = 0.3 + 0.1 * i
""", [(_x(i),) for i in range(4)], recompiles=recompiles, graphs=1 if recompiles == 0 else None)


def test_scalar_input_tensors_are_shared_by_equal_values():
    """A number that keeps its value is passed as the same read-only tensor (no tensor, and on
    CUDA no fill kernel, per call); -0.0 and 0.0, float and int, and devices stay apart; NaN
    is made anew each time."""
    from mlircap.capture.scalar_inputs import _f32_scalar_tensor, _int_scalar_tensor, _scalar_tensor

    a, b = _scalar_tensor(1e-6), _scalar_tensor(1e-6)
    assert a is b and a.dtype == torch.float64 and a.item() == 1e-6
    neg, pos = _scalar_tensor(-0.0), _scalar_tensor(0.0)
    assert neg is not pos and str(neg.item()) == "-0.0" and str(pos.item()) == "0.0"
    assert _int_scalar_tensor(1) is not _scalar_tensor(1.0) and _int_scalar_tensor(1).dtype == torch.int64
    assert _f32_scalar_tensor(0.1).dtype == torch.float32 and _f32_scalar_tensor(0.1) is not _scalar_tensor(0.1)
    n1, n2 = _scalar_tensor(float("nan")), _scalar_tensor(float("nan"))
    assert n1 is not n2 and n1.isnan() and n2.isnan()
    with torch.inference_mode():
        c = _scalar_tensor(2.5e-3)
    assert not c.is_inference() and _scalar_tensor(2.5e-3) is c


def test_float_argument_sign_of_zero_reaches_the_graph():
    """A float argument that feeds arithmetic (a graph input) changes between 0.0 and -0.0:
    the shared scalar tensors must not mix them up (1 / (|x| * 0.0) is +inf, with -0.0 -inf)."""
    run_program("""
def make():
    def f(x, s):
        return 1 / (x.abs() * s) + x
    return f
""", [(_x(i), v) for i, v in enumerate((0.0, -0.0, 0.0, 2.0, -0.0))], recompiles=0, graphs=1)
