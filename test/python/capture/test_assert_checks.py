"""The truth of a tensor deciding a jump whose other side raises (torch.distributions'
argument and sample validation `if not torch._is_all_true(valid): raise ValueError(...)`,
`assert (x >= 0).all(), msg`, `if torch.isnan(loss).any(): raise ...`) is a check after the
graph instead of a graph break (asserts.py): one graph while the checks pass; a call whose
check fails rolls back what the replay wrote (buffers, torch's RNG) and runs as eager does,
raising eager's error after eager's side effects.  Every call is compared with eager
(outputs, exceptions and their messages, module state, torch's RNG state)."""
import torch

from harness import run_program


def _x(i, n=4):
    torch.manual_seed(i)
    return torch.randn(3, n)


POLICY = """
class Policy(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Linear(4, 4)
        self.register_buffer("std", torch.full((4,), 0.5))
        self.register_buffer("calls", torch.zeros((), dtype=torch.int64))
    def forward(self, x, a):
        self.calls.add_(1)
        d = torch.distributions.Normal(self.mu(x), self.std)
        lp = d.log_prob(a).sum(-1)
        return lp, d.entropy().sum(), d.rsample() * 0 + d.mean
def make():
    return Policy()
def mutate(i, m):
    with torch.no_grad():
        m.std.fill_(-1.0 if i == 3 else 0.5 + 0.1 * i)
"""


def test_distribution_validation_is_one_graph():
    """Normal(loc, scale)'s constraint checks on loc, scale and the log_prob sample: one graph;
    call 3's negative scale raises eager's ValueError, after the call counter's increment."""
    calls = [(_x(i), _x(100 + i)) for i in range(6)]
    c = run_program(POLICY, calls)
    v = c.variants[0]
    assert len(v.graphs) == 1 and v.splits == 0 and not v.breaks, (len(v.graphs), v.breaks)
    assert len(c.variants) == 1 and c.stats.replays >= 4


ASSERTED = """
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))
    def forward(self, x):
        h = F.dropout(self.lin(x), 0.3, training=True)
        self.seen.add_(h.detach().abs().sum(0))
        assert torch.isfinite(h).all(), "non-finite activations"
        return h.relu() * 2
def make():
    return Block()
"""


def test_assert_on_tensor_data_with_rng_and_buffer_writes():
    """A dropout draw and a buffer write before the assert: a failing call (NaN input)
    restores both before eager's run raises AssertionError."""
    calls = [(_x(i),) for i in range(5)]
    calls[2] = (torch.full((3, 4), float("nan")),)
    c = run_program(ASSERTED, calls)
    v = c.variants[0]
    assert len(v.graphs) == 1 and v.splits == 0 and not v.breaks, (len(v.graphs), v.breaks)
    assert len(c.variants) == 1


RAISE_IN_HELPER = """
def check(loss):
    if torch.isnan(loss).any():
        raise FloatingPointError("loss is nan")
    return loss
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 1)
    def forward(self, x):
        h = self.lin(x).mean()
        loss = check(h.pow(2))
        try:
            return check(h.log())
        except FloatingPointError:
            return loss * 0
def make():
    return Net()
"""


def test_raise_in_a_helper_caught_by_the_caller():
    """The check's failing side raises in a helper and the function catches it: calls whose
    check fails in the variant of the other path record or replay the other variant."""
    calls = [(torch.full((3, 4), s),) for s in (5.0, 4.0, -5.0, -4.0, 3.0, -3.0)]
    c = run_program(RAISE_IN_HELPER.replace("nn.Linear(4, 1)", "nn.Linear(4, 1, bias=False)").replace(
        "super().__init__()", "super().__init__(); torch.manual_seed(3)"), calls)
    # (the helper's second check, caught, has no raise on its side the first call took: a
    # check until the data flips it, then a break there)
    assert c.stats.replays >= 2 and c.__dict__.get("spec_off"), [v.breaks for v in c.variants]


def test_branch_that_does_not_raise_is_checked_until_it_flips():
    """A data-dependent branch both of whose sides continue is checked after the graph too
    (one graph) until a call takes its other side: that call's replay misses, the site is not
    checked again (asserts.Deopt) and the variant is dropped; the recordings from then on
    break the graph there, as before (a flipping branch costs one wasted graph run)."""
    prog = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))
    def forward(self, x):
        h = self.lin(x)
        self.seen.add_(h.detach().sum(0))
        if h.sum() > 0:
            h = h * 2
        return h + 1
def make():
    torch.manual_seed(0)
    return Net()
"""
    pos = [(torch.full((3, 4), 2.0),), (torch.full((3, 4), 3.0),), (torch.full((3, 4), 4.0),)]
    c = run_program(prog, pos)
    assert [(len(v.graphs), v.splits) for v in c.variants] == [(1, 0)] and c.stats.replays == 2
    neg = [(torch.full((3, 4), -2.0),), (torch.full((3, 4), -3.0),)]
    c = run_program(prog, pos + neg + pos)
    assert c.__dict__.get("spec_off"), "the flipped site is not checked again"
    assert all(v.splits == 1 for v in c.variants), [(len(v.graphs), v.breaks) for v in c.variants]


EARLY_EXIT = """
class Normalize(nn.Module):
    def forward(self, x):
        m = x.abs().amax()
        if m < 1e-6:
            return x
        return x / m
