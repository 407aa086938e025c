"""A number that changes on every call (a `.item()`, a float argument) handed to a torch
function as a non-tensor argument (`fake_quantize_per_tensor_affine(h, s, ...)`, the
momentum `F.batch_norm` gets from BatchNorm(momentum=None), `full_like(x, v)`): the graph
would hold it as a constant guarded by value, a recompile on every call until cache_limit.
Once the call site has seen two values (scalar_inputs._flow_torch_step), the function runs
between graphs at the replay with the replay's value.  Every call is compared with eager
(outputs, module state, gradients), the values changing back and forth."""
import torch

from harness import run_program


def _x(i, scale=None):
    torch.manual_seed(i)
    return torch.randn(4, 8) * (scale if scale is not None else i + 1)


def test_item_float_to_a_torch_function_runs_between_graphs():
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        s = h.abs().max().item() / 127.0
        return torch.fake_quantize_per_tensor_affine(h, s, 0, -128, 127) * 2, torch.full_like(h, s)
def make():
    return M()
""", [(_x(i),) for i in (0, 1, 2, 1, 3, 0, 4)], recompiles=1)
    # (the first recording: one graph, the number read after it, deferred.py, a guard there)
    assert [len(v.graphs) for v in c.variants] == [1, 2]


def test_constant_item_keeps_one_graph():
    """The same value on every call: no recompile, the function stays in the graph."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.tensor(0.5))
    def forward(self, x):
        y = x.relu()
        return torch.full_like(y, self.scale.item()) + y
def make():
    return M()
""", [(_x(i),) for i in range(4)], recompiles=0)
    # (one graph: the number read after it, deferred.py; before, a break at the .item())
    assert len(c.variants[0].breaks) == 0 and len(c.variants[0].graphs) == 1


def test_float_argument_to_a_torch_function():
    run_program("""
def make():
    def f(x, v):
        return torch.full_like(x, v) * x
    return f
""", [(_x(i), v) for i, v in enumerate((0.5, 0.25, 0.75, 0.5, 0.25, 1.5))], recompiles=1)


def test_traced_helper_takes_the_number():
    """The number handed to a traced Python helper (flow_roots._flow_callee) that passes it on."""
    run_program("""
def quant(h, s, bits=8):
    q = 2 ** (bits - 1)
    return torch.fake_quantize_per_tensor_affine(h, s, 0, -q, q - 1)
def make():
    def f(x):
        s = x.abs().max().item() / 127.0
        return quant(x.sin(), s) + 1
    return f
""", [(_x(i),) for i in (0, 1, 2, 1, 3)], recompiles=1)


def test_cumulative_batchnorm_train_with_backward():
    """BatchNorm1d(momentum=None) in training: `1.0 / float(num_batches_tracked)` is a new
    momentum each call, handed to F.batch_norm (untraced torch code, dispatched to the
    recorder with its arguments).  Running statistics, outputs and gradients match eager."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6, momentum=None)
    def forward(self, x):
        y = self.bn(self.fc(x))
        y.sum().backward()
        return y.detach(), self.fc.weight.grad.clone()
def make():
    return M().train()
def mutate(i, m):
    m.zero_grad()
""", [(_x(i),) for i in range(6)], recompiles=1)
    assert c.stats.replays >= 4


def test_miss_after_the_step_rolls_back_what_it_wrote():
    """A branch on data after the batch norm step: a replay that takes the other way misses
    after the step wrote the running statistics; they are restored before the call records
    again (replay._rollback), so each call updates them once."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6, momentum=None)
    def forward(self, x):
        y = self.bn(self.fc(x))
        if y[0, 0].item() > 0:
            return y * 2
        return y - 1
def make():
    return M().train()
""", [(_x(i, 1.0),) for i in range(10)])


def test_number_printed_then_handed_to_a_traced_helper():
    """A float replayed with its expression by one call (`print(s, file=...)`) and handed to
    a traced helper by another: each call is resolved on its own (flow_roots._flow_call_done),
    so the helper's use is still followed or guarded (it was taken for replayed too: the
    helper's `x * s` kept the first call's value)."""
    run_program("""
