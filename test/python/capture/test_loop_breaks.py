"""A loop that breaks the graph on every iteration (issue 11): the frame runs eagerly after
one break site repeats (recorder.LOOP_BREAKS) or past break_limit, and the modules and
functions it calls are captured on their own (replay._SkipFrameVariant, cache._Callees).
Every test compares outputs, gradients and program state with eager."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn

from harness import same, state_of
from mlircap.capture import capture
from mlircap.capture.recorder import LOOP_BREAKS

EAGER = lambda gm, ex: gm.forward  # noqa: E731


class Counting(nn.Module):
    """A submodule with Python state written in forward (replayed by its own capture)."""
    def __init__(self, n):
        super().__init__()
        self.lin = nn.Linear(n, n)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        return torch.tanh(self.lin(x))


class GreedyDecode(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb, self.cell, self.out = nn.Embedding(12, 8), nn.GRUCell(8, 8), Counting(8)
        self.head = nn.Linear(8, 12)
        self.steps = 0

    def forward(self, h, stop, max_len=40):
        tok = torch.zeros(h.shape[0], dtype=torch.long)
        toks = []
        for _ in range(max_len):
            h = self.cell(self.emb(tok), h)
            tok = self.head(self.out(h)).argmax(-1)
            toks.append(tok)
            self.steps += 1
            if (tok == stop).all():   # a data-dependent break on every iteration
                break
        return torch.stack(toks, 1), h


def _captured_callees(c):
    return [ch for _, ch in c.callees.by_key.values()]


def test_loop_breaking_every_iteration_runs_its_frame_eagerly_with_callees_captured():
    torch.manual_seed(0)
    ref = GreedyDecode()
    m = copy.deepcopy(ref)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fast = capture(m, EAGER)
        for i in range(4):
            torch.manual_seed(10 + i)
            h = torch.randn(3, 8)
            stop = torch.tensor(i % 12)   # a different stop token: a different iteration count
            same(fast(h, stop), ref(h, stop))
            same(state_of(m), state_of(ref), "state")
    msgs = [str(x.message) for x in w if "in a loop" in str(x.message)]
    assert len(msgs) == 1 and "Tensor.__bool__" in msgs[0], msgs
    c = fast._mlircap_capture
    assert len(c.variants) == 1 and c.variants[0].eager and c.variants[0].splits == 1
    assert c.variants[0].breaks[0][0].startswith("data-dependent operation Tensor.__bool__")
    # the submodules the loop calls ran as captured graphs from the second call on
    chs = {type(ch.fn).__name__: ch for ch in _captured_callees(c)}
    assert {"Embedding", "GRUCell", "Counting", "Linear"} <= set(chs), chs
    for name in ("Embedding", "GRUCell", "Counting", "Linear"):
        ch = chs[name]
        assert ch.stats.replays > 0 and all(not v.eager for v in ch.variants), (name, ch.variants)
    assert m.out.calls == ref.out.calls > 40


def test_loop_break_training_gradients_match_eager():
    torch.manual_seed(1)
    ref = GreedyDecode().train()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for i in range(3):
        torch.manual_seed(20 + i)
        h = torch.randn(2, 8, requires_grad=True)
        h2 = h.detach().clone().requires_grad_()
        stop = torch.tensor(-1)   # never: all 40 steps
        toks_c, hc = fast(h, stop)
        toks_e, he = ref(h2, stop)
        same(toks_c, toks_e)
        hc.square().sum().backward()
        he.square().sum().backward()
        same(h.grad, h2.grad, "input grad")
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            same(p.grad, q.grad, n)
    assert fast._mlircap_capture.variants[0].eager


def _per_sample(fc, x, lengths, log):
    h = fc(x)
    out = []
    for i in range(h.shape[0]):
        n = int(lengths[i])   # .item() per sample
        log.append(n)         # a side effect per iteration, in order
        out.append(h[i, :n].mean(0))
    return torch.stack(out)


def test_per_sample_item_loop_side_effects_in_order_once():
    torch.manual_seed(2)
    fc = nn.Linear(8, 8)
    fast = capture(_per_sample, EAGER)
    log_c, log_e = [], []
    for i in range(5):
        x = torch.randn(30, 6, 8)
        lengths = torch.randint(1, 7, (30,))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            same(fast(fc, x, lengths, log_c), _per_sample(fc, x, lengths, log_e))
        assert log_c == log_e   # each append once, in order (also in the recording call)
    c = fast._mlircap_capture
    # the log list grows: the second recording finds the loop again and the frame runs
    # eagerly for any arguments from then on (no variant per call)
    assert len(c.variants) == 2 and all(v.eager and v.splits == 1 for v in c.variants)
    assert c.variants[1].hits == 3 and not c.variants[1].pre
    # fc is an argument, not a callee of a module: the frame's call to it is captured on its own
    assert any(ch.fn is fc and ch.stats.replays for ch in _captured_callees(c))


def _helper(x, w):
    return torch.relu(x * w) + 1


def _calls_helper_in_loop(x, n):
    total = x.new_zeros(())
    w = torch.ones(())
    for _ in range(n):
        y = _helper(x, w)
        w = w + 0.5
        if y.sum().item() > 1e9:   # never true, data-dependent: a break per iteration
            break
        total = total + y.mean()
    return total


def test_plain_function_callee_captured_and_iteration_counts_vary():
    fast = capture(_calls_helper_in_loop, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in (20, 20, 12, 3):
            x = torch.randn(5)
            same(fast(x, n), _calls_helper_in_loop(x, n))
    c = fast._mlircap_capture
    # n == 20 and 12: the loop breaks 8 times; the second time for other arguments the frame
    # runs eagerly for every call, n == 3 included
    assert [v.eager for v in c.variants] == [True, True] and c.variants[1].hits == 1
    assert any(ch.func is _helper and ch.stats.replays for ch in _captured_callees(c))


def test_few_loop_breaks_still_unrolled():
    def f(x):
        for _ in range(LOOP_BREAKS - 1):
            if x.sum().tolist() > 0:   # (a number compared: a break; a tensor's truth is a check, asserts.py,
                # and an .item() is read after the graph, deferred.py)
                x = x * 0.5
        return x

    fast = capture(f, EAGER)
    x = torch.rand(4) + 1
    for _ in range(3):
        same(fast(x), f(x))
    v = fast._mlircap_capture.variants[0]
    assert not v.eager and len(v.graphs) == LOOP_BREAKS and v.splits == LOOP_BREAKS - 1


def test_break_limit_of_distinct_sites_runs_eagerly_with_one_warning():
    src = "def g(x):\n" + "".join(f"    if x.sum().tolist() > {-k}:\n        x = x * 0.5\n" for k in range(12)) + \
        "    return x\n"
    ns = {}
    exec(compile(src, "<distinct_breaks>", "exec"), ns)
    g = ns["g"]
    x = torch.rand(4) + 1
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        fast = capture(g, EAGER, break_limit=5)
        for _ in range(3):
            same(fast(x), g(x))
    msgs = [str(m.message) for m in w if "broke the graph" in str(m.message)]
    assert len(msgs) == 1 and "more than 5 times" in msgs[0], msgs
    v = fast._mlircap_capture.variants[0]
    assert v.eager and v.splits == 1


def test_loop_break_strict_raises():
    def f(x):
        for _ in range(3 * LOOP_BREAKS):
            if x.sum().item() > 0:
                x = x * 0.5
        return x

    fast = capture(f, EAGER, strict=True)
    with pytest.raises(Exception, match="graph break in a loop"):
        fast(torch.rand(4) + 1)
