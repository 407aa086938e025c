"""An uncapturable call (print to a user object, a callback) runs arbitrary code: at a
replay it may write state the program reads after it, even if it wrote nothing when the
call was recorded.  State read again after such a call is guarded again after it
(sources._new_epoch / _reread): containers the program holds (touched before the call,
their items read after), objects and values read again.  Calls that run no Python code
(`id(self)`, torch's state queries) start no new epoch.  Every call is compared with eager
(outputs and program state)."""
import torch

from harness import run_program

_SINK = """
class Sink:
    def write(self, s):
        if ON[0]:
            {write}
    def flush(self):
        pass
SINK = Sink()
ON = [False]
def mutate(i, f):
    ON[0] = i % 3 == 2
"""


def _calls(n=6):
    return [(torch.ones(2) * (i + 1),) for i in range(n)]


def test_list_held_across_the_call():
    """Its items guarded (touched) before the call, one read after it, rewritten by it."""
    run_program(_SINK.format(write="W[0] = W[0] + 1") + """
W = [1, 2]
def make():
    def f(x):
        w = W
        y = x * w[1]
        print("s", file=SINK)
        return y * w[0]
    return f
""", _calls())


def test_dict_read_before_and_its_other_key_after():
    run_program(_SINK.format(write='D["b"] = D["b"] + 1') + """
D = {"a": 1, "b": 2}
def make():
    def f(x):
        y = x * D["a"]
        print("s", file=SINK)
        return y * D["b"]
    return f
""", _calls())


def test_module_attribute_object_replaced():
    """self.cfg's attribute read after the call, the object itself read before: the
    replacement of cfg by the call is seen (cfg guarded again to be the same object)."""
    run_program(_SINK.format(write="M_.cfg = Cfg(M_.cfg.k + 1)") + """
class Cfg:
    def __init__(self, k):
        self.k = k
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Cfg(1)
    def forward(self, x):
        cfg = self.cfg
        y = x + 1
        print("s", file=SINK)
        return y * self.cfg.k
M_ = None
def make():
    global M_
    M_ = M()
    return M_
""", _calls())


def test_pure_builtin_calls_add_no_guards():
    """`torch._C._get_tracing_state()` is an uncapturable call that runs no Python: what is
    read on both sides of it is guarded once."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
    def forward(self, x):
        y = self.lin(x)
        torch._C._get_tracing_state()
        return self.lin(y)
def make():
    return M()
""", _calls(3), recompiles=0)
    v = c.variants[0]
    mid = [p.guard.describe() for p in v.mid_guards]
    assert not any("lin" in d for d in mid), mid
