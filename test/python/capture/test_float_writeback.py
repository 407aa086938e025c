"""Floats written back to attributes (flow_writes.py): `self.tau = max(0.5, self.tau * 0.9)`
is replayed as that expression of the attribute's value at the call, so an annealed
temperature, a decayed coefficient or a running float average does not recompile on every
call; where the program reads the stored value again, or stores it after a graph break,
the value is guarded as before.  Every call is compared with eager (outputs, module state)."""
import torch

from harness import run_program


def _calls(n):
    torch.manual_seed(0)
    return [(torch.randn(2, 3),) for _ in range(n)]


MODULE = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.tau = 1.0
        self.ema = 0.0
        self.lin = nn.Linear(3, 3)
    def forward(self, x):
        y = torch.softmax(self.lin(x) / self.tau, -1)
        {body}
        return y
def make():
    return M()
"""


def _module(body, n=6, **kw):
    return run_program(MODULE.replace("{body}", body), _calls(n), **kw)


def test_annealed_attribute_is_no_recompile():
    _module("self.tau = max(0.5, self.tau * 0.9)", recompiles=0, graphs=1)
    _module("self.tau *= 0.95", recompiles=0, graphs=1)
    _module("self.ema = 0.9 * self.ema + 0.1 * self.tau\n        self.tau = self.tau - 0.01", recompiles=0, graphs=1)


def test_written_back_float_with_a_schedule_outside():
    """The caller also sets the attribute between calls (a training loop's schedule)."""
    src = MODULE.replace("{body}", "self.tau = self.tau * 0.5 + 0.25") + """
def mutate(i, m):
    if i % 2:
        m.tau = 0.3 + 0.1 * i
"""
    run_program(src, _calls(6), recompiles=0, graphs=1)


def test_stored_value_read_back_is_followed():
    """The stored value read back by LOAD_ATTR in the same call (a graph takes it, another
    attribute's write uses it) is followed as the store's expression (flow_writes
    `_flow_store_load`): no recompile."""
    _module("self.tau = self.tau * 0.9\n        y = y * self.tau", n=6, recompiles=0)
    _module("self.tau = self.tau - 0.01\n        self.ema = 0.9 * self.ema + 0.1 * self.tau", n=6, recompiles=0)


def test_stored_value_read_again_is_guarded():
    """The stored value is read back otherwise (stored again, read through vars()): the
    call's value is used as it is, and the inputs are guarded.  Returned, it is the store's
    expression of the attribute as the replay starts (flows._flow_returned): no guard."""
    _module("self.tau = self.tau * 0.9\n        self.tau = self.tau + 0.01", n=4, recompiles=3)
    _module("self.tau = self.tau * 0.9\n        y = y * vars(self)['tau']", n=4, recompiles=3)
    run_program(MODULE.replace("{body}", "self.tau = self.tau * 0.9\n        return y, self.tau"), _calls(4),
                recompiles=0)


def test_store_after_a_graph_break_is_guarded():
    # (`.item()` compared: a graph break; a tensor's truth would be a check, asserts.py)
    _module("if y.sum().item() > 0:\n            y = y + 1\n        self.tau = self.tau * 0.9", n=4, recompiles=3)


def test_store_to_another_object_and_to_a_new_object():
    src = """
import types
NS = types.SimpleNamespace(v=1.0)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.tau = 1.0
    def forward(self, x):
        NS.v = self.tau * 2.0 + NS.v      # another object, written back from two attributes
        obj = types.SimpleNamespace()
        obj.v = self.tau * 3.0            # a new object's attribute: returned, guarded
        self.tau = self.tau + 0.5
        return x * NS.v, obj.v
def make():
    return M()
def state(m):
    return NS.v
"""
    run_program(src, _calls(4))
