"""Callees capture gave up in that are closures the call made (give_ups.learned_callee_sources):
a nested helper with a data-dependent loop, a list comprehension (Python 3.11: a function of its
own) with `int(lengths[i])` in each iteration (bench/capture.py per_sample_item_loop_300).

* A WRONG result fixed: such a closure ran between graphs as the recording's function object,
  whose cells held the recording's tensors, so from the second call on the helper computed on
  the first call's data.  It is now made again at each replay from its code and the replay's
  values of its cells (a cell it writes: the function runs eagerly).
* The comprehension's iterator (`.0`, made by GET_ITER right before the call, held by nothing
  else) is made again at the replay (`iter(range(...))`, `iter(<the list>)`), instead of the
  whole function running eagerly ('cannot reproduce value of type range_iterator').

Each test compares outputs and state with eager over calls with new data, new shapes (a guard
misses) and, where the range's bound is an int argument, a new bound."""
import copy
import warnings

import torch
import torch.nn as nn

from harness import EAGER, same
from mlircap.capture import capture


class NestedHelper(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths):
        h = self.fc(x)

        def helper(k):
            out = []
            for i in range(k):   # (a data-dependent break per iteration: capture gives up in it)
                out.append(h[i, :int(lengths[i])].sum())
            return torch.stack(out)
        return helper(h.shape[0]) * 2


class PerSample(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths):
        h = self.fc(x)
        return torch.stack([h[i, :int(lengths[i])].mean(0) for i in range(h.shape[0])]).relu()


class PerSampleN(nn.Module):
    """The range's bound an int argument (n changes between calls)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths, n):
        h = self.fc(x)
        return torch.stack([h[i, :int(lengths[i])].mean(0) for i in range(n)]) + 1


class OverList(nn.Module):
    """A comprehension over a list argument."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths, rows):
        h = self.fc(x)
        return torch.stack([h[j, :int(lengths[j])].sum(0) for j in rows]) * 3


class WritesCell(nn.Module):
    """The helper writes a cell of the caller (nonlocal): it runs eagerly, correctly."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x, lengths):
        h = self.fc(x)
        total = 0

        def helper(k):
            nonlocal total
            out = []
            for i in range(k):
                total += int(lengths[i])
                out.append(h[i, :int(lengths[i])].sum())
            return torch.stack(out)
        return helper(h.shape[0]), total


def _run(cls, arg_sets, captured=True):
    torch.manual_seed(0)
    ref = cls()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, args in enumerate(arg_sets):
            same(fast(*args), ref(*args), f"call {i}")
            same([p.detach() for p in m.parameters()], [p.detach() for p in ref.parameters()], f"call {i} state")
    c = fast._mlircap_capture
    if captured:
        assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
        assert c.stats.replays >= 2
    return fast


def _args(n, k=6):
    return torch.randn(n, k, 8), torch.randint(1, k + 1, (n,))


def test_nested_helper_given_up_in_runs_on_the_replays_values():
    torch.manual_seed(1)
    _run(NestedHelper, [_args(12) for _ in range(3)] + [_args(9) for _ in range(2)])


def test_comprehension_given_up_in_is_a_call_between_graphs():
    torch.manual_seed(2)
    fast = _run(PerSample, [_args(20) for _ in range(3)] + [_args(7, 5) for _ in range(2)] + [_args(20)])
    ex = fast.explain()
    assert ex.break_count >= 1 and any("listcomp" in str(b) for b in ex.breaks), ex.breaks


def test_comprehension_over_a_range_of_an_int_argument():
    torch.manual_seed(3)
    sets = []
    for i, n in enumerate([5, 5, 8, 3, 8, 5]):
        x, lengths = _args(10)
        sets.append((x, lengths, n))
    _run(PerSampleN, sets, captured=False)


def test_comprehension_over_a_list_argument():
    torch.manual_seed(4)
    sets = []
    for rows in ([0, 3, 2], [0, 3, 2], [1, 1], [4, 0, 2, 3], [0, 3, 2]):
        x, lengths = _args(6)
        sets.append((x, lengths, rows))
    _run(OverList, sets, captured=False)


def test_helper_writing_a_cell_runs_eagerly_and_matches():
    torch.manual_seed(5)
    _run(WritesCell, [_args(8) for _ in range(4)], captured=False)


class FloatCell(nn.Module):
    """A float attribute (changed between calls) read into a cell of the helper."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.scale = 0.5

    def forward(self, x, lengths):
        h = self.fc(x)
        s = self.scale * 2

        def helper(k):
            out = []
            for i in range(k):
                out.append(h[i, :int(lengths[i])].sum() * s)
            return torch.stack(out)
        return helper(h.shape[0])


def test_helper_cell_holding_a_float_that_changes_between_calls():
    torch.manual_seed(6)
    ref = FloatCell()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(5):
            ref.scale = m.scale = 0.5 + 0.25 * (i % 3)
            args = _args(10)
            same(fast(*args), ref(*args), f"call {i}")
