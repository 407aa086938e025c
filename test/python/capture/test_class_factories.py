"""Classes made inside the captured function by a class factory with constant arguments
(`collections.namedtuple`, `dataclasses.make_dataclass`): the factory runs untraced (traced,
namedtuple's read of its caller's frame made capture give up on the whole function) and the
recording uses its class.  Eager makes a new class per call, so a replay may only use the
recorded one while the class stays inside the call: where it or an instance of it leaves
(returned, stored), capture gives up (eager, correct)."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(4)]


def test_local_namedtuple_fields_read():
    run_program("""
import collections
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 4)
    def forward(self, x):
        Out = collections.namedtuple("Out", ["logits", "probs"], defaults=[None])
        logits = self.fc(x)
        o = Out(logits, logits.softmax(-1))
        a, b = o
        return o.logits * 2 + b + len(Out._fields) + (1 if Out.__module__ == __name__ else 0)
def make():
    return M()
""", [(x,) for x in X], graphs=1, breaks=0)


def test_make_dataclass_local():
    run_program("""
import dataclasses
def make():
    lin = nn.Linear(8, 8)
    def f(x):
        Cfg = dataclasses.make_dataclass("Cfg", [("scale", float, 2.0), ("shift", float, 1.0)])
        c = Cfg(shift=3.0)
        return lin(x) * c.scale + c.shift
    return f
""", [(x,) for x in X], graphs=1, breaks=0)


def test_local_namedtuple_returned_runs_eagerly():
    """The instance is the return value: each eager call returns an instance of a class of its
    own, which a replay could not give; capture gives up with that reason."""
    c = run_program("""
import collections
def make():
    lin = nn.Linear(8, 4)
    seen = []
    def f(x):
        Out = collections.namedtuple("Out", ["y"])
        seen.append(Out)
        return Out(lin(x))
    f.seen = seen
    return f
def state(f):
    return [len(f.seen), len(set(map(id, f.seen)))]
""", [(x,) for x in X], allow_eager=True)
    assert all(v.eager for v in c.variants) and "class made during the call" in c.variants[0].reason
