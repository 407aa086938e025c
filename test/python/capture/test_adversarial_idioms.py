"""Adversarial capture programs in real-world idioms (config-driven branches, registries of
callables, generators and try/except in forward, context managers, recursion, **kwargs
plumbing, properties with side effects, __getattr__ modules, cached_property, lru_cache'd
helpers, global counters, logging / print), each called several times with the state it
reads changed between calls (mutate), against eager for outputs and program state
(harness.run_program runs two independent copies of the program)."""
import pytest
import torch

from harness import run_program

IDIOMS = {}


def idiom(name, src, calls=None, n=8, **kw):
    IDIOMS[name] = (src, calls, n, kw)


idiom("registry_of_callables", """
class _Box: pass
BOX = _Box(); BOX.reg = {}
def register(name):
    def deco(fn):
        BOX.reg[name] = fn
        return fn
    return deco
@register("relu")
def _r(x): return x.relu()
@register("tanh")
def _t(x): return x.tanh()
class Cfg: act = "relu"
CFG = Cfg()
def make():
    def f(x):
        return BOX.reg[CFG.act](x) + 1
    return f
def mutate(i, f):
    CFG.act = "tanh" if i % 2 else "relu"
    if i == 5:
        BOX.reg["relu"] = lambda x: x * 10
""")

idiom("generator_in_forward", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.ls = nn.ModuleList([nn.Linear(3, 3) for _ in range(3)])
        self.k = 3
    def gen(self, x):
        for l in self.ls[:self.k]:
            x = l(x)
            yield x
    def forward(self, x):
        outs = list(self.gen(x))
        return sum(o.sum() for o in outs), len(outs)
def make(): return M()
def mutate(i, m):
    m.k = 1 + i % 3
""")

idiom("generator_send", """
def acc():
    tot = 0.0
    while True:
        v = yield tot
        tot += v
G = acc(); next(G)
def make():
    def f(x):
        s = G.send(1.5)
        return x * s
    return f
""")

idiom("try_except_in_forward", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = {"a": 1.0}
    def forward(self, x):
        try:
            s = self.cfg["scale"]
        except KeyError:
            s = 2.0
        try:
            y = x / 0 if s > 5 else x * s
        except ZeroDivisionError:
            y = x
        return y
def make(): return M()
def mutate(i, m):
    if i % 3 == 1: m.cfg["scale"] = float(i)
    elif i % 3 == 2: m.cfg.pop("scale", None)
""")

idiom("try_finally_data_dependent_raise", """
CNT = [0]
def make():
    def f(x):
        try:
            if x.sum() > 0:
                raise ValueError("pos")
            return x - 1
        except ValueError as e:
            CNT[0] += 1
            return x + len(str(e))
        finally:
            CNT.append(1)
    return f
""", calls=lambda: [(torch.ones(3),), (-torch.ones(3),)] * 4)

idiom("context_managers", """
import contextlib
LOG = []
@contextlib.contextmanager
def scope(name):
    LOG.append("enter " + name)
    try:
        yield len(name)
    finally:
        LOG.append("exit " + name)
class Ctx:
    def __init__(self): self.depth = 0
    def __enter__(self):
        self.depth += 1; return self
    def __exit__(self, *a):
        self.depth -= 1; return False
C = Ctx()
def make():
    def f(x):
        with scope("blk") as n, C as c:
            y = x * n + c.depth
        with torch.no_grad():
            z = y * 2
        return y + z
    return f
""")

idiom("recursion", """
def tree(x, d):
    if d == 0:
        return x
    return tree(x * 0.5, d - 1) + tree(x + 1, d - 1)
D = [2]
def make():
    def f(x):
        return tree(x, D[0])
    return f
def mutate(i, f):
    D[0] = 1 + i % 3
""")