def make():
    return Normalize()
"""


def test_early_exit_is_one_graph():
    c = run_program(EARLY_EXIT, [(torch.randn(5),) for _ in range(4)])
    assert [(len(v.graphs), v.splits) for v in c.variants] == [(1, 0)] and c.stats.replays == 3


def test_data_dependent_loop_is_not_checked():
    """`while (x > 0).any():` decides how often the loop runs: a check per iteration would
    unroll it into one graph per trip count; it breaks the graph as before."""
    c = run_program("""
class Countdown(nn.Module):
    def forward(self, x):
        while (x > 0).any():
            x = x - 1
        return x
def make():
    return Countdown()
""", [(torch.rand(3) * (i + 1) * 2,) for i in range(3)], allow_eager=True)
    assert all(v.eager or v.splits > 0 for v in c.variants)


ITEM_AND_MESSAGE = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
    def forward(self, x):
        self.steps += 1
        h = self.lin(x)
        if not torch.isfinite(h).all().item():
            raise FloatingPointError(f"non-finite {'batch' if h.dim() > 1 else 'vector'} at step {int(self.steps)}")
        y = h.softmax(-1)
        if (y.sum(-1) - 1).abs().max() > 1e-3:
            raise ValueError("softmax " + ("rows" if y.dim() == 2 else "values") + " do not sum to 1")
        return y
def make():
    return Net()
"""


def test_item_popped_by_a_raising_jump_and_a_message_with_branches():
    """`if not t.all().item(): raise` (the number straight into the jump) and messages with
    conditional expressions (forward jumps that all end in the raise): one graph; the NaN
    call raises eager's error with eager's message and step count."""
    calls = [(_x(i),) for i in range(5)]
    calls[2] = (torch.full((3, 4), float("inf")),)
    c = run_program(ITEM_AND_MESSAGE, calls)
    v = c.variants[0]
    assert len(v.graphs) == 1 and v.splits == 0 and not v.breaks, (len(v.graphs), v.breaks)
    assert len(c.variants) == 1 and c.stats.replays >= 3


BOUNDED_INDEX = """
class Table(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("rows", torch.randn(4, 3))
        self.register_buffer("hits", torch.zeros(4))
    def forward(self, idx):
        self.hits.add_(1)
        if not (idx < self.rows.shape[0]).all():
            raise ValueError("index out of range")
        return self.rows[idx] * 2
def make():
    return Table()
"""


def test_an_op_past_the_check_raising_is_a_miss():
    """The graph runs `rows[idx]` past the check that bounds idx: with an index out of range
    the graph itself raises (IndexError) before the check is read; that is a miss too, so the
    call raises eager's ValueError, after eager's one buffer write."""
    calls = [(torch.tensor([0, 1]),), (torch.tensor([2, 3]),), (torch.tensor([0, 7]),), (torch.tensor([3, 0]),)]
    c = run_program(BOUNDED_INDEX, calls)
    v = c.variants[0]
    assert len(v.graphs) == 1 and not v.breaks, v.breaks
    assert len(c.variants) == 1 and c.stats.replays >= 2


AFTER_CALLBACK = """
BUF = torch.zeros(3)
class Sink:
    def write(self, s):
        BUF.add_(1)     # a print target whose write changes the program's state
    def flush(self):
        pass
SINK = Sink()
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(3))
    def forward(self, x):
        self.acc.add_(BUF)
        print("step", file=SINK)
        if torch.isnan(x).any():
            raise ValueError("nan input")
        return x * 2 + self.acc
def make():
    return Net()
def state(m):
    return BUF
"""


def test_no_check_after_an_uncapturable_call_that_may_write():
    """After `print` to a user object (which may write any state) the check breaks the graph
    as before: a miss would record the call again from its start, reading before the print
    what the print wrote (the buffer would add BUF + 2 where eager adds BUF)."""
    calls = [(torch.randn(3),), (torch.randn(3),), (torch.full((3,), float("nan")),), (torch.randn(3),)]
    c = run_program(AFTER_CALLBACK, calls)
    assert c.stats.replays >= 2


DRAW_AFTER_CHECK = """
import random
RNG = random.Random(0)
class Net(nn.Module):
    def forward(self, x):
        h = x * 2
        if torch.isnan(h).any():
            raise ValueError("nan input")
        if RNG.random() < 0.5:   # a Python draw met inside the graph, past the check
            h = h + 1
        return h
def make():
    return Net()
def state(m):
    return RNG.getstate()
"""


def test_no_draw_runs_before_a_graph_whose_check_precedes_it():
    """A Python RNG draw met inside a graph runs before that graph (graph_steps._hoisted_step),
    except where the graph holds a check before it: run first, the draw happened on the NaN
    call whose eager run raises before drawing (the generator one draw ahead of eager's)."""
    calls = [(torch.randn(3),) for _ in range(3)] + [(torch.full((3,), float("nan")),), (torch.randn(3),)]
    run_program(DRAW_AFTER_CHECK, calls)
