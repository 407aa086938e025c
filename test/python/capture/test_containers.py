"""collections.deque read and written by captured code: its contents are guarded when the
code reads them (length, maxlen, elements), its methods are writes replayed (no graph
break), and the replay leaves the deque as eager does (maxlen drops, popleft, rotate)."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(7)]


def test_feature_bank_deque_with_maxlen_matches_eager():
    """MoCo-style bank: append a detached batch, then read the whole deque (list(d));
    once the deque is full the oldest entry drops on every call."""
    c = run_program("""
import collections
class Bank(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Linear(8, 4)
        self.hist = collections.deque(maxlen=3)
    def forward(self, x):
        k = F.normalize(self.enc(x), dim=-1)
        self.hist.append(k.detach())
        bank = torch.cat(list(self.hist), 0)
        return k @ bank.t()
def make():
    return Bank()
def state(m):
    return list(m.hist)
""", [(x,) for x in X], breaks=0)
    # one variant per deque length (0, 1, 2, then full: stable)
    assert c.recompiles == 3, c.stats.recompile_reasons


def test_ring_buffer_global_deque_popleft_rotate():
    """A global deque used as a ring buffer: len() decides a popleft, rotate reorders, and
    elements are read by index."""
    run_program("""
import collections
buf = collections.deque()
def make():
    def f(x):
        buf.append(x.sum(0))
        if len(buf) > 2:
            buf.popleft()
        buf.rotate(1)
        return buf[0] * 2 + x, len(buf)
    return f
""", [(x,) for x in X[:5]], breaks=0)


def test_deque_appendleft_and_written_only_history():
    """appendleft (the old contents move) and a history only appended to (never read: no
    guard on its contents, the appends are replayed)."""
    run_program("""
import collections
recent = collections.deque([torch.zeros(8)], maxlen=2)
log = collections.deque()
def make():
    def f(x):
        y = x.relu().mean(0)
        recent.appendleft(y)
        log.append(y.detach())
        log.extend([x.max()])
        return y + recent[-1]
    return f
""", [(x,) for x in X[:5]], breaks=0)


def test_history_appended_before_a_file_write_is_not_guarded():
    """A write to a StringIO (C code reading only its receiver and a str) cannot read the
    program's history list or deque: they stay unguarded (no recompile as they grow), and
    the appends are replayed in order with the writes."""
    run_program("""
import io, collections
OUT = io.StringIO()
HIST = []
DQ = collections.deque(maxlen=4)
def make():
    def f(x):
        HIST.append(x.sum())
        DQ.append(x.mean())
        OUT.write("step\\n")
        return x * 2
    return f
def state(f):
    return OUT.getvalue(), HIST, list(DQ)
""", [(x,) for x in X], recompiles=0)