idiom("kwargs_plumbing", """
def inner(x, *, scale=1.0, shift=0.0, **rest):
    y = x * scale + shift
    for k in sorted(rest):
        y = y + rest[k]
    return y
def mid(x, **kw):
    kw.setdefault("shift", 0.5)
    return inner(x, **kw)
OPTS = {"scale": 2.0}
def make():
    def f(x, **kw):
        return mid(x, **{**OPTS, **kw})
    return f
def mutate(i, f):
    if i % 3 == 1: OPTS["extra"] = float(i)
    elif i % 3 == 2: OPTS.pop("extra", None); OPTS["shift"] = 1.0
""", calls=lambda: [((torch.ones(3),), {}), ((torch.ones(3),), {"z": 1.0}), ((torch.ones(3),), {"scale": 3.0})] * 3)

idiom("property_with_side_effect", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.n_reads = 0
    @property
    def scale(self):
        self.n_reads += 1
        return 1.0 + self.n_reads * 0.5
    def forward(self, x):
        return self.lin(x) * self.scale
def make(): return M()
""")

idiom("getattr_forwarding_module", """
class Wrap(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = nn.Linear(3, 3)
    def __getattr__(self, name):
        try:
            return super().__getattr__(name)
        except AttributeError:
            return getattr(self.inner, name)
    def forward(self, x):
        return self.inner(x) + self.out_features + self.weight.sum()
def make(): return Wrap()
def mutate(i, m):
    if i % 2:
        with torch.no_grad(): m.inner.weight.mul_(0.5)
    if i == 4:
        torch.manual_seed(i)
        m.inner = nn.Linear(3, 3)
""")

idiom("cached_property", """
import functools
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.base = 2.0
    @functools.cached_property
    def factor(self):
        return self.base * 3
    def forward(self, x):
        return self.lin(x) * self.factor
def make(): return M()
def mutate(i, m):
    if i % 3 == 1: m.base = float(i)
    if i % 3 == 2: m.__dict__.pop("factor", None)
""")

idiom("lru_cache_helper_cleared", """
import functools
CALLS = []
@functools.lru_cache(maxsize=None)
def table(n):
    CALLS.append(n)
    return tuple(float(i) for i in range(n))
N = [3]
def make():
    def f(x):
        t = table(N[0])
        return x * sum(t) + len(t)
    return f
def mutate(i, f):
    N[0] = 2 + i % 3
    if i == 5: table.cache_clear()
""")

idiom("lru_cache_tensor", """
import functools
@functools.lru_cache(maxsize=2)
def mask(n):
    return torch.tril(torch.ones(n, n))
def make():
    def f(x):
        return x @ mask(x.shape[0])
    return f
""", calls=lambda: [(torch.randn(3, 3),), (torch.randn(4, 4),), (torch.randn(3, 3),), (torch.randn(5, 5),)] * 2)

idiom("global_counter", """
STEP = 0
def make():
    def f(x):
        global STEP
        STEP += 1
        if STEP % 3 == 0:
            return x * 2
        return x + STEP
    return f
""")

idiom("logging_and_print", """
import logging, io
BUF = io.StringIO()
log = logging.getLogger(__name__ + ".log")   # (one logger per copy of the program)
log.setLevel(logging.INFO)
log.addHandler(logging.StreamHandler(BUF))
log.propagate = False
def make():
    def f(x):
        y = x * 2
        log.info("step %d", 1)
        print("y", y.shape, file=BUF)
        log.debug("hidden")
        return y + 1
    return f
def mutate(i, f):
    log.setLevel(logging.DEBUG if i % 2 else logging.INFO)
def state(f):
    return BUF.getvalue()
""")

idiom("config_driven_branches", """
import dataclasses
@dataclasses.dataclass
class Cfg:
    norm: str = "ln"
    residual: bool = True
    layers: int = 2
class M(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.lins = nn.ModuleList(nn.Linear(3, 3) for _ in range(4))
        self.ln = nn.LayerNorm(3)
    def forward(self, x):
        for l in self.lins[: self.cfg.layers]:
            h = l(x)
            if self.cfg.norm == "ln":
                h = self.ln(h)
            x = x + h if self.cfg.residual else h
        return x
def make(): return M(Cfg())
def mutate(i, m):
    if i % 4 == 1: m.cfg.norm = "none" if m.cfg.norm == "ln" else "ln"
    if i % 4 == 2: m.cfg.residual = not m.cfg.residual
    if i % 4 == 3: m.cfg.layers = 1 + i % 4
""", n=12)

idiom("grads_set_to_none_in_a_loop", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
def make():
    m = M()
    def f(x):
        for p in m.parameters():
            p.grad = None
        loss = m.lin(x).sum()
        loss.backward()
        return loss, [p.grad for p in m.parameters()]
    f.m = m
    return f
def state(f):
    return [p.grad for p in f.m.parameters()]
""")

idiom("weak_key_dictionary_cache", """
import weakref
CACHE = weakref.WeakKeyDictionary()
def make():
    lin = nn.Linear(3, 3)
    def f(x):
        if lin not in CACHE:
            CACHE[lin] = 0
        CACHE[lin] += 1
        y = lin(x) * CACHE[lin]
        for k in CACHE:
            y = y + k.weight.sum()
        return y, len(CACHE)
    f.lin = lin
    return f
def mutate(i, f):
    if i % 3 == 0:
        CACHE.clear()
def state(f):
    return list(CACHE.values())
""")

idiom("weak_value_dictionary_registry", """
import weakref
class Tok:
    def __init__(self, v): self.v = v
KEEP = [Tok(1.0), Tok(2.0)]
REG = weakref.WeakValueDictionary()
REG["a"] = KEEP[0]
def make():
    def f(x):
        y = x * (REG["a"].v if "a" in REG else -1.0)
        if REG:
            y = y + len(REG)
        return y
    return f
def mutate(i, f):
    if i % 3 == 1: REG["a"] = KEEP[1]
    elif i % 3 == 2: REG.pop("a", None)
    else: REG["a"] = KEEP[0]
""")

idiom("module_class_call_patched", """
class A(nn.Module):
    def forward(self, x):
        return x + 1
def call2(self, *a, **k):
    return a[0] * 5
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = A()
        self.b = nn.ReLU()
    def forward(self, x):
        return self.b(self.a(x))
def make(): return M()
def mutate(i, m):
    if i % 2:
        A.__call__ = call2
    elif "__call__" in vars(A):
        del A.__call__
""")

idiom("torch_compiled_submodules_in_a_loop", """
class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
    def forward(self, x):
        return self.lin(x).relu()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(torch.compile(Inner(), backend="eager") for _ in range(3))
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x
def make(): return M()
def mutate(i, m):
    if i == 2:
        m.blocks[1]._orig_mod.register_forward_hook(lambda mod, a, o: o * 2)
    if i == 4:
        m.blocks[1]._orig_mod._forward_hooks.clear()
        m.blocks[0]._orig_mod.lin = nn.Identity()
    if i == 5:
        m.eval()
""")

idiom("torch_compiled_function_called", """
def g(x):
    return x.sin() * 2
G = torch.compile(g, backend="eager")
def make():
    def f(x):
        return G(x) + 1
    return f
""")

idiom("grads_set_to_none_over_many_parameters", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(*[nn.Linear(3, 3) for _ in range(6)])   # 12 parameters
        self.lr = 0.1
    def forward(self, x):
        for p in self.net.parameters():
            p.grad = None
        loss = self.net(x).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for p in self.net.parameters():
                p.add_(p.grad, alpha=-self.lr)
        return loss.detach()
def make(): return M()
""", n=5)

idiom("attrdict_config", """
class AttrDict(dict):
    __getattr__ = dict.__getitem__
    __setattr__ = dict.__setitem__
CFG = AttrDict(scale=2.0, act="relu", dims=[3])
def make():
    def f(x):
        y = x * CFG.scale + CFG.dims[0]
        return y.relu() if CFG.act == "relu" else y.tanh()
    return f
def mutate(i, f):
    CFG.scale = float(i % 3)
    CFG["act"] = "relu" if i % 2 else "tanh"
    if i == 5:
        CFG.dims[0] = 7
""")

idiom("class_dict_read", """
class C:
    k = 1.0
    lst = [1.0]
def make():
    def f(x):
        y = x * vars(C)["k"] + vars(C)["lst"][0]
        return y + C.__dict__["k"] + sum(1 for k in C.__dict__ if not k.startswith("_"))
    return f
def mutate(i, f):
    C.k = float(i % 2)
    if i == 2:
        C.lst[0] = 5.0
    if i == 4:
        C.extra = 1
""")

idiom("abc_registered_after_compile", """
import abc
class Base(abc.ABC):
    pass
class Impl:
    pass
class Other:
    pass
OBJ = Impl()
def make():
    def f(x):
        y = x * 2 if isinstance(OBJ, Base) else x
        return y + (1 if issubclass(Other, (Base, int)) else 0)
    return f
def mutate(i, f):
    if i == 3:
        Base.register(Impl)
    if i == 5:
        Base.register(Other)
""")

idiom("singledispatch_registered_after_compile", """
import functools
@functools.singledispatch
def conv(v):
    return 1.0
class A:
    pass
class B(A):
    pass
def make():
    a, b = A(), B()
    def f(x):
        return x * conv(a) + conv(b) + conv(2)
    return f
def mutate(i, f):
    if i == 3:
        conv.register(A, lambda v: 5.0)
    if i == 5:
        conv.register(int, lambda v: 7.0)
""")

idiom("stateful_descriptor", """
class Counted:
    def __init__(self):
        self.n = 0
    def __get__(self, obj, objtype=None):
        self.n = min(self.n + 1, 3)
        return float(self.n) * (obj.base if obj is not None else 1.0)
class O:
    c = Counted()
    def __init__(self):
        self.base = 2.0
OBJ = O()
def make():
    def f(x):
        return x * OBJ.c
    return f
def mutate(i, f):
    if i % 4 == 0:
        O.__dict__["c"].n = 0
    if i == 5:
        OBJ.base = 3.0
def state(f):
    return O.__dict__["c"].n
""", n=10)


@pytest.mark.parametrize("name", list(IDIOMS))
def test_idiom(name):
    """(torch_compiled_*: a module or function torch.compile made, called from the captured
    code, is traced as the module or function it wraps, as Dynamo inlines it; before, the
    loop broke the graph at each call and its frame ran eagerly, and a compiled function's
    replay raised NameError for Dynamo's __compiled_fn global; grads_set_to_none_over_many_
    parameters: each `p.grad = None` is a break right after the one before, counted as a
    loop breaking at one place, so the frame ran eagerly from 8 parameters on)"""
    src, calls, n, kw = IDIOMS[name]
    calls = calls() if calls is not None else [(torch.randn(3),)] * n
    run_program(src, calls, name=name, cache_limit=64, **kw)


def test_version_counter_of_an_outside_tensor():
    """`t._version` of a tensor from outside the function (a global buffer written in place
    between calls, an argument) is read at replay: it was taken as metadata the guards cover
    and returned as the recording's value (1, 1, 1 for eager's 1, 2, 3).  The version of a
    tensor the function makes stays a constant."""
    run_program("""
T = torch.zeros(2)
def make():
    def f(x):
        y = x * 2
        y.add_(1)
        return x + T._version + y._version + x._version
    return f
def mutate(i, f):
    T.add_(1)
""", [(torch.zeros(2),)] * 5)


def test_conj_and_neg_bits_are_guarded_metadata():
    """is_conj() / is_neg() are metadata the tensor guards' dispatch keys cover (no graph
    break; a tensor with the other bit fails the guard): a global complex tensor rebound to
    its conjugate view, a float one to its negative view, between calls."""
    run_program("""
TC = torch.tensor([1.0 + 2.0j, -1.0 + 0.5j])
TN = torch.tensor([1.0, -2.0, 3.0])
def make():
    def f(x):
        y = x + TC.real.sum() + TC.imag.sum() + TC.is_conj() + TC.conj().is_conj()
        return y + (TN * 2).sum() + TN.is_neg()
    return f
def mutate(i, f):
    global TC, TN
    if i % 2:
        TC = TC.conj()
    if i % 3 == 1:
        TN = torch._neg_view(TN) if not TN.is_neg() else TN.resolve_neg()
""", [(torch.randn(3),)] * 8, breaks=0)
