"""A replay that misses after an eager call that mutated tensors (an optimizer's step) must not
restart the recording from the function's start: the forward would then read the stepped
parameters (and a rollback put the parameters back while the optimizer's state stayed stepped).
Found 2026-12-07 by the flush_writes work (also at 3a45b49): the tensor branch on a value computed
before AdamW.step, checked after it (a check held past the step, asserts.py), missed on the second
call's data and the parameters came out wrong from then on.  Now no check is held past such a call
(recorder.wrote_eagerly): the branch breaks the graph there and a replay whose guard fails runs the
rest of the frame from the break (a continuation, guard_misses.py)."""
import copy
import warnings

import torch
import torch.nn as nn
import torch.nn.functional as F

from mlircap.capture import capture


class _StepThenBranch(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 2)
        self.opt = torch.optim.AdamW([{"params": [self.lin.weight]}, {"params": [self.lin.bias], "lr": 3e-2}],
                                     lr=1e-2)

    def forward(self, x, y):
        self.opt.zero_grad(set_to_none=True)
        out = self.lin(x)
        loss = F.cross_entropy(out, y)
        loss.backward()
        self.opt.step()
        if out[0, 0] > out[0, 1]:
            loss = loss * 2
        return loss.detach()


def test_branch_after_an_eager_step_keeps_parameters_as_eager():
    torch.manual_seed(0)
    e = _StepThenBranch()
    c = copy.deepcopy(e)
    g = capture(c, backend=lambda gm, ex: gm.forward)
    warnings.simplefilter("ignore")
    for i in range(4):
        x, y = torch.randn(6, 4) * (1 + i % 3), torch.randint(0, 2, (6,))
        a, b = e(x, y), g(x, y)
        assert torch.equal(a, b), f"call {i}: loss differs"
        for p, q in zip(e.parameters(), c.parameters()):
            assert torch.equal(p, q), f"call {i}: parameters differ"
