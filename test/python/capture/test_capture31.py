"""Capture rate where Dynamo captures one graph and mlircap did not (issue 11 item 4), session 27.

A custom autograd.Function whose forward fills a tensor it made with an in-place method
(`torch.zeros_like(logits).scatter_(-1, idx, 1.0)`: a straight-through one-hot, bench/modules11.py
vq_ema_codebook_straight_through_perplexity) was a step between graphs: in-place methods were not
"pure tensor code" (grad_hooks.pure_autograd_function).  A forward without branches may now call
them; the recording checks that the call wrote none of its tensor arguments (their version
counters), and gives up on the function (eager, with a warning) where it did.

Each test compares results, gradients and arguments with eager after every call, with inputs
changing between calls (guards)."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from harness import EAGER, run_program
from mlircap.capture import capture


def _aot(gm, ex):
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward),
                                 bw_compiler=lambda g, e: make_boxed_func(g.forward))


COMPILERS = {"eager": lambda m: capture(m, EAGER), "aot": lambda m: capture(m, _aot), "mlircap": mlircap.compile}


def _capture_of(fast, how):
    return fast._compiled._mlircap_capture if how == "mlircap" else fast._mlircap_capture


class OneHotSTE(torch.autograd.Function):
    @staticmethod
    def forward(ctx, logits):
        idx = logits.argmax(-1)
        y = torch.zeros_like(logits).scatter_(-1, idx.unsqueeze(-1), 1.0)
        return y

    @staticmethod
    def backward(ctx, g):
        return g


class MaskedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(w)
        out = x.clone()
        out.mul_(w).masked_fill_(x < 0, 0.0)
        return out

    @staticmethod
    def backward(ctx, g):
        (w,) = ctx.saved_tensors
        return g * w, None


class STENet(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(5, 4)
        self.w = nn.Parameter(torch.rand(4) + 0.5)

    def forward(self, x):
        z = self.proj(x)
        hard = OneHotSTE.apply(z * 2)
        return (hard * z).sum(-1) + MaskedScale.apply(z, self.w.detach()).mean(-1)


@pytest.mark.parametrize("how", COMPILERS)
def test_function_filling_its_own_tensor_in_place_is_a_node(how):
    # the one-hot's position follows the values (argmax): new inputs each call
    torch.manual_seed(0)
    ref = STENet()
    m = copy.deepcopy(ref)
    fast = COMPILERS[how](m)
    for i in range(4):
        x = torch.randn(3, 5)
        le = ref(x)
        le.sum().backward()
        lc = fast(x)
        lc.sum().backward()
        assert torch.allclose(lc, le, atol=1e-6), i
        for (n, p), (_, q) in zip(m.named_parameters(), ref.named_parameters()):
            assert (p.grad is None) == (q.grad is None) and (p.grad is None or
                                                             torch.allclose(p.grad, q.grad, atol=1e-5)), (i, n)
    c = _capture_of(fast, how)
    assert not any(v.eager for v in c.variants), [v.reason for v in c.variants]
    assert all(len(v.graphs) == 1 and v.breaks == [] for v in c.variants), [v.breaks for v in c.variants]
    assert c.stats.replays >= 2


class WritesInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.mul_(2)   # writes its argument (no mark_dirty)
        return x * 3

    @staticmethod
    def backward(ctx, g):
        return g * 3


class WritesView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        x.view(-1).add_(1)   # writes its argument through a view
        return x.exp()

    @staticmethod
    def backward(ctx, g):
        return g * 2


@pytest.mark.parametrize("fn", [WritesInput, WritesView])
def test_function_writing_its_argument_in_place_runs_eagerly(fn):
    def f(x, y):
        h = x.sin()
        return fn.apply(y) * h

    c = capture(f, EAGER)
    for i in range(3):
        x, y = torch.randn(4, 3, requires_grad=True), torch.randn(4, 3, requires_grad=True)
        xc, yc = x.detach().clone().requires_grad_(), y.detach().clone().requires_grad_()
        with warnings.catch_warnings(record=True) as wl:
            warnings.simplefilter("always")
            re = f(x, y)
            rc = c(xc, yc)
        re.sum().backward()
        rc.sum().backward()
        assert torch.equal(re, rc), i
        assert torch.equal(y, yc) and torch.equal(x.grad, xc.grad) and torch.equal(y.grad, yc.grad), i
        if i == 0:
            assert any("capture gave up" in str(w.message) and "wrote its argument in place" in str(w.message)
                       for w in wl), [str(w.message) for w in wl]
    assert all(v.eager for v in c._mlircap_capture.variants)


class BranchyInPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, flag):
        out = x if flag else x.clone()   # which tensor the in-place op writes follows a value
        out.add_(1)
        return out * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_function_with_branch_and_in_place_is_not_a_node():
    def f(x):
        return BranchyInPlace.apply(x * 1.5, False) + 1

    c = capture(f, EAGER)
    for i in range(3):
        x = torch.randn(3, requires_grad=True)
        xc = x.detach().clone().requires_grad_()
        re, rc = f(x), c(xc)
        re.sum().backward()
        rc.sum().backward()
        assert torch.equal(re, rc) and torch.equal(x.grad, xc.grad), i
    v = c._mlircap_capture.variants[0]
    assert not v.eager and len(v.breaks) == 1 and "BranchyInPlace.apply" in v.breaks[0][0], v.breaks


# `with parametrize.cached():` around parametrized reads (bench/modules10.py
# parametrize_cached_context_shared_weight; Dynamo: 1 graph): each read asked
# torch._C._get_tracing_state() and keyed its cache by id(module), two uncapturable calls (2
# graphs, 2 breaks).  The tracing state is guarded None and the id of an object the function
# reached from its inputs is a constant under an identity guard.
_PARAM_CACHED = """
import torch.nn.utils.parametrize as P

