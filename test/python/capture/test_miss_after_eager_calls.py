"""A replay whose guard fails after it ran something it runs once per call (an optimizer's step,
print to a user object that writes the program's state, a helper's eval writing a global, an
in-place write through a Python callback) must go on from the point of the miss with the values
it has (a continuation of the frame, guard_misses.py), never record the call again from its
start: that would read before the call what the call wrote (the stepped parameters), or run it
twice.  Each program's data flips a tensor branch decided after the call on every other call;
outputs, arguments, module state, the optimizer's state and the globals (lists, dicts) are
compared with eager's on each call (harness.run_program), and the variant replays."""
import torch

from harness import run_program


def _flip_calls(n=6):
    """(x, y) pairs whose x[0, 0] flips sign on every call."""
    g = torch.Generator().manual_seed(3)
    out = []
    for i in range(n):
        x = torch.randn(6, 4, generator=g)
        x[0, 0] = 5.0 if i % 2 == 0 else -5.0
        out.append((x, torch.randint(0, 2, (6,), generator=g)))
    return out


# weight[:, 0] = (1, -1): the sign of x[0, 0] decides out[0, 0] > out[0, 1]
_TRAIN = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        with torch.no_grad():
            self.lin.weight[:, 0] = torch.tensor([1.0, -1.0])
        self.opt = torch.optim.AdamW([{"params": [self.lin.weight]}, {"params": [self.lin.bias], "lr": 3e-2}],
                                     lr=1e-2)
def state(m):
    return [dict(s) for s in m.opt.state.values()]
def make():
    return M()
"""


def test_optimizer_step_then_a_branch_on_the_forward():
    """The branch reads the forward's output after AdamW.step (the known wrong result of
    test_miss_after_eager_step.py, with the optimizer's state compared too)."""
    c = run_program(_TRAIN + """
def forward(self, x, y):
    self.opt.zero_grad(set_to_none=True)
    out = self.lin(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    self.opt.step()
    if out[0, 0] > out[0, 1]:
        loss = loss * 2
    return loss.detach(), out.detach()
M.forward = forward
""", _flip_calls())
    assert c.stats.replays >= 3


def test_optimizer_step_then_a_number_read_decides_a_branch():
    """`loss.item()` read after the step decides a branch: read at the break (not after a
    graph that computes past it, deferred.py), the frame continued from there on a miss."""
    run_program(_TRAIN + """
def forward(self, x, y):
    self.opt.zero_grad(set_to_none=True)
    out = self.lin(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    self.opt.step()
    m = out[0, 0].item()
    if m > 0:
        return loss.detach() + 1
    return loss.detach() - 1
M.forward = forward
""", _flip_calls())


def test_optimizer_step_then_a_raising_check():
    """A check after the step whose failing side raises (`if bad: raise`): eager raises with
    the parameters stepped; so must the captured call, which must not step them twice or
    put them back."""
    calls = _flip_calls()
    calls[3][0][1, 1] = 1e4
    run_program(_TRAIN + """
def forward(self, x, y):
    self.opt.zero_grad(set_to_none=True)
    out = self.lin(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    self.opt.step()
    if out.abs().max() > 1e3:
        raise ValueError("diverged")
    return loss.detach()
M.forward = forward
""", calls)


def test_learning_rate_written_then_step_then_a_branch():
    """The param groups' lr written before the step (made before it: flush_writes.py), then
    the branch after the step: a miss there neither halves the lr twice nor steps twice."""
    run_program(_TRAIN + """
def forward(self, x, y):
    self.opt.zero_grad(set_to_none=True)
    out = self.lin(x)
    loss = F.cross_entropy(out, y)
    loss.backward()
    for g in self.opt.param_groups:
        g["lr"] = g["lr"] * 0.5
    self.opt.step()
    if out[0, 0] > out[0, 1]:
        loss = loss * 2
    return loss.detach()
M.forward = forward
def state(m):
    return [dict(s) for s in m.opt.state.values()] + [g["lr"] for g in m.opt.param_groups]
""", _flip_calls())


def test_step_made_by_a_helper_then_a_branch():
    """zero_grad, backward and step made by a helper the frame calls, the branch after it in
    the frame: a continuation of the frame from the helper's return."""
    run_program(_TRAIN + """
def train_step(m, loss):
    m.opt.zero_grad()
    loss.backward()
    m.opt.step()
def forward(self, x, y):
    out = self.lin(x)
    loss = F.cross_entropy(out, y)
    train_step(self, loss)
    if out[0, 0] > out[0, 1]:
        loss = loss * 2
    return loss.detach()
M.forward = forward
""", _flip_calls())


