"""Floats kept in a list attribute (`self.weights[0]`, multi-task loss weights a schedule
updates between calls) read by a subscript with an int index and reaching tensor
arithmetic are graph inputs, as float attributes are (flow_roots._flow_item): the list is
guarded for its type and length, its floats for their types.  Any other use of the list
(a branch on an item, iterating it, summing it, handing it to a call, writing it, reading
it after a graph break) guards the float items by value as before.  Every call is
compared with eager (outputs, module state)."""
import torch

from harness import run_program


def _x(i):
    torch.manual_seed(i)
    return torch.randn(3, 4)


_MODULE = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 2)
        self.weights = [1.0, 0.5, "tag", 3]
    def forward(self, x):
{body}
def make():
    return M()
def mutate(i, m):
    m.weights[0] = 1.0 / (1 + i)
    m.weights[1] = 0.5 + 0.25 * i
"""


def _prog(body):
    return _MODULE.format(body="\n".join("        " + ln for ln in body.strip().splitlines()))


def test_float_items_in_arithmetic_are_inputs():
    run_program(_prog("""
w = self.weights
loss = self.a(x).pow(2).mean() * w[0] + self.b(x).abs().mean() * self.weights[-3]
return loss * self.weights[3]
"""), [(_x(i),) for i in range(5)], recompiles=0, graphs=1)


def test_float_item_needed_by_value_is_guarded():
    # a branch on an item: guarded by the branch it takes (no recompile while it holds)
    run_program(_prog("""
y = self.a(x) * self.weights[0]
if self.weights[1] > 0.9:
    y = y + 1
return y
"""), [(_x(i),) for i in range(5)], recompiles=1)
    # iterated, summed, handed to a call: every float item guarded by value
    for body in ("return self.a(x) * self.weights[0] + sum(w for w in self.weights[:2])",
                 "return self.a(x) * self.weights[0] + len(str(self.weights))"):
        run_program(_prog(body), [(_x(i),) for i in range(4)], recompiles=3)
    # returned: the item as the replay starts (flows._flow_returned), no guard
    run_program(_prog("return self.a(x) * self.weights[0], self.weights[1]"), [(_x(i),) for i in range(4)],
                recompiles=0)
    # a torch function's argument: guarded by value until its call site has seen two values,
    # then run between graphs with the replay's value (scalar_inputs._flow_torch_step)
    run_program(_prog("return torch.full_like(x, self.weights[0])"), [(_x(i),) for i in range(4)], recompiles=1)


def test_float_items_written_by_the_function():
    # the function writes an item back (flow_writes._flow_store_item): replayed as its
    # expression of the item at the call, the item read back followed as that expression
    run_program(_prog("""
y = self.a(x) * self.weights[0]
self.weights[1] = self.weights[1] * 0.5
return y * self.weights[1]
"""), [(_x(i),) for i in range(4)], recompiles=0)
    run_program(_prog("""
self.weights.append(0.1)
return self.a(x) * self.weights[0]
"""), [(_x(i),) for i in range(4)])


def test_float_item_read_after_a_break_is_guarded():
    """An uncapturable call (print to a sink that rewrites the list) between the list's
    read and the item's: the item is guarded by the value it had."""
    run_program("""
class Sink:
    def __init__(self):
        self.m = None
    def write(self, s):
        if self.m is not None:
            self.m.weights[0] = self.m.weights[0] + 1.0
    def flush(self):
        pass
SINK = Sink()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.weights = [0.5, 2.0]
        SINK.m = self
    def forward(self, x):
        w = self.weights
        y = x * w[1]
        print("step", file=SINK)
        return y * w[0]
def make():
    return M()
""", [(_x(i),) for i in range(4)], recompiles=3)


def test_global_float_list():
    run_program("""
SCALES = [0.5, 2.0]
def make():
    def f(x):
        return x * SCALES[0] + x.cos() * SCALES[1]
    return f
def mutate(i, f):
    SCALES[0] = 0.5 + i
""", [(_x(i),) for i in range(4)], recompiles=0, graphs=1)


def test_float_items_of_a_tuple_attribute():
    """`self.loss_weights = (w0, w1)` reassigned by a schedule between calls: the tuple's
    float items read by a subscript are graph inputs (the tuple is guarded for its type
    and length, its floats for their types); unpacked, its items are guarded by value."""
    prog = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 2)
        self.loss_weights = (1.0, 0.5, 2)
    def forward(self, x):
{body}
def make():
    return M()
def mutate(i, m):
    m.loss_weights = (1.0 / (1 + i), 0.5 + 0.25 * i, 2)
"""
    body = ("h = self.a(x)\nw = self.loss_weights\n"
            "return h.pow(2).mean() * w[0] + h.abs().mean() * self.loss_weights[1] * w[2]")
    run_program(prog.format(body="\n".join("        " + ln for ln in body.splitlines())),
                [(_x(i),) for i in range(5)], recompiles=0, graphs=1)
    body = "w0, w1, k = self.loss_weights\nreturn self.a(x) * w0 + w1"
    run_program(prog.format(body="\n".join("        " + ln for ln in body.splitlines())),
                [(_x(i),) for i in range(4)], recompiles=3)