class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(-1, -2)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4, bias=False)
        P.register_parametrization(self.l, "weight", Symmetric())

    def forward(self, x):
        with P.cached():
            return self.l(self.l(x).tanh()), P.is_parametrized(self.l), len(P._cache)

def make():
    return M()

def mutate(i, m):
    with torch.no_grad():   # the original weight changes between calls
        m.l.parametrizations.weight.original.add_(0.1 * i)

def state(m):
    return len(P._cache), P._cache_enabled
"""


def test_parametrize_cached_one_graph():
    calls = [(torch.randn(3, 4),) for _ in range(4)]
    c = run_program(_PARAM_CACHED, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_ID_KEYS = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)
        self.c = nn.Linear(3, 3)

    def forward(self, x):
        table = {id(self.a): 1.0, id(self.b): 2.0}
        return self.a(x) * table.get(id(self.a), 0.0) + table.get(id(self.b), 5.0)

def make():
    return M()

def mutate(i, m):
    if i == 2:
        m.a = m.b   # the ids now coincide: the table's first entry is overwritten
    if i == 3:
        m.a = m.c
"""


def test_id_of_reached_object_is_guarded():
    calls = [(torch.randn(2, 3),) for _ in range(5)]
    c = run_program(_ID_KEYS, calls, breaks=0)
    assert c.graph_count >= 2   # the swapped modules record again


# The replay's writes at its end: an item written into a dict the function then rebinds
# (parametrize.cached()'s `_cache[key] = t` ... `_cache = {}`) went into the new dict, which
# kept the tensor (eager's new dict is empty; a later `with cached():` read the stale tensor).
_REBOUND_CACHE = """
_cache = {}
_log = {"calls": {}}

def make():
    def f(x):
        global _cache
        _cache["a"] = x * 2
        _log["calls"]["n"] = x.sum()
        y = _cache["a"] + 1
        _cache = {}
        _log["calls"] = {}
        return y
    return f
"""


def test_write_into_dict_rebound_later_goes_to_the_old_dict():
    calls = [(torch.randn(3),) for _ in range(4)]
    c = run_program(_REBOUND_CACHE, calls, breaks=0)
    assert c.stats.replays >= 2


# F.one_hot(labels) with the class count read from the labels, before any graph operation
# (bench/modules9.py label_smoothing_one_hot_inferred_classes; Dynamo: 1 graph, the one-hot
# run before it): a graph of the one-hot alone, then a break at `oh.size(1)` (a data-dependent
# shape).  It is now a step before the first graph, its shape guarded.
_ONE_HOT_INFERRED = """
def make():
    def f(logits, y, eps=0.1):
        oh = F.one_hot(y).float()
        n = oh.size(1)
        soft = oh * (1 - eps) + eps / n
        return -(soft * logits[:, :n].log_softmax(-1)).sum(-1).mean(), n
    return f
"""


def test_leading_one_hot_inferred_classes_one_graph():
    # the class count grows on calls 2 and 4 (records again), values change every call
    ys = [[0, 2, 1, 3, 1], [3, 0, 1, 2, 2], [0, 4, 1, 3, 1], [4, 4, 0, 1, 2], [5, 0, 1, 2, 3]]
    calls = [(torch.randn(5, 6), torch.tensor(y)) for y in ys]
    c = run_program(_ONE_HOT_INFERRED, calls)
    assert all(len(v.graphs) == 1 and v.splits == 0 for v in c.variants), \
        [(len(v.graphs), v.breaks) for v in c.variants]
    assert c.stats.replays >= 2


_ONE_HOT_AFTER_OPS = """
def make():
    def f(logits):
        y = logits.argmax(-1)    # a graph operation first: the one-hot stays in the graph
        oh = F.one_hot(y)
        return oh.float().sum(0), oh.shape[1]
    return f
"""


def test_one_hot_after_graph_ops_keeps_its_break():
    calls = [(torch.randn(4, 3),), (torch.randn(4, 3),), (torch.randn(4, 5),)]
    c = run_program(_ONE_HOT_AFTER_OPS, calls)
    assert not any(v.eager for v in c.variants)


_ONE_HOT_RAISES = """
def make():
    def f(x, y):
        try:
            oh = F.one_hot(y)
        except RuntimeError:
            return x * 0
        return x + oh.sum()
    return f
"""


def test_leading_one_hot_raising_is_checked_at_replay():
    # negative labels make one_hot raise (caught): each call takes the path eager takes
    calls = [(torch.randn(3), torch.tensor([0, 1, 2])), (torch.randn(3), torch.tensor([0, -1, 2])),
             (torch.randn(3), torch.tensor([1, 1, 2])), (torch.randn(3), torch.tensor([-2, 1, 2]))]
    run_program(_ONE_HOT_RAISES, calls)
