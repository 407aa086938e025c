"""Numbers read from tensors of the open graph (`t.item()`, `float(t)`, `int(t)`) are read
after it (deferred.py): the graph goes on past the read where the program needs the number
only after it (returned, written to an attribute, deciding a branch: a guard after the graph)
or needs it inside as a graph input the graph can compute exactly (`x / max(m, 1e-6)`,
`x.clamp(-3 * s, 3 * s)`: float64 ops on a copy of the value).  Each compiled call is compared
with eager (bit for bit), and the graph count is checked."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(4)] + [torch.zeros(4, 8), torch.randn(4, 8) * 100]


def test_scale_by_max_item_is_one_graph():
    """bench/capture.py scale_by_max_item: `x / max(m, 1e-6)` with m from .item(): before, a
    break after the max (2 graphs); the all-zero input takes the literal."""
    run_program("""
def make():
    def f(x):
        m = x.abs().max().item()
        return x / max(m, 1e-6)
    return f
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_clamp_by_std_float_is_one_graph():
    """bench/capture.py clamp_by_std_float: clamp bounds `-3 * s`, `3 * s` from float(x.std())."""
    run_program("""
def make():
    def f(x):
        s = float(x.std())
        return x.clamp(-3 * s, 3 * s) + 1
    return f
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_min_of_item_and_float32_operand():
    """`loss * min(1.0, 2 * r + 0.5)` with a 0-d float32 operand (the input rounded to float32
    as the operator rounds a Python float) and a float16 tensor's item."""
    run_program("""
def make():
    def f(x):
        r = x.half().mean().item()
        loss = x.sum()
        return loss * min(1.0, 2 * r + 0.5), x - (-r)
    return f
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_item_returned_and_written_to_attribute_after_the_graph():
    """Metrics returned in a dict and a running max written to a float attribute: the graph
    does not wait for them (one graph), the values are each call's own."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.amax = 0.0
    def forward(self, x):
        h = self.fc(x)
        self.amax = max(self.amax, h.abs().max().item())
        y = torch.relu(h) * 2
        return {"y": y, "loss": y.mean().item()}
def make():
    return M()
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_item_read_before_an_in_place_write_of_its_tensor():
    """The number is the value at the read, not after a later in-place write in the graph."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))
    def forward(self, x):
        v = self.buf[0].item()
        self.buf.add_(x.mean())
        return x * max(v, -1e9), v
def make():
    return M()
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_branch_on_item_flips_between_calls():
    """A branch decided by the number after the read (a guard after the graph): a call that
    takes the other side misses after the graph and records again; every call as eager."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
    def forward(self, x):
        m = x.mean().item()
        self.count.add_(1)
        y = x * 3
        if m > 0:
            y = y + 1
        return y.sum(0)
def make():
    return M()
""", [(x,) for x in [torch.ones(4, 8), -torch.ones(4, 8), torch.ones(4, 8), torch.randn(4, 8)]])


def test_python_division_by_the_number_raises_as_eager():
    """`1.0 / m` in Python raises ZeroDivisionError where a tensor division gives inf: not
    computed by the graph (a break as before), so the zero input raises as in eager."""
    run_program("""
def make():
    def f(x):
        m = x.abs().sum().item()
        return x * (1.0 / m)
    return f
""", [(x,) for x in X])


def test_int_from_item_as_a_size_that_grows():
    """`F.one_hot(idx, int(idx.max()) + 1)`: the count a constant of the graph, guarded after
    it; a larger index later would raise inside the recorded graph: a miss, recorded again."""
    run_program("""
def make():
    def f(idx, x):
        n = int(idx.max()) + 1
        return F.one_hot(idx, n).float().sum(0) + x.sum()
    return f
""", [(torch.tensor([0, 2, 1]), X[0]), (torch.tensor([1, 0, 2]), X[1]), (torch.tensor([4, 0, 1]), X[2]),
      (torch.tensor([0, 1, 1]), X[3])])


def test_clip_coefficient_divides_an_attribute_by_the_number():
    """bench/capture.py float_from_item_clip_coef: `min(1.0, self.max_norm / (norm + 1e-6))`,
    the attribute a graph input the replay reads (changed between calls), the division by the
    number checked after the graph (a zero divisor raises ZeroDivisionError as in eager)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.max_norm = 1.0
    def forward(self, x):
        u = self.fc(x)
        norm = u.norm().item()
        coef = min(1.0, self.max_norm / (norm + 1e-6))
        return u * coef
def make():
    return M()
def mutate(i, m):
    m.max_norm = [1.0, 2.0, 50.0, 1.0, 0.5, 1.0][i]
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_division_by_a_number_that_becomes_zero():
    """`x * (2.0 / (m - 1.0))` with m read from x: one graph while m != 1; the call where m
    is 1.0 raises ZeroDivisionError as eager does (the check after the graph misses)."""
    run_program("""
def make():
    def f(x):
        m = x.max().item()
        return x * (2.0 / (m - 1.0))
    return f
""", [(torch.randn(3) + 5,), (torch.randn(3) + 5,), (torch.tensor([0.0, 1.0, 0.5]),), (torch.randn(3) + 5,)])


def test_shared_value_of_an_inner_graph_input_and_the_result():
    """The outer value and an attribute inside its expression equal at the recording (1.0
    both): each stays its own input (`min(1.0, self.s / m)` with m small)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = 1.0
    def forward(self, x):
        m = x.abs().max().item()
        return x * min(1.0, self.s / m)
def make():
    return M()
def mutate(i, m):
    m.s = [1.0, 0.25, 3.0, 0.1][i]
""", [(torch.full((3,), 0.5),), (torch.full((3,), 2.0),), (torch.full((3,), 4.0),), (torch.full((3,), 0.2),)],
        graphs=1, breaks=0, recompiles=0)


def test_int_item_in_float_arithmetic_with_a_float_argument():
    """bench/modules7.py zero_dim_parameters_and_python_scalars: `x + n.item() * f`, n an int64
    0-d tensor and f a float argument: the int made a float as Python makes it (one graph),
    f a graph input; int-only arithmetic of the number (`n.item() + 1`) is not computed by
    the graph (int64 wraps where Python's int does not)."""
    calls = [(X[i], torch.tensor(3 + i), 0.5 * (i + 1)) for i in range(4)]
    run_program("""
def make():
    def f(x, n, s):
        return x + n.item() * s
    return f
""", calls, graphs=1, breaks=0, recompiles=0)
    run_program("""
def make():
    def f(x, n, s):
        k = n.item() + 1
        return x * k
    return f
""", calls)


def test_int_of_nan_caught_by_the_function_after_a_buffer_write():
    """`int(x.max())` of a NaN raises ValueError, which the function catches; the graph has
    gone on past the read (a buffer written in place): the replay misses there, rolls the
    buffer back and records again, which takes the except path as eager does."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(3))
    def forward(self, x):
        m = x.max()
        try:
            n = int(m)
        except ValueError:
            n = -1
        self.acc.add_(x[:3])
        return x * 2, n
def make():
    return M()
""", [(torch.arange(4.0),), (torch.arange(4.0) + 1,), (torch.tensor([0.0, float("nan"), 1.0, 2.0]),),
      (torch.arange(4.0) + 2,)])


def test_formatted_tensor_logged_and_returned_is_one_graph():
    """`log.debug(f"... {h.mean():.3f}")` to a disabled logger and a formatted value returned
    (`s = f"{h.max():.2f}"`): Tensor.__format__ read after the graph, the text returned as its
    expression (format(b1, '.2f')), so a new value neither splits the graph nor recompiles
    (before: 3 graphs and a recompile on every call, the returned text guarded by value)."""
    run_program("""
import logging
log = logging.getLogger("capture_test_formatted_tensor")
log.setLevel(logging.WARNING)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        log.debug(f"activation mean {h.mean():.3f}")
        s = f"{h.max():.2f}"
        return h.relu(), s, f"max {h.max():.4f} min {h.min():.4f}"
def make():
    return M()
""", [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_short_formatted_text_stays_guarded():
    """A one-character text (`f"{t.argmax()}"`) may be a shared object: guarded by value as
    before; every call as eager (a recompile where it changes)."""
    run_program("""
def make():
    def f(x):
        k = f"{x.sum(0).argmax()}"
        return x * 2, k
    return f
""", [(x,) for x in X])
