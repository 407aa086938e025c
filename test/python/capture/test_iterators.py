"""Iterators that outlive the call (an itertools.cycle or count a module holds, a global one,
a generator object on the module, a list iterator): every call advances them, so `next` on
one runs at replay (iterators.py); before, its value was folded into the recording as a
constant and every replay repeated the recorded value.  Iterators the call creates itself
stay traced."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(7)]


def test_cycle_on_module_runs_at_replay_before_the_graph():
    """bench/capture2.py itertools_cycle_schedule: the scale cycles 1, 0.5, 0.25 over the
    calls; a C iterator over numbers is advanced before the graph (no split)."""
    run_program("""
import itertools
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sched = itertools.cycle([1.0, 0.5, 0.25])
    def forward(self, x):
        return self.fc(x) * next(self.sched)
def make():
    return M()
""", [(x,) for x in X], breaks=0, graphs=1, recompiles=0)


def test_global_count_and_iterator_of_a_list():
    """A global itertools.count() handing out ids and an iter() over a list kept on the
    function's closure, read with a default once exhausted."""
    run_program("""
import itertools
IDS = itertools.count(7)
def make():
    it = iter([3, 1, 2])
    def f(x):
        uid = next(IDS)
        k = next(it, 0)
        return x * 2, uid, k
    return f
""", [(x,) for x in X])


def test_generator_object_on_module():
    """A generator object made at construction, advanced by next() every call (its body runs
    at replay, not traced into the graph)."""
    run_program("""
import itertools
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.warm = (min(1.0, i / 3) for i in itertools.count(1))
    def forward(self, x):
        return self.fc(x) * next(self.warm)
def make():
    return M()
""", [(x,) for x in X])


def test_iterators_made_by_the_call_stay_traced():
    """A generator helper and iter()/next() over a local list: one graph, no break, replayed."""
    run_program("""
def windows(x, k):
    for i in range(0, x.shape[-1] - k + 1, k):
        yield x[..., i:i + k]
def make():
    def f(x):
        it = iter([0.5, 2.0])
        a = next(it)
        g = windows(x, 2)
        first = next(g)
        return sum(g) * a + first * next(it)
    return f
""", [(x,) for x in X[:3]], breaks=0, graphs=1, recompiles=0)
