"""NumPy arrays computed from tensors (capture/np_interop.py): `t.numpy()`, NumPy operations
and `torch.from_numpy` back are recorded into the graph; uses the graph cannot hold break
it with a guard.  Every test compares outputs, arguments and module state with eager over
several calls, including after mutating what the guards must catch.  Tensor values are
integers (rounded) so NumPy and torch compute them exactly."""
import numpy as np
import torch

from harness import run_program

XI = [torch.randint(-4, 5, (4, 4)).float() for _ in range(6)]


def test_numpy_postprocess_is_one_graph():
    """bench/capture.py numpy_postprocess: arithmetic, comparison, clip, abs, astype, sum,
    transpose, slicing, from_numpy / as_tensor / tensor(dtype) back: one graph, no break
    (an array returned is converted from the graph's output after it, as Dynamo does).
    Changing a Python attribute the NumPy code reads is caught (a new variant)."""
    c = run_program("""
import numpy as np
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = 2.0
        self.lo = -1.0
    def forward(self, x):
        y = self.fc(x).round()
        a = y.detach().numpy()
        b = np.clip(a * self.scale, self.lo, 6.0) + np.abs(a).T.T
        m = (a > 0).astype(np.float32).sum(axis=0)
        c = torch.from_numpy(b) + torch.as_tensor(m) + torch.tensor(a[1:3], dtype=torch.float64).sum()
        return c, y, -a.max(axis=1).astype(np.int64)
def make():
    return M()
def mutate(i, m):
    if i == 3:
        m.scale = 0.5
    if i == 4:
        m.lo = -2.0
""", [(x,) for x in XI], recompiles=2, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants) and len(c.variants) == 3


def test_numpy_result_returned_is_materialized():
    """An array returned to the caller of the captured function is produced at replay
    from the graph's output (`shadow.numpy()`, not a graph break), equal to eager's."""
    run_program("""
import numpy as np
def make():
    def f(x):
        a = (x * 2).numpy()
        return a + 1, x - 1
    return f
""", [(x,) for x in XI[:3]], recompiles=0, breaks=0)


def test_branch_on_numpy_value_breaks_with_a_guard():
    """`if a.sum() > 0` and `float(a.max())` on arrays from tensors: graph breaks whose
    results are guarded; the sign of the data alternates between calls."""
    xs = [XI[0].abs() + 1, -XI[1].abs() - 1, XI[2].abs() + 1, -XI[3].abs() - 1]
    c = run_program("""
import numpy as np
def make():
    def f(x):
        a = x.numpy()
        if a.sum() > 0:
            return x * 2, float(a.max())
        return torch.from_numpy(np.abs(a)) - 1, 0.0
    return f
""", [(x,) for x in xs])
    assert len(c.variants) >= 2 and all(v.breaks for v in c.variants)
    assert "branch on a numpy bool scalar" in c.variants[0].breaks[0][0]


def test_array_through_helper_function_and_c_callback():
    """A traced helper returning an array keeps it tracked (no break); an array value
    returned to C code (`sorted(key=...)`) is materialized first, so the order sorted
    decides is guarded: calls with another order re-record."""
    run_program("""
import numpy as np
def helper(arr, k):
    return np.maximum(arr * k, 0.0)
def make():
    def f(x):
        b = helper(x.numpy(), 2.0)
        return torch.from_numpy(b) + 1
    return f
""", [(x,) for x in XI[:3]], recompiles=0, breaks=0)
    xs = [torch.tensor([[1.0], [2.0], [3.0]]), torch.tensor([[3.0], [2.0], [1.0]]), torch.tensor([[2.0], [3.0], [1.0]]),
          torch.tensor([[1.0], [2.0], [3.0]])]
    c = run_program("""
def make():
    def f(x):
        order = sorted(range(3), key=lambda i: x[i].numpy().sum())
        return x[order[0]] * 2
    return f
""", [(x,) for x in xs])
    assert not any(v.eager for v in c.variants)


def test_tensor_from_guarded_numpy_array():
    """torch.from_numpy / as_tensor / tensor of an array argument or a module-level table
    (guarded by contents): a graph input made from the same array at replay (from_numpy
    shares its memory, as in eager).  Writing into the table between calls is caught."""
    run_program("""
import numpy as np
T = np.linspace(0, 1, 16, dtype=np.float32).reshape(4, 4)
def make():
    def f(x, arr):
        return x + torch.from_numpy(T) + torch.as_tensor(arr) * torch.tensor(arr, dtype=torch.float64)
    return f
def mutate(i, m):
    if i == 2:
        T[0, 0] = 5.0
""", [(x, np.full((4, 4), float(i), np.float32)) for i, x in enumerate(XI[:4])], breaks=0)