import io
OUT = io.StringIO()
def helper(x, s):
    return x * s
def make():
    def f(x, s):
        print(s, file=OUT)
        return helper(x, s)
    return f
""", [(torch.ones(3), v) for v in (0.5, 0.25, 0.75, 0.5)])


def test_running_max_written_back_and_read_again():
    """Quantization calibration: `self.amax = max(self.amax, h.abs().max().item())`, then
    `s = self.amax / 127` given to fake_quantize.  The write is replayed as its expression
    of the attribute at the call and the `.item()` (flow_writes.py, also after that break),
    the value read back is followed as that expression, and fake_quantize runs between
    graphs: no recompile per call.  The attribute matches eager after every call; the
    input scale goes up and down, so the max changes on some calls only."""
    src = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.amax = 0.0
    def forward(self, x):
        h = self.fc(x)
        self.amax = max(self.amax, h.abs().max().item())
        s = self.amax / 127.0
        return torch.fake_quantize_per_tensor_affine(h, s, 0, -128, 127)
def make():
    return M()
"""
    c = run_program(src, [(_x(i, s),) for i, s in enumerate((1, 2, 1, 4, 3, 8, 1))], recompiles=1)
    assert c.stats.replays == 5
    # the max reached on the first call: a new `.item()` below it changes nothing fake_quantize
    # takes (the guard is on `max(self.amax, <item>) / 127.0`, not on the item)
    run_program(src, [(_x(i, s),) for i, s in enumerate((8, 1, 2, 1, 3))], recompiles=0)


def test_batchnorm_then_a_branch_that_misses():
    """BatchNorm in training (the default momentum: in the graph), then a branch on data: a
    replay taking the other way misses after the graph updated the running statistics, which
    its kernel does without a version bump; they are restored before the call records again
    (graph_steps._note_unversioned), so each call updates them once (they were updated twice)."""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6)
    def forward(self, x):
        y = self.bn(self.fc(x))
        if y[0, 0].item() > 0:
            return y * 2
        return y - 1
def make():
    return M().train()
""", [(_x(i, 1.0),) for i in range(8)])


def test_in_place_op_taking_the_number_on_a_graph_result():
    """`y.mul_(s)` on a graph's result: not run between graphs (an in-place op there could
    miss views the graph made of y); s is the op's 0-d graph input (scalar_inputs._scalar_alpha),
    the view z reads the product as eager's does: no recompile (before: s guarded by value)."""
    calls = [(_x(i),) for i in (0, 1, 2, 1)]
    run_program("""
def make():
    def f(x):
        y = x.sin()
        z = y[:2]
        s = float(x.abs().max())
        y.mul_(s)
        return y, z + 1
    return f
""", calls, recompiles=0)


def test_miss_after_backward_accumulates_gradients_once():
    """A hand-written optimizer step reading an int attribute after `loss.backward()`
    (`1 - b ** self.t`): its guard is checked after the backward, so a replay with another
    step misses there. The backward had accumulated into the parameters' .grad, which the
    rollback did not restore: the re-recording ran it again and the gradients (and the
    step) were doubled. The leaves' .grad are restored with the other written tensors
    (replay._save_grads), also where the call zeroes them in place before its backward
    (taking the backward's result instead of running it again got that one wrong)."""
    for zero_first in (False, True):
        for call in ("loss.backward()", "torch.autograd.backward([loss])"):
            run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.t = 0
    def forward(self, x):
        if {zero_first} and self.fc.weight.grad is not None:
            for p in self.fc.parameters():
                p.grad.zero_()
        loss = self.fc(x).pow(2).mean()
        {call}
        self.t += 1
        with torch.no_grad():
            for p in self.fc.parameters():
                p.sub_(0.1 * p.grad / (1 - 0.9 ** self.t))
                if not {zero_first}:
                    p.grad.zero_()
        return loss.detach()
def make():
    return M().train()
""", [(_x(0),), (_x(0),), (_x(1),), (_x(2),), (_x(1),), (_x(3),)])
