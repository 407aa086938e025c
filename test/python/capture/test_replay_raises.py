"""An uncapturable call that raises at a replay where its recording returned (`next()` of an
iterator the module holds once it is exhausted, inside `try: ... except StopIteration:`):
the replay misses and the call records again, raising the exception at that point (the call
is not made twice: its side effects happened); that variant runs eagerly.  Before, the
exception left the replay, skipping the function's own `except` (a crash where eager works)."""
import torch

from harness import run_program

X = [torch.randn(3, 8) for _ in range(7)]


def test_exhausted_iterator_on_module_caught_by_the_function():
    """bench/capture5.py generator_schedule_on_module_next_each_call: a warmup schedule made on
    the first call as a generator, next() each call, StopIteration caught from the 4th call."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.sched = None
        self.last = 0.0
    def forward(self, x):
        if self.sched is None:
            self.sched = (min(1.0, (k + 1) / 3) for k in range(3))
        try:
            self.last = next(self.sched)
        except StopIteration:
            pass
        return self.fc(x) * self.last
def make():
    return M()
""", [(x,) for x in X], allow_eager=True)
    # the calls before the schedule ran out were replayed from one graph
    replayed = [v for v in c.variants if not v.eager]
    assert c.stats.replays >= 1 and len(replayed) == 1 and len(replayed[0].graphs) == 1


def test_exhausted_list_iterator_caught_counter_written_before():
    """A list iterator on the module, a counter written before next() (rolled back by no one:
    the call runs once), the exception's handler computing another path."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.it = iter([0.5, 2.0])
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        h = self.fc(x)
        try:
            s = next(self.it)
        except StopIteration:
            return h.relu() * self.calls
        return h * s
def make():
    return M()
""", [(x,) for x in X], allow_eager=True)


def test_exhausted_iterator_not_caught_raises_as_eager():
    """Not caught: the compiled call raises StopIteration as eager does, on every later call."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.it = iter([1.0, 3.0])
    def forward(self, x):
        return self.fc(x) * next(self.it)
def make():
    return M()
""", [(x,) for x in X], allow_eager=True)
