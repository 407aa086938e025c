"""Capture rate against Dynamo (issue 11 item 4), session 25.

copy.deepcopy / copy.copy of a plain Python object (a config, a dataclass instance) inside the
call: copy.py asks the object for `__reduce_ex__(4)`, C code the recording could not follow,
so every such copy was an uncapturable call and a graph break (transformers' encoder-decoder
models deep-copy their config in `get_text_config(decoder=True)` inside forward: bart, pegasus,
mbart ran as two graphs).  The default reduction is now traced as Python (reductions.py).
Each test compares results, arguments and module state with eager after every call, and
changes what the copy reads between calls (guards)."""
import copy
import dataclasses

import torch

import mlircap
from harness import EAGER, run_program
from mlircap.capture import capture

_DATACLASS_CFG = """
import copy, dataclasses

@dataclasses.dataclass
class Cfg:
    scale: float = 2.0
    sizes: list = dataclasses.field(default_factory=lambda: [1, 2])
    act: str = "relu"

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Cfg()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)

    def forward(self, x):
        h = self.a(x)
        c = copy.deepcopy(self.cfg)
        c.scale = c.scale * 3
        c.sizes.append(5)
        y = self.b(h) * c.scale + len(c.sizes)
        return (y.relu() if c.act == "relu" else y.tanh()), len(self.cfg.sizes)

def make():
    return M()

def mutate(i, m):
    if i == 2:
        m.cfg.scale = 0.5
    if i == 3:
        m.cfg.act = "tanh"
    if i == 4:
        m.cfg.sizes.append(7)
"""


