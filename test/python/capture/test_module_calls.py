"""Calling a submodule runs untraced code (nn.Module.__call__): its hooks and whatever
`forward` resolves to.  Both are guarded where the module is called, also when `forward`
is an instance attribute that is not a method named forward (a lambda, a function)."""
import torch

from harness import run_program

X = torch.randn(3)

PROGRAM = """
def _hook(mod, inp, out):
    return out * 3
def _double(x):
    return x * 2
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act = nn.ReLU()
    def forward(self, x):
        return self.act(self.lin(x))
def make():
    return M()
STEPS = [None, "fwd", None, "hook", None, "unhook", "fwd2", "hook", "unfwd", None, "unhook", None]
def mutate(i, m):
    s = STEPS[i]
    if s == "fwd":
        m.lin.forward = lambda x: x * 2
    elif s == "fwd2":
        m.lin.forward = _double
    elif s == "unfwd":
        del m.lin.forward
    elif s == "hook":
        m.lin.register_forward_hook(_hook)
    elif s == "unhook":
        m.lin._forward_hooks.clear()
"""


def test_hooks_added_after_forward_was_replaced_on_the_instance():
    """m.lin.forward = lambda: the lambda's frame is no `forward`, so the guards on lin's
    hooks and on the instance attribute come from the call m.lin(x); a hook registered
    later, or another function set as forward, re-records instead of replaying."""
    run_program(PROGRAM, [(X,)] * 12)


def test_module_call_guards_cost_no_recompile_when_nothing_changes():
    c = run_program(PROGRAM.replace('STEPS = [None, "fwd"', 'STEPS = [None, None'), [(X,)] * 3)
    assert c.recompiles == 0
