"""Capture rate where Dynamo captures one graph and mlircap did not (issue 11 item 4), session 26.

vmap of a body that branches on shapes: `torch.vmap(row, in_dims=(0, None), out_dims=1,
chunk_size=2)` over `def row(v, m): h = v @ m; if h.shape[0] > 3: ...` (bench/modules10.py
vmap_in_dims_none_out_dims_1_chunked) ran between graphs: the body was not "pure tensor code"
(a branch, a `shape` read) and chunk_size was refused.  Inside vmap a batched tensor's data
cannot become a Python value (eager raises), so its branches follow per-example shapes
(guarded) and dims (constants); an argument mapped with in_dims None is not batched and
`if m.sum() > 0:` runs in eager: the call runs once watched, and a body that read tensor data
as a Python value stays a call between graphs.

Each test compares results, arguments and module state with eager after every call (harness),
and changes the inputs between calls (guards)."""
import warnings

import torch

from harness import EAGER, run_program
from mlircap.capture import capture

_VMAP_SHAPE_BRANCH = """
def row(v, m):
    h = v @ m
    if h.shape[0] > 3:
        h = h - h.mean()
    if h.ndim == 1:
        h = h * 2
    return torch.softmax(h, 0)

def make():
    def f(x, w):
        return torch.vmap(row, in_dims=(0, None), out_dims=1, chunk_size=2)(x, w) + 1
    return f
"""


def test_vmap_shape_branch_chunked_one_graph():
    # the mapped function's per-example shape changes between calls: [4] (branch taken),
    # [3] (not taken); values change every call
    calls = [(torch.randn(6, 3), torch.randn(3, 4)), (torch.randn(6, 3), torch.randn(3, 4)),
             (torch.randn(5, 3), torch.randn(3, 3)), (torch.randn(5, 3), torch.randn(3, 3)),
             (torch.randn(6, 3), torch.randn(3, 4))]
    c = run_program(_VMAP_SHAPE_BRANCH, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_VMAP_DATA_BRANCH = """
def body(v, m):
    if m.sum() > 0:      # m is not batched (in_dims None): eager reads its data
        return v * 2
    return v - 1

def make():
    def f(x, m):
        return torch.vmap(body, in_dims=(0, None))(x, m) * 3
    return f
"""


def test_vmap_branch_on_unbatched_data_follows_data():
    # the branch follows m's values: a graph holding one branch would be wrong at the call
    # where the sign flips
    calls = [(torch.randn(4, 3), torch.ones(2)), (torch.randn(4, 3), torch.ones(2)),
             (torch.randn(4, 3), -torch.ones(2)), (torch.randn(4, 3), torch.ones(2))]
    c = run_program(_VMAP_DATA_BRANCH, calls)
    assert sum(len(v.breaks) for v in c.variants) >= 1


# `t.data = v` for a parameter, then a use of it (bench/modules10.py
# param_data_clamp_and_data_rebinding_each_call, parameter_object_replaced_then_bias_none_between_calls):
# the use ended the graph (the write had to run before it).  An op making a new tensor now
# reads `data_as(t, v)`: v's values, t's gradient; an in-place op or a view of t still ends it.
_DATA_REBIND = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 3)

    def forward(self, x):
        for p in self.l.parameters():
            p.data.clamp_(-0.3, 0.3)
        self.l.weight.data = self.l.weight.data * 0.9
        return self.l(x)

def make():
    return M()

def mutate(i, m):
    if i == 2:
        torch.manual_seed(5)
        m.l.weight = nn.Parameter(torch.randn(3, 4))   # another parameter object
    if i == 3:
        m.l.bias = None
    if i == 4:
        with torch.no_grad():
            m.l.weight.fill_(0.7)                      # values changed in place
"""


def test_data_rebind_then_use_one_graph():
    calls = [(torch.randn(2, 4),) for _ in range(6)]
    c = run_program(_DATA_REBIND, calls, breaks=0, cache_limit=16)
    assert all(len(v.graphs) == 1 for v in c.variants if not v.eager), [len(v.graphs) for v in c.variants]


_DATA_REBIND_TWICE = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(3, 4))

    def forward(self, x, s):
        v = self.w.data * s
        self.w.data = v
        a = F.linear(x, self.w)
        v.mul_(2)              # written through v: w shares its storage (eager)
        b = torch.mul(x.sum(0, keepdim=True), self.w)
        return a, b, self.w * 1

def make():
    return M()
"""


def test_data_rebind_then_write_through_value():
    """v written in place after w's read of it: eager's linear saved w itself (v's storage),
    so the gradient of x reads v as written later; the graph's data_as node holds v's values
    at the read.  Capture gives up on such a call (eager, with a warning naming the write)."""
    calls = [(torch.randn(2, 4, requires_grad=True), torch.tensor(0.5)) for _ in range(3)]
    c = run_program(_DATA_REBIND_TWICE, calls, allow_eager=True)
    ns_e, ns_c = {}, {}
    src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + _DATA_REBIND_TWICE
    exec(src, ns_e)
    exec(src, ns_c)
    torch.manual_seed(0)
    me = ns_e["make"]()
    torch.manual_seed(0)
    mc = ns_c["make"]()
    fc = capture(mc, EAGER)
    for _ in range(3):
        x = torch.randn(2, 4)
        xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
        ae = me(xe, torch.tensor(0.5))[0]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ac = fc(xc, torch.tensor(0.5))[0]
        ae.sum().backward()
        ac.sum().backward()
        assert torch.equal(xe.grad, xc.grad)   # (2 v, as eager: the clone's v differs)
        assert torch.equal(me.w.grad, mc.w.grad)
    c = fc._mlircap_capture
    assert c.variants and all(v.eager and "writes in place" in v.reason for v in c.variants), \
        [v.reason for v in c.variants]


def _grads_match(src_fn, compile_fn):
    torch.manual_seed(0)
    me, mc = src_fn(), src_fn()
    mc.load_state_dict(me.state_dict())
    fc = compile_fn(mc)
    for i in range(4):
        x = torch.randn(5, 4)
        if i == 2:
            with torch.no_grad():
                me.l.weight.mul_(3)
                mc.l.weight.mul_(3)
        ye, yc = me(x), fc(x)
        (ye.square().sum()).backward()
        (yc.square().sum()).backward()
        torch.testing.assert_close(yc, ye)
        for (n, pe), pc in zip(me.named_parameters(), mc.parameters()):
            torch.testing.assert_close(pc, pe, msg=n)
            torch.testing.assert_close(pc.grad, pe.grad, msg=n)


class _Shrink(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l = torch.nn.Linear(4, 3)

    def forward(self, x):
        with torch.no_grad():
            self.l.weight.data = self.l.weight.data.clamp(-0.3, 0.3) * 0.9
        return torch.tanh(self.l(x))


def test_data_rebind_gradients_as_eager_capture():
    def comp(m):
        w = capture(m, EAGER)
        return w
    _grads_match(_Shrink, comp)
    torch.manual_seed(0)
    m = _Shrink()
    w = capture(m, EAGER)
    w(torch.randn(5, 4))
    w(torch.randn(5, 4))
    c = w._mlircap_capture
    assert c.graph_count == 1 and not any(v.breaks for v in c.variants)


def test_data_rebind_gradients_as_eager_compiled():
    import mlircap
    _grads_match(_Shrink, mlircap.compile)