def test_counter_and_list_written_then_print_then_a_branch():
    """A module's counter and history list written before print to a logging sink (made
    before the call, so that the frame can be continued after it), then a branch."""
    run_program("""
LOG = []
class Sink:
    def write(self, s):
        LOG.append(s)
    def flush(self):
        pass
SINK = Sink()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.n = 0
        self.hist = []
    def forward(self, x, y):
        self.n += 1
        self.hist.append(self.n)
        h = x * self.n
        print("n", self.n, file=SINK)
        if h[0, 0] > 0:
            return h + len(LOG)
        return h - 1
def make():
    return M()
""", _flip_calls())


def test_buffer_written_in_place_by_a_graph_then_print_then_a_branch():
    """A graph that adds into a buffer (an input mutation), then print, then a branch: the
    buffer accumulates once per call."""
    run_program("""
LOG = []
class Sink:
    def write(self, s):
        LOG.append(s)
    def flush(self):
        pass
SINK = Sink()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(6, 4))
    def forward(self, x, y):
        self.acc.add_(x)
        h = self.acc * 2
        print("s", file=SINK)
        if x[0, 0] > 0:
            return h + 1
        return h - 1
def make():
    return M()
""", _flip_calls())


def test_print_to_a_sink_that_writes_state_then_a_branch():
    """print to a user object whose write() logs into a list and counts calls: a branch on a
    tensor computed before the print; printed once per call, in eager's order."""
    c = run_program("""
LOG = []
N = {"writes": 0}
class Sink:
    def write(self, s):
        LOG.append(s)
        N["writes"] += 1
    def flush(self):
        pass
SINK = Sink()
def make():
    def f(x, y):
        h = x * 2
        print("h", h.sum().item(), file=SINK)
        if h[0, 0] > 0:
            return h + N["writes"]
        return h - 1
    return f
""", _flip_calls())
    assert c.stats.replays >= 1


def test_list_append_then_a_call_handed_the_list_then_a_branch():
    """A list appended to before a print handed that list (the write flushed before the call,
    flush_writes.py), then a branch: a miss after the print neither loses the append nor makes
    it twice."""
    run_program("""
HIST = []
class Sink:
    def __init__(self):
        self.seen = []
    def write(self, s):
        self.seen.append(len(s))
    def flush(self):
        pass
SINK = Sink()
def make():
    def f(x, y):
        h = x * 2
        HIST.append(len(HIST))
        print(HIST, file=SINK)
        if h[0, 0] > 0:
            return h + len(HIST)
        return h - len(SINK.seen)
    return f
def state(f):
    return SINK.seen
""", _flip_calls())


def test_helper_with_a_side_effect_then_a_branch():
    """A helper the frame calls prints to a user object that appends to a global list (an
    uncapturable call that may write any state, made in the helper): a miss after it continues
    the helper's frame, then the caller's (resumes.ResumePoint.outer)."""
    run_program("""
STORE = []
class Sink:
    def write(self, s):
        if s.strip():
            STORE.append(len(STORE))
    def flush(self):
        pass
SINK = Sink()
def note(v):
    print("note", file=SINK)
    return v * 3
def make():
    def f(x, y):
        h = x * 2
        g = note(h)
        if h[0, 0] > 0:
            return g + len(STORE)
        return g - 1
    return f
""", _flip_calls())


def test_eval_in_a_helper_writing_a_global():
    """eval / exec without namespaces use the calling frame's: replayed from the replay's code
    they raised NameError from the second call.  The function runs eagerly (its result and the
    global list as eager's)."""
    run_program("""
STORE = []
def note(v):
    eval("STORE.append(len(STORE))")
    return v * 3
def make():
    def f(x, y):
        k = 2
        h = x * eval("k")
        g = note(h)
        if h[0, 0] > 0:
            return g + len(STORE)
        return g - 1
    return f
""", _flip_calls(), allow_eager=True)


def test_in_place_write_through_a_python_callback_then_a_branch():
    """`buf.apply_(fn)` writes the buffer without bumping its version and calls Python: run
    eagerly between graphs (it was recorded into the graph, unseen as a write, so a replay that
    missed after it did not put the buffer back and the recording that followed wrote it again)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("buf", torch.zeros(3))
    def forward(self, x, y):
        h = x * 2 + self.buf.sum()
        self.buf.apply_(lambda v: v + 1)
        if h[0, 0] > 0:
            return h + self.buf[0]
        return h - 1
def make():
    return M()
""", _flip_calls())


def test_in_place_write_of_an_argument_through_a_python_callback_then_a_branch():
    run_program("""
def make():
    def f(x, y):
        h = x * 2
        x.apply_(lambda v: v + 1)
        if h[0, 0] > 0:
            return h + x
        return h - x
    return f
""", _flip_calls())
