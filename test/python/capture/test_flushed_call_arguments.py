"""An uncapturable call after writes the function made (flush_writes.py: the writes are made right
before the call) takes arguments computed from the state before those writes, as every expression of
a replay is: `self.step += 1; bisect_right(ms, self.step)` read the already written step and added 1
again (capture5's bisect_milestone_schedule_step_counter: the second call's learning rate 0.1 for
eager's 0.5, a WRONG result since 850a7b6 flushed before any call that may write state). Outputs and
state compared with eager over calls where the counter crosses the milestones."""
import bisect
import copy

import pytest
import torch
import torch.nn as nn

from harness import EAGER
from mlircap.capture import capture


class _Bisect(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0
        self.milestones, self.values = [1, 3], [1.0, 0.5, 0.1]

    def forward(self, x):
        self.step += 1
        lr = self.values[bisect.bisect_right(self.milestones, self.step)]
        return self.fc(x) * lr


class _KeywordAndAfter(nn.Module):
    """The written counter passed by keyword, and read again after the call."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.step = 0
        self.ms = [2, 4]

    def forward(self, x):
        self.step += 2
        i = bisect.bisect_left(self.ms, x=self.step)
        return self.fc(x) * (i + 1) + self.step


class _DictCounterPrint(nn.Module):
    """A dict item written, then an eager print of a value computed from it, then read again."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.state = {"n": 0}

    def forward(self, x):
        self.state["n"] = self.state["n"] + 3
        print("n is", self.state["n"] * 10)
        return self.fc(x) * self.state["n"]


@pytest.mark.parametrize("cls", [_Bisect, _KeywordAndAfter, _DictCounterPrint])
def test_call_after_flushed_writes_reads_the_written_values_once(cls, capsys):
    torch.manual_seed(0)
    e = cls()
    c = copy.deepcopy(e)
    fast = capture(c, EAGER)
    for i in range(6):
        x = torch.randn(3, 8)
        want = e(x)
        printed = capsys.readouterr().out
        got = fast(x)
        assert capsys.readouterr().out == printed, i
        torch.testing.assert_close(got, want, rtol=0, atol=0, msg=f"call {i}")
        assert {k: v for k, v in vars(c).items() if not k.startswith("_")} == \
            {k: v for k, v in vars(e).items() if not k.startswith("_")}, i
    v = fast._mlircap_capture.variants
    assert v and not v[0].eager, [x.reason for x in v]