def test_deepcopy_of_dataclass_config_between_tensor_ops_is_one_graph():
    calls = [(torch.randn(2, 4),) for _ in range(6)]
    c = run_program(_DATACLASS_CFG, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_GET_TEXT_CONFIG = """
import copy

class Config:
    def __init__(self):
        self.d_model = 8
        self.encoder_layers = 2
        self.decoder_layers = 1
        self.decoder_ffn = 16
        self.is_encoder_decoder = True

    def to_dict(self):
        return dict(self.__dict__)

    def text_config(self, decoder):
        # (transformers' PreTrainedConfig.get_text_config of a flat encoder-decoder config)
        out = copy.deepcopy(self)
        prefix = "decoder" if decoder else "encoder"
        for key in out.to_dict():
            if key.startswith(prefix):
                new = "num_layers" if key == prefix + "_layers" else key[len(prefix) + 1:]
                setattr(out, new, getattr(out, key))
        return out

class Cache:
    def __init__(self, config):
        cfg = config.text_config(decoder=True)
        self.layers = [None] * cfg.num_layers
        self.width = getattr(cfg, "ffn", 0)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()
        self.enc = nn.Linear(8, 8)
        self.dec = nn.Linear(8, 8)

    def forward(self, x):
        h = self.enc(x).relu()
        cache = Cache(self.config)
        out = self.dec(h) * len(cache.layers) + cache.width
        return out, self.config.to_dict()

def make():
    return M()

def mutate(i, m):
    if i == 2:
        m.config.decoder_layers = 3
    if i == 4:
        m.config.decoder_ffn = 4
"""


def test_config_text_copy_of_encoder_decoder_is_one_graph():
    calls = [(torch.randn(3, 8),) for _ in range(6)]
    c = run_program(_GET_TEXT_CONFIG, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_SHALLOW_AND_SHARED = """
import copy

class Opts:
    def __init__(self):
        self.w = [1.0, 2.0]
        self.alias = self.w
        self.inner = Inner()

class Inner:
    def __init__(self):
        self.k = 2

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.opts = Opts()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        h = self.lin(x)
        d = copy.deepcopy(self.opts)
        s = copy.copy(self.opts)
        d.alias.append(3.0)        # (the copy keeps the two names one list, as eager's does)
        s.inner.k += 1             # (a shallow copy shares the inner object: the program's own)
        return h * len(d.w) + s.inner.k * sum(d.w), d.w is d.alias, s.w is self.opts.w

def make():
    return M()

def mutate(i, m):
    if i == 3:
        m.opts.w.append(4.0)
"""


def test_deepcopy_keeps_shared_references_and_copy_shares_inner_objects():
    calls = [(torch.randn(2, 4),) for _ in range(5)]
    run_program(_SHALLOW_AND_SHARED, calls, breaks=0)


class _Slotted:
    __slots__ = ("k",)

    def __init__(self):
        self.k = 2


class _Reduced:
    def __init__(self, k):
        self.k = k

    def __reduce__(self):
        return (_Reduced, (self.k + 1,))


class _CopiesOthers(torch.nn.Module):
    """Objects whose copy is not the default reduction: still right (copied by their own hooks)."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.slotted = _Slotted()
        self.reduced = _Reduced(1)

    def forward(self, x):
        h = self.lin(x)
        a = copy.deepcopy(self.slotted)
        b = copy.deepcopy(self.reduced)
        return h * a.k + b.k


def test_copies_by_their_own_reduction_stay_right():
    torch.manual_seed(0)
    ref = _CopiesOthers()
    torch.manual_seed(0)
    mine = _CopiesOthers()   # (a deep copy of ref would run _Reduced's own reduction)
    fast = capture(mine, EAGER)
    for i in range(4):
        if i == 2:
            ref.reduced.k = mine.reduced.k = 5
            ref.slotted.k = mine.slotted.k = 7
        x = torch.randn(2, 4)
        torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=0)


@dataclasses.dataclass
class _Box:
    n: int
    tag: str = "x"


class _ReturnsCopy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.box = _Box(2)

    def forward(self, x):
        y = self.lin(x)
        b = copy.deepcopy(self.box)
        b.n += 1
        return y * b.n, b


def test_returned_copy_is_a_new_object_every_call():
    torch.manual_seed(0)
    ref = _ReturnsCopy()
    torch.manual_seed(0)
    mine = _ReturnsCopy()
    fast = capture(mine, EAGER)
    seen = []
    for i in range(4):
        if i == 2:
            ref.box.n = mine.box.n = 10
        x = torch.randn(2, 4)
        (ye, be), (yc, bc) = ref(x), fast(x)
        torch.testing.assert_close(yc, ye, rtol=0, atol=0)
        assert bc == be and bc is not mine.box and all(bc is not s for s in seen)
        assert mine.box == ref.box
        seen.append(bc)
    c = fast._mlircap_capture
    assert all(len(v.breaks) == 0 and not v.eager for v in c.variants), [v.breaks for v in c.variants]


# -- torch.func transforms of pure tensor code: one node of the graph (transform_nodes.py) ----------
_TRANSFORMS = """
from torch.func import jacrev, vjp, grad, vmap

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, c):
        w = self.lin.weight
        h = self.lin(x)

        def f(v):
            return torch.tanh(w @ v) * v

        def s(v):
            return (v ** 3).sum() + (w @ v).pow(2).sum()

        out, pull = vjp(f, h[1])
        (ct,) = pull(c)
        per_row = vmap(grad(lambda z: (z * z * h.mean()).sum()))(h)
        return jacrev(f)(h[0]) + jacrev(jacrev(s))(h[1]), out + ct, per_row, grad(s)(h[2])

def make():
    return M()

def mutate(i, m):
    if i == 2:
        with torch.no_grad():
            m.lin.weight.mul_(-0.5)   # (a cell's tensor changed in place: a graph input, read each call)
    if i == 3:
        m.lin.weight = nn.Parameter(torch.ones(3, 3) * 0.1)   # (another parameter object)
"""


def test_func_transforms_of_pure_closures_are_one_graph():
    calls = [(torch.randn(3, 3), torch.randn(3)) for _ in range(5)]
    c = run_program(_TRANSFORMS, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_FLOAT_CELL = """
from torch.func import jacrev

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.tau = 0.5

    def forward(self, x):
        t = self.tau
        y = x * 2
        return jacrev(lambda v: torch.sin(v) * t)(y)   # (a float cell: not baked into a node)

def make():
    return M()

def mutate(i, m):
    m.tau = 0.5 + i
"""


def test_func_transform_of_a_closure_over_a_float_stays_right():
    run_program(_FLOAT_CELL, [(torch.randn(4),) for _ in range(4)])


class _JacPenalty(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        w = self.lin.weight
        h = self.lin(x)
        jac = torch.func.jacrev(lambda v: torch.tanh(w @ v))(h[0])
        return h.pow(2).mean() + jac.pow(2).sum()


def test_func_transform_node_gradients_match_eager():
    torch.manual_seed(0)
    ref = _JacPenalty()
    torch.manual_seed(0)
    mine = _JacPenalty()
    fast = capture(mine, EAGER)
    for i in range(3):
        x = torch.randn(2, 4)
        le, lc = ref(x), fast(x)
        le.backward()
        lc.backward()
        torch.testing.assert_close(lc, le, rtol=0, atol=0)
        for (n, pe), pc in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-6, atol=1e-7, msg=n)
    c = fast._mlircap_capture
    assert all(len(v.breaks) == 0 and len(v.graphs) == 1 for v in c.variants), [v.breaks for v in c.variants]


class _JacrevAndJvp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, c):
        w = self.lin.weight
        h = self.lin(x)

        def f(v):
            return torch.tanh(w @ v) * v
        loss = h.pow(2).mean() + torch.func.jacrev(f)(h[0]).pow(2).sum()
        out, jt = torch.func.jvp(f, (h[1],), (c,))
        return loss, out + jt


def test_jacrev_node_next_to_a_jvp_compiles_and_backpropagates():
    """With the mlircap backend: a jvp of a tensor that requires grad held in the graph with a
    jacrev (its graph holding aten._efficientzerotensor) crashed the compiled backward
    (segfault); such a jvp stays a call between graphs, the jacrev a node."""
    torch.manual_seed(0)
    ref = _JacrevAndJvp()
    torch.manual_seed(0)
    mine = _JacrevAndJvp()
    fast = mlircap.compile(mine)
    for i in range(3):
        x, c = torch.randn(2, 4), torch.randn(4)
        (le, oe), (lc, oc) = ref(x, c), fast(x, c)
        torch.testing.assert_close(lc, le, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(oc, oe, rtol=1e-4, atol=1e-5)
        le.backward()
        lc.backward()
        for (n, pe), pc in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=n)


_FORWARD_MODE = """
from torch.func import hessian, jacfwd, jvp

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x, a, c):
        h = self.lin(x)

        def f(v):
            return torch.tanh(a @ v) * v

        def s(v):
            return (v ** 3).sum() + (a @ v).pow(2).sum()
        out, jt = jvp(f, (x[0],), (c,))   # (no tensor here requires grad: nodes)
        return h.sum() + hessian(s)(x[1]).sum(), jacfwd(f)(x[2]), out + jt