def test_writes_into_arrays_of_tensors_stay_eager():
    """`a = x.numpy(); a[0] = 0` writes into x through NumPy: capture gives up (the
    argument is mutated exactly as eager)."""
    run_program("""
def make():
    def f(x):
        a = x.numpy()
        a[0] = 0.0
        return x * 2
    return f
""", [(x,) for x in XI[:3]], allow_eager=True)


def test_numpy_scalars_as_torch_arguments():
    """NumPy scalars (np.float64 attributes, np.sqrt of a shape, np.int64 slice bounds,
    np.float32 factors) as arguments of torch operations are the Python numbers they hold,
    except where torch infers a dtype from them (torch.tensor(np.float64) is float64):
    outputs and dtypes as eager's; the np.float64 attribute, which changes, multiplies a
    tensor: a graph input (flows.py), so the new value does not recompile."""
    run_program("""
import numpy as np
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.scale = np.sqrt(4.0)
        self.k = np.int64(2)
    def forward(self, x):
        y = (self.fc(x) * self.scale / np.sqrt(x.shape[-1])).round()
        y = y[:, :self.k] * np.float32(2.0)
        z = torch.tensor(np.float64(0.25)) + torch.full((2,), np.float32(0.5)) + torch.tensor(np.int64(3))
        return torch.clamp(y, min=np.float64(-1.0)), z
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.scale = np.float64(3.0)
""", [(x,) for x in XI[:4]], recompiles=0, breaks=0)


def test_numpy_random_state_draw_is_one_break():
    """`if self.rng.rand() < 0.5` with a NumPy RandomState after a graph operation: the draw
    is replayed before the graph (no graph break, graph.py _hoisted_step), the branch it
    takes guarded, the same draws as eager over several calls."""
    c = run_program("""
import numpy as np
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.rng = np.random.RandomState(0)
    def forward(self, x):
        y = self.fc(x)
        if self.rng.rand() < 0.5:
            y = y.flip(-1)
        return y
def make():
    return M()
def state(m):
    return m.rng.randint(1 << 30)
""", [(x,) for x in XI[:5]])
    assert all(len(v.breaks) == 0 and len(v.graphs) == 1 for v in c.variants)


def test_numpy_reading_a_tensor_through_untraced_code_is_not_tracked():
    """`np.float32(x.sum())` and `np.sqrt(x)`: NumPy's C code reads the tensor through
    Tensor.__array__ (untraced): not a pure NumPy call, and the array made there is not
    tracked; the data-dependent branch gives eager's results on both signs."""
    xs = [XI[0].abs() + 1, -XI[1].abs() - 1, XI[2].abs() + 1]
    run_program("""
import numpy as np
def make():
    def f(x):
        s = np.float32(x.sum())
        if s > 0:
            return x * 2 + torch.from_numpy(np.sqrt(x.abs().numpy()))
        return x - 1
    return f
""", [(x,) for x in xs], allow_eager=True)


def test_numpy_operations_writing_into_arrays():
    """NumPy operations that write into an array (`out=`, `b.sort()`, `np.copyto`) are
    not translated: the translation ran after NumPy and wrote a second time into the tensor
    the array shares memory with (x + 2 for np.add(a, 1, out=a)).  They run as NumPy at
    replay (a break), the array's shadow follows what NumPy wrote, later operations on it
    are recorded again; arguments and outputs as eager's."""
    run_program("""
import numpy as np
def make():
    def f(x):
        a = x.numpy()
        np.add(a, 1, out=a)
        return x * 2
    return f
""", [(x,) for x in XI[:3]])
    c = run_program("""
import numpy as np
def make():
    def f(x):
        b = (x * 1).numpy() * 2
        b.sort(axis=-1)
        c = b + 1
        if c.sum() > 1e9:
            return x
        return torch.from_numpy(c) * 2, torch.from_numpy(b)
    return f
""", [(x,) for x in XI[:4]])
    assert c.stats.replays >= 1 and not any(v.eager for v in c.variants)