def make():
    return M()
"""


def test_forward_mode_transforms_of_tensors_without_grad_are_one_graph():
    calls = [(torch.randn(3, 3), torch.randn(3, 3), torch.randn(3)) for _ in range(4)]
    c = run_program(_FORWARD_MODE, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


class _ForwardModeNextToBackward(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x, a, c):
        h = self.lin(x)

        def f(v):
            return torch.tanh(a @ v) * v
        hs = torch.func.hessian(lambda v: (a @ v).pow(3).sum())(x[0])
        out, jt = torch.func.jvp(f, (x[1],), (c,))
        w = self.lin.weight
        loss = h.pow(2).mean() + torch.func.jacrev(lambda v: torch.tanh(w @ v))(h[0]).pow(2).sum()
        return loss, hs + torch.func.jacfwd(f)(x[0]), out + jt


def test_forward_mode_nodes_in_a_graph_backpropagated_with_the_mlircap_backend():
    torch.manual_seed(0)
    ref = _ForwardModeNextToBackward()
    torch.manual_seed(0)
    mine = _ForwardModeNextToBackward()
    fast = mlircap.compile(mine)
    for i in range(3):
        x, a, c = torch.randn(2, 4), torch.randn(4, 4), torch.randn(4)
        want, got = ref(x, a, c), fast(x, a, c)
        for w, g in zip(want, got):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-4)
        want[0].backward()
        got[0].backward()
        for (n, pe), pc in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-5, msg=n)


# -- NumPy scalars guarded by value ----------------------------------------------------------------

class _NpScale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        import numpy as np
        self.scale = np.float32(0.5)

    def forward(self, x):
        return x * 2 if str(self.scale) == "0.5" else x - 1   # (the value itself read: guarded)


def test_a_numpy_float32_is_guarded_by_value():
    """np.float32 is no float subclass (np.float64 is): it was guarded by identity, so an
    equal new object recompiled every call; a different value still recompiles."""
    import numpy as np
    torch.manual_seed(0)
    ref, mine = _NpScale(), _NpScale()
    fast = capture(mine, EAGER)
    for i in range(5):
        v = np.float32(0.5 if i < 3 else 0.25 + i)
        ref.scale, mine.scale = v, np.float32(float(v))   # (a new object each call)
        x = torch.randn(3)
        torch.testing.assert_close(fast(x), ref(x), rtol=0, atol=0)
    c = fast._mlircap_capture
    assert c.recompiles == 2, c.stats.recompile_reasons
