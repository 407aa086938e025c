"""Guard-soundness fuzz test: between calls, mutate the state a captured function reads
(globals, closure cells, object / slot / namespace attributes, module attributes, class
attributes, methods and properties, function defaults and code, numpy arrays, tensor
metadata and Python attributes on tensors, nn.Module attributes) and check every call
against eager for outputs and program state (harness.run_program runs two independent
copies of the program)."""
import random

import pytest

from harness import run_program
from mlircap.capture import _tensor_ext

pytest.importorskip("numpy")
_tensor_ext.load(block=True)   # the merged tensor guards are TensorMetas (where it builds): checked here

PROGRAM = """
import random, types
import numpy as np
G_F = 1.5
G_I = 2
G_S = "add"
G_T = (1, 2)
G_L = [1.0, 2.0]
G_D = {"k": 3.0}
COUNT = []
class Plain:
    pass
OBJ = Plain()
OBJ.a = 1.0
OBJ.inner = Plain()
OBJ.inner.v = 1.0
ITEMS = [Plain(), Plain()]
ITEMS[0].w = 1.0
class Slotted:
    __slots__ = ("s", "n")
    def __init__(self):
        self.s, self.n = 2.0, 0
SL = Slotted()
NS = types.SimpleNamespace(n=0.5, last=None)
MOD = types.ModuleType("fuzzmod")
MOD.c = 4.0
class Base:
    def twice(self, x):
        return x * 2
class K(Base):
    CONST = 1.0
    def meth(self, x):
        return x + self.CONST
    @property
    def prop(self):
        return 3.0
def meth2(self, x):
    return x - self.CONST
KO = K()
ARR = np.array([1.0, 2.0])
TG = torch.ones(3)
def helper(x, s=1.0):
    return x * s
def other_helper(x, s=1.0):
    return x - s

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 1.0
        self.register_buffer("buf", torch.zeros(3))
    def forward(self, x):
        y = self.lin(x) * self.scale + self.buf
        return y if self.training else y * 2

def make():
    c = 0.25
    m = M()
    def f(x):
        y = m(x) * G_F + G_I
        y = y + (1.0 if G_S == "add" else -1.0)
        y = y * G_T[0] + G_L[1] + G_D["k"] + len(G_L)
        y = y * OBJ.a + SL.s + NS.n + MOD.c + c + OBJ.inner.v + ITEMS[0].w
        y = KO.meth(y) * KO.prop + K.CONST + KO.twice(1.0)
        y = y + float(ARR[0]) + getattr(TG, "tag", 0.0)
        y = y + TG.sum() + TG.dim()
        y = helper(y)
        COUNT.append(G_I)              # writes that do not read the state they change
        NS.last = G_S
        SL.n = len(G_L)
        return y
    def set_c(v):
        nonlocal c
        c = v
    f.set_c, f.m = set_c, m
    return f

def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: set_global("G_F", r.choice([1.5, 2.5, -0.0, 0.0])),
        lambda r: set_global("G_I", r.choice([2, 3])),
        lambda r: set_global("G_S", r.choice(["add", "sub"])),
        lambda r: set_global("G_T", r.choice([(1, 2), (2, 2)])),
        lambda r: G_L.__setitem__(1, r.choice([2.0, 5.0])),
        lambda r: G_L.append(1.0) if len(G_L) < 4 else G_L.pop(),
        lambda r: G_D.__setitem__("k", r.choice([3.0, 4.0])),
        lambda r: setattr(OBJ, "a", r.choice([1.0, 2.0])),
        lambda r: setattr(SL, "s", r.choice([2.0, 3.0])),
        lambda r: setattr(NS, "n", r.choice([0.5, 1.5])),
        lambda r: setattr(MOD, "c", r.choice([4.0, 6.0])),
        lambda r: setattr(K, "CONST", r.choice([1.0, 7.0])),
        lambda r: setattr(KO, "CONST", 9.0) if "CONST" not in vars(KO) else delattr(KO, "CONST"),
        lambda r: setattr(K, "meth", r.choice([K.__dict__["meth"], meth2])),
        lambda r: setattr(K, "prop", r.choice([property(lambda s: 3.0), property(lambda s: 5.0)])),
        lambda r: ARR.__setitem__(0, r.choice([1.0, 8.0])),
        lambda r: setattr(TG, "tag", r.choice([0.5, 1.5])) if r.random() < 0.7 else vars(TG).pop("tag", None),
        lambda r: TG.set_(torch.full((r.choice([3, 1]),), r.choice([1.0, 2.0]), dtype=TG.dtype)),
        lambda r: set_global("TG", TG.to(r.choice([torch.float32, torch.float64]))),
        lambda r: setattr(helper, "__defaults__", (r.choice([1.0, 3.0]),)),
        lambda r: setattr(helper, "__code__", r.choice([helper.__code__, other_helper.__code__])),
        lambda r: f.set_c(r.choice([0.25, 0.75])),
        lambda r: setattr(f.m, "scale", r.choice([1.0, 2.0])),
        lambda r: f.m.train(r.random() < 0.5),
        lambda r: f.m.buf.fill_(r.choice([0.0, 1.0])),
        lambda r: setattr(f.m.lin.weight, "data", torch.ones(3, r.choice([3, 3, 2]))),
        lambda r: setattr(OBJ.inner, "v", r.choice([1.0, 2.0])),
        lambda r: setattr(ITEMS[0], "w", r.choice([1.0, 2.0])),
        lambda r: ITEMS.reverse() if hasattr(ITEMS[1], "w") else setattr(ITEMS[1], "w", 3.0),
        lambda r: setattr(MOD, "c", r.choice([4, 4.0, True])),
        lambda r: set_global("KO", r.choice([KO, K()])),
        lambda r: setattr(K, "twice", r.choice([lambda self, x: x * 3, Base.twice])),
        lambda r: setattr(Base, "twice", r.choice([lambda self, x: x * 4, Base.__dict__["twice"]])),
        lambda r: G_D.__setitem__(r.choice(["z", "k"]), 1.0),
        lambda r: TG.requires_grad_(r.random() < 0.3) if TG.is_leaf else None,
        lambda r: setattr(f.m.lin, "bias", None if r.random() < 0.3 else nn.Parameter(torch.ones(3))),
        lambda r: None,
        lambda r: None,
    ]

def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    return (list(COUNT), NS.last, SL.n, list(G_L))
"""


@pytest.fixture
def typed_checks_agree(monkeypatch):
    """On every dispatch, each variant's compiled guard function and its guard records'
    typed `check`s (first_failure) give the same answer: the two views of each guard kind
    (guard_kinds.py) agree on the states the fuzz produces."""
    from mlircap.capture.cache import _Captured
    orig = _Captured.dispatch
    seen = [0, 0]

    def dispatch(self, func, args):
        for v in self.variants:
            fast = bool(v.guard(args, func))
            why = v.first_failure(args, func)
            assert fast == (why is None), f"compiled guard says {fast}, typed checks say {why!r}"
            seen[fast] += 1
        return orig(self, func, args)
    monkeypatch.setattr(_Captured, "dispatch", dispatch)
    yield seen
    assert seen[0] and seen[1], seen  # both outcomes were exercised


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz(seed, typed_checks_agree):
    import torch
    x = torch.randn(3)
    run_program(f"SEED = {seed}\n" + PROGRAM, [(x,)] * 40, name=f"fuzz{seed}", cache_limit=1000)


SIDE_EFFECTS = """
import io, random, collections
OUT = io.StringIO()
RNG = random.Random(7)
DQ = collections.deque(maxlen=50)
TH = [0.0]
def make():
    def f(x):
        OUT.write("a")
        r = RNG.random() if x[0] > 0 else 0.5
        y = x * r
        if y.sum() > TH[0]:
            OUT.write("p")
            y = y + 1
        DQ.append(round(r, 3))
        n = int(x.abs().sum().item() * 2) % 3
        for _ in range(n):
            OUT.write("l")
        print("x", n, file=OUT)
        return y * n
    return f
def mutate(i, f):
    r = random.Random(SEED * 77 + i)
    if r.random() < 0.3:
        TH[0] = r.choice([0.0, 1.0, -1.0])
def state(f):
    return (OUT.getvalue(), RNG.getstate(), list(DQ))
"""


@pytest.mark.parametrize("seed,cache_limit", [(0, 1000), (1, 1000), (2, 3)])
def test_side_effect_fuzz(seed, cache_limit):
    """Uncapturable calls (file writes, random, deque appends, print) mixed with
    data-dependent breaks whose mid-replay guards keep failing: every call must run each
    side effect exactly once, in order, as eager does; also past cache_limit."""
    import torch
    g = torch.Generator().manual_seed(seed)
    pool = [torch.randn(3, generator=g) * s for s in (0.1, 1.0, 3.0)] + [-torch.ones(3), -torch.ones(3) * 0.2]
    calls = [(pool[int(i)],) for i in torch.randint(len(pool), (30,), generator=g)]
    run_program(f"SEED = {seed}\n" + SIDE_EFFECTS, calls, name=f"side{seed}", cache_limit=cache_limit,
                expect_warning=cache_limit < 30, allow_eager=cache_limit < 30)


PROGRAM2 = """
import random, types, collections, dataclasses, functools
import numpy as np
NA = np.arange(3.0)
NSC = np.float64(1.5)
RS = np.random.RandomState(0)
TB = torch.arange(6.0).view(2, 3)
DQ = collections.deque([1.0, 2.0], maxlen=3)
GD = {"a": 2.0, "b": 3.0}
@dataclasses.dataclass
class Cfg:
    alpha: float = 1.0
    mode: str = "sum"
CFG = Cfg()
def scale(x, s=2.0):
    return x * s
P = functools.partial(scale, s=2.0)

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act = nn.ReLU()
    def forward(self, x):
        return self.act(self.lin(x))

def make():
    hist = [1.0]
    fn = lambda v: v + 1
    m = M()
    def f(x):
        y = m(x)
        y = y + torch.from_numpy(NA).to(y.dtype).sum() + NA.shape[0] + NSC
        y = y + RS.randint(0, 3)   # an int from an uncapturable call: 3 values, few variants
        y = y + TB.sum(0)[:3].sum() + TB.shape[0] + TB.stride()[0]
        y = y + sum(DQ) + DQ[0] + len(DQ)
        for k, v in GD.items():
            y = y * v + len(k)
        y = y * CFG.alpha if CFG.mode == "sum" else y - CFG.alpha
        y = P(y) + hist[-1] + fn(1.0)
        return y
    def set_fn(g):
        nonlocal fn
        fn = g
    f.m, f.hist, f.set_fn = m, hist, set_fn
    return f

def _linear(seed):
    g = torch.Generator().manual_seed(seed)
    lin = nn.Linear(3, 3)
    lin.weight.copy_(torch.randn(3, 3, generator=g))
    lin.bias.copy_(torch.randn(3, generator=g))
    return lin

def _hook(mod, inp, out):
    return out * 3

def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: set_global("NA", r.choice([np.arange(3.0), np.arange(3), np.arange(4.0), np.ones(3, np.float32)])),
        lambda r: NA.__setitem__(1, r.choice([1.0, 5.0])) if NA.flags.writeable else None,
        lambda r: set_global("NSC", r.choice([np.float64(1.5), np.float32(1.5), 1.5, np.float64(2.5)])),
        lambda r: RS.seed(r.choice([0, 1])),
        lambda r: TB.t_(),
        lambda r: TB.resize_(r.choice([(2, 3), (3, 2), (6, 1)])),
        lambda r: setattr(TB, "data", torch.full((2, 3), r.choice([1.0, 2.0]), dtype=r.choice([torch.float32, torch.float64]))),
        lambda r: set_global("TB", r.choice([TB.t(), TB.contiguous(), TB.clone()])),
        lambda r: DQ.append(r.choice([1.0, 4.0])),
        lambda r: DQ.popleft() if len(DQ) > 1 else DQ.appendleft(3.0),
        lambda r: set_global("DQ", collections.deque(DQ, maxlen=r.choice([2, 3]))),
        lambda r: GD.update({k: GD.pop(k) for k in [r.choice(list(GD))]}),   # reinsert: new order
        lambda r: GD.__setitem__(r.choice(["a", "b"]), r.choice([2.0, 0.5])),
        lambda r: setattr(CFG, "alpha", r.choice([1.0, 3.0])),
        lambda r: setattr(CFG, "mode", r.choice(["sum", "diff"])),
        lambda r: P.keywords.__setitem__("s", r.choice([2.0, 3.0])),
        lambda r: set_global("P", functools.partial(scale, s=r.choice([2.0, 0.5]))),
        lambda r: f.hist.append(r.choice([1.0, 6.0])),
        lambda r: f.set_fn(r.choice([lambda v: v + 1, lambda v: v * 5])),
        lambda r: setattr(f.m, "act", r.choice([nn.ReLU(), nn.Tanh(), nn.Identity()])),
        lambda r: f.m.lin.register_forward_hook(_hook) if not f.m.lin._forward_hooks else f.m.lin._forward_hooks.clear(),
        lambda r: setattr(f.m.lin, "forward", lambda x: x * 2) if "forward" not in vars(f.m.lin) else delattr(f.m.lin, "forward"),
        lambda r: setattr(f.m, "lin", _linear(r.randrange(3))),
        lambda r: None,
    ]

def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    return (RS.get_state()[1], list(DQ), list(GD.items()), list(f.hist))
"""


@pytest.mark.parametrize("seed", [0, 2])
def test_guard_fuzz_numpy_tensor_metadata_containers(seed, typed_checks_agree):
    """The second program mutates what the first does not: a NumPy array's dtype and
    shape, NumPy scalar types, a RandomState's seed, a tensor's shape and strides in place
    (t_, resize_, .data =), a deque's contents and maxlen, a dict's order, dataclass fields,
    a partial's keywords, a closure cell holding a function and one holding a list, a
    submodule swapped, a forward hook added and removed, `forward` set on an instance."""
    import torch
    x = torch.randn(3)
    run_program(f"SEED = {seed}\n" + PROGRAM2, [(x,)] * 30, name=f"fuzz2_{seed}", cache_limit=1000)


PROGRAM3 = """
import random, types, collections
class Cfg:
    def __init__(self):
        self.hidden = 3.0
        self.act = "relu"
        self.table = {"a": 1.0, "b": 2.0}
        self.od = collections.OrderedDict(x=1.0, y=2.0)
CF = Cfg()
LST = [1.0]
D1 = {"l": LST, "n": 1.0}
D2 = {"l": LST}
NEST = {"inner": {"k": 2.0, "j": 1.0}}
def make_scaler(s):
    def scaler(v, k=1.0, *, z=0.0):
        return v * s * k + z
    return scaler
SC = make_scaler(2.0)
def g2(v, a=1.0):
    return v + a
def g3(v, a=1.0):
    return v - a

class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.gain = 2.0
    def forward(self, x):
        y = self.lin(x) * self.gain
        self.gain = max(0.25, self.gain * 0.9)   # written back (flow_writes.py)
        return y

class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Blk(), Blk()])
        self.cfg = CF
    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x * self.cfg.hidden

def make():
    m = M()
    def f(x):
        y = m(x) + CF.table["a"] + len(CF.table)
        y = y + (1.0 if CF.act == "relu" else 2.0)
        for k, v in CF.od.items():
            y = y * v + len(k)
        for k, v in CF.__dict__.items():   # the whole instance dict: keys and entries
            if type(v) is float:
                y = y + v
        y = SC(y) + g2(1.0) + NEST["inner"]["k"] + len(NEST["inner"])
        D1["l"].append(1.0)
        D2["l"].append(2.0)
        y = y + D1["n"]
        sd = m.state_dict()
        return y + len(sd)
    f.m = m
    return f

def _blk(k):
    b = Blk()
    with torch.no_grad():   # the same weights in both copies of the program
        b.lin.weight.copy_(torch.arange(9.0).view(3, 3) * 0.1 * k)
        b.lin.bias.fill_(0.1 * k)
    return b

def _cell(fn, v):
    fn.__closure__[0].cell_contents = v

def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: setattr(CF, "hidden", r.choice([3.0, 4.0])),
        lambda r: setattr(CF, "act", r.choice(["relu", "gelu"])),
        lambda r: CF.table.__setitem__("a", r.choice([1.0, 5.0])),
        lambda r: CF.table.__setitem__("c", 1.0) if "c" not in CF.table else CF.table.pop("c"),
        lambda r: setattr(CF, "table", {"a": r.choice([1.0, 6.0]), "b": 2.0}),
        lambda r: CF.od.move_to_end(r.choice(["x", "y"])),
        lambda r: setattr(CF, "extra", r.choice([0.5, 1.5])) if r.random() < 0.6 else vars(CF).pop("extra", None),
        lambda r: _cell(SC, r.choice([2.0, 3.0])),
        lambda r: setattr(SC, "__kwdefaults__", {"z": r.choice([0.0, 1.0])}),
        lambda r: setattr(SC, "__defaults__", (r.choice([1.0, 2.0]),)),
        lambda r: setattr(g2, "__code__", r.choice([g2.__code__, g3.__code__])),
        lambda r: D1.__setitem__("l", r.choice([[], D2["l"]])),
        lambda r: D2.__setitem__("l", r.choice([[0.5], D1["l"]])),
        lambda r: D1.__setitem__("n", r.choice([1.0, 2.0])),
        lambda r: NEST["inner"].__setitem__("k", r.choice([2.0, 3.0])),
        lambda r: NEST["inner"].update(z=1.0) if "z" not in NEST["inner"] else NEST["inner"].pop("z"),
        lambda r: NEST.__setitem__("inner", {"k": r.choice([2.0, 4.0]), "j": 1.0}),
        lambda r: setattr(f.m.blocks[r.randrange(2)], "gain", r.choice([2.0, 0.5, 1])),
        lambda r: f.m.blocks.__setitem__(r.randrange(2), _blk(r.randrange(1, 3))),
        lambda r: f.m.blocks.append(_blk(3)) if len(f.m.blocks) < 3 else f.m.blocks.__delitem__(2),
        lambda r: f.m.blocks[0].register_forward_hook(lambda mod, i, o: o * 3)
        if not f.m.blocks[0]._forward_hooks else f.m.blocks[0]._forward_hooks.clear(),
        lambda r: f.m.register_state_dict_pre_hook(lambda *a: None)
        if not f.m._state_dict_pre_hooks else f.m._state_dict_pre_hooks.clear(),
        lambda r: None,
    ]

def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    return (list(D1["l"]), list(D2["l"]), list(LST), list(CF.od.items()), [b.gain for b in f.m.blocks])
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_batched_guards(seed, typed_checks_agree):
    """What the batched guard checks (guard_batches.py) cover, mutated between calls: a
    config object's instance dict read whole (keys, entries, a dict and an OrderedDict in
    it, the OrderedDict reordered: no new version tag), one list reached through two dicts
    and rebound in either, a nested dict replaced or changed, a closure cell, the
    __defaults__ / __kwdefaults__ / __code__ of functions the program calls, ModuleList
    items swapped, appended and deleted, a block's float attribute (also written back by
    the call), forward and state_dict hooks."""
    import torch
    x = torch.randn(3)
    run_program(f"SEED = {seed}\n" + PROGRAM3, [(x,)] * 40, name=f"fuzz3_{seed}", cache_limit=1000)


PROGRAM4 = """
import random
class Sink:
    def write(self, s):
        if FLAGS["sink_writes"]:
            W2[0] = W2[0] + 1.0
            W2.append(0.5) if len(W2) < 3 else None
    def flush(self):
        pass
SINK = Sink()
W = [1.0, 0.5, 2.0]
W2 = [1.0, 0.5]
FLAGS = {"sink_writes": False}
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.weights = [1.0, 0.25, 3]
        self.lw = (1.0, 0.5)
        self.mode = 0
    def forward(self, x):
        loss = self.lin(x).pow(2).mean()            # a 0-d float32 operand
        loss = loss * self.lw[0] + x.sum() * self.lw[-1]
        y = loss * self.weights[0] + self.lin(x) * self.weights[-2]
        w, w2 = W, W2
        y = y + x * w[0]
        if self.mode == 1:
            y = y + sum(self.weights[:2]) + sum(self.lw)   # the floats by value
        elif self.mode == 2 and self.weights[1] > 0.3:
            y = y * 2
        elif self.mode == 3:
            print("step", file=SINK)                # may rewrite W2 (read below only)
        y = y * w[0] + self.weights[2] + w2[0] * len(w2)
        if self.mode == 4:
            self.weights[0] = self.weights[0] * 0.5
        return y * W[1] + len(W) + W2[-1]

def make():
    return M()

def mutate(i, m):
    r = random.Random(SEED * 1000 + i)
    ms = [
        lambda: m.weights.__setitem__(0, r.choice([1.0, 0.5, -0.0, 2.5])),
        lambda: m.weights.__setitem__(1, r.choice([0.25, 0.75, 1])),
        lambda: m.weights.__setitem__(2, r.choice([3, 4, 3.0])),
        lambda: setattr(m, "weights", [r.choice([1.0, 2.0]), 0.25, 3]),
        lambda: m.weights.append(1.0) if len(m.weights) < 4 else m.weights.pop(),
        lambda: setattr(m, "mode", r.randrange(5)),
        lambda: setattr(m, "lw", r.choice([(1.0, 0.5), (2.0, 0.5), (1.0, 1), (1.0, 0.5, 3.0), (0.5, -0.0)])),
        lambda: W.__setitem__(r.randrange(2), r.choice([1.0, 0.5, 3.0])),
        lambda: W.append(0.1) if len(W) < 4 else W.pop(),
        lambda: W2.__setitem__(0, r.choice([1.0, 2.0])) if len(W2) < 3 else W2.pop(),
        lambda: FLAGS.__setitem__("sink_writes", r.random() < 0.5),
        lambda: None,
    ]
    for _ in range(r.choice([1, 1, 2])):
        r.choice(ms)()

def state(m):
    return (list(W), list(W2), list(m.weights))
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_float_items(seed, typed_checks_agree):
    """Float items of lists (a module's loss weights, a global list, through a variable)
    and of a tuple attribute (reassigned between calls: other values, types, lengths)
    that are graph inputs (flow_roots._flow_item), with a 0-d float32 operand: items and
    types changed, the list replaced, grown and shrunk, the list also read by value
    (summed, branched on), written by the call itself; a list the program holds (read
    before an uncapturable call, its items after it) rewritten by that call (print to a
    user object: sources._new_epoch guards it again after the call)."""
    import torch
    x = torch.randn(3)
    run_program(f"SEED = {seed}\n" + PROGRAM4, [(x,)] * 40, name=f"fuzz4_{seed}", cache_limit=1000)


def test_state_read_before_and_after_an_uncapturable_call_that_writes_it():
    """An uncapturable call (print to a user object) writes, at a replay but not at the
    recording, state the frame read before it and reads again after it: the guard after the
    call fails, and the rest of the frame continues from there (resume_code.Continuation)
    with what the replay computed before the call (the state before it), instead of running
    the function again from its start (which read the written value before the call too)."""
    import torch
    c = run_program("""
class Sink:
    def write(self, s):
        if ON[0]:
            G[0] = G[0] + 1
    def flush(self):
        pass
SINK = Sink()
G = [1]                  # (a float would be a graph input read at each place: right)
ON = [False]
def make():
    def f(x):
        y = x * G[0]
        print("s", file=SINK)
        return y * G[0]
    return f
def mutate(i, f):
    ON[0] = i >= 2
""", [(torch.ones(2),)] * 4)
    assert c.stats.replays >= 1 and not any(v.eager for v in c.variants)


CONTINUED = """
import random
class Sink:
    def write(self, s):
        mode = MODE[0]
        if mode == 1:
            G[0] = G[0] + 1                  # an item read before and after
        elif mode == 2:
            GL[1] = GL[1] + 1.0              # a float item of a list the frame holds
        elif mode == 3:
            CFG["k"] = CFG["k"] * 2          # a dict entry read before and after
        elif mode == 4:
            TH[0] = -TH[0]                   # the threshold of a data-dependent branch after it
        elif mode == 5:
            M.scale = M.scale + 1            # an int attribute of the module
    def flush(self):
        pass
SINK = Sink()
G = [1]
GL = [1.0, 2.0]
CFG = {"k": 2}
TH = [0.0]
MODE = [0]
class Mod(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.scale = 2
    def forward(self, x):
        gl = GL
        y = self.lin(x) * G[0] + gl[0] + CFG["k"] * self.scale
        print("step", file=SINK)
        y = y * G[0] + gl[1] + GL[0] + CFG["k"] + self.scale
        if y.sum() > TH[0]:
            y = y + 1
        n = int(y.abs().sum().item()) % 3
        return y * n + G[0]
M = None
def make():
    global M
    M = Mod()
    return M
def mutate(i, m):
    r = random.Random(SEED * 100 + i)
    MODE[0] = r.choice([0, 0, 1, 2, 3, 4, 5])
    if r.random() < 0.2:
        G[0] = r.choice([1, 2])
    if r.random() < 0.2:
        globals()["GL"] = [1.0, r.choice([2.0, 3.0])]
def state(m):
    return (list(G), list(GL), dict(CFG), list(TH), m.scale)
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_state_written_by_an_uncapturable_call_fuzz(seed):
    """Variants of the pattern above in a module's forward, the call writing (or not) a
    different kind of state at each call: a list item, a float item of a list the frame
    holds (the global rebound between calls), a dict entry, the threshold of a data-dependent branch after the
    call, an int attribute of the module; an `.item()` break after it.  Every call agrees
    with eager, outputs and state."""
    import torch
    g = torch.Generator().manual_seed(seed)
    calls = [(torch.randn(3, generator=g),) for _ in range(30)]
    c = run_program(f"SEED = {seed}\n" + CONTINUED, calls, name=f"cont{seed}", cache_limit=1000)
    assert c.stats.replays >= 1


def test_state_written_by_a_call_a_helper_makes():
    """The uncapturable call is made by a helper the frame calls: a replay whose guard after
    it fails continues the helper's frame and then the captured frame from there (a chain of
    continuations, resumes._resume_outer), instead of recording the function again from its
    start, which read the written value before the call (before: a wrong result)."""
    import torch
    run_program("""
class Sink:
    def write(self, s):
        if ON[0]:
            G[0] = G[0] + 1
    def flush(self):
        pass
SINK = Sink()
G = [1]
ON = [False]
def log():
    print("s", file=SINK)
def make():
    def f(x):
        y = x * G[0]
        log()
        return y * G[0]
    return f
def mutate(i, f):
    ON[0] = i >= 2
""", [(torch.ones(2),)] * 4)


def test_float_items_of_a_held_list_whose_global_the_call_rebinds():
    """A list the frame holds (read through a global before an uncapturable call) whose float
    items are graph inputs after the call, the global rebound by the call to a list of the
    same length and item types: the replay binds the list before the call (sources._bind_held)
    and reads the items from it, not from the new list (before: the new list's items)."""
    import torch
    run_program("""
class Sink:
    def write(self, s):
        if ON[0]:
            globals()["GL"] = [5.0, 6.0]
    def flush(self):
        pass
SINK = Sink()
GL = [1.0, 2.0]
ON = [False]
def make():
    def f(x):
        gl = GL
        print("s", file=SINK)
        return x * gl[1]
    return f
def mutate(i, f):
    ON[0] = i >= 2
    globals()["GL"] = [1.0, 2.0]
""", [(torch.ones(2),)] * 4)


HELPER_CALLS = """
class Sink:
    def write(self, s):
        if ON[0] and s.strip():         # (print writes "s", then a newline)
            G[0] = 3 - G[0]
    def flush(self):
        pass
SINK = Sink()
G = [1]
ON = [False]
MODE = [0]
def log():
    print("s", file=SINK)
def scaled(t, k):
    print("t", file=SINK)
    return t * G[0] + k
def outer(t):
    u = t + 1
    log()
    return u * G[0]
class Helper:
    def __init__(self):
        self.w = 2
    def note(self, t):
        log()
        return t - G[0] * self.w
H = Helper()
def make():
    def f(x):
        y = x * G[0]
        if MODE[0] == 0:
            log()
        elif MODE[0] == 1:
            y = y + scaled(y, 3)        # a tensor under the helper on the caller's stack
        elif MODE[0] == 2:
            y = outer(y)                # two helpers deep
        else:
            y = (y, H.note(y))[1]       # a method, a tuple being built on the stack
        if G[0] > 1:                    # (the value read after the call decides a branch)
            y = y * 2
        return y * G[0]
    return f
def mutate(i, f):
    r = random.Random(SEED * 100 + i)
    ON[0] = r.random() < 0.5
    MODE[0] = r.choice([0, 1, 2, 3])
    if r.random() < 0.2:
        G[0] = r.choice([1, 2])
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_state_written_by_a_call_a_helper_makes_fuzz(seed):
    """Variants of the case above: the call made by a helper returning a value into an
    expression (a tensor under it on the caller's stack), by a helper of a helper, by a
    method; the call writing the state or not at each call.  Every call agrees with eager."""
    import torch
    g = torch.Generator().manual_seed(seed)
    calls = [(torch.randn(2, generator=g),) for _ in range(24)]
    c = run_program(f"import random\nSEED = {seed}\n" + HELPER_CALLS, calls, name=f"helper{seed}", cache_limit=1000)
    assert c.stats.replays >= 1


def test_state_written_by_a_call_after_the_frame_wrote_state():
    """The frame writes OUT["k"] before print to a sink that flips G[0]: the write is made
    before the call (flush_writes.py, external_calls._external_call), so a continuation can be
    taken after it and a replay whose guard on G[0] fails there goes on from the call, not from
    the function's start (which read the flipped G[0] before the call).  Was a strict xfail."""
    import torch
    run_program("""
class Sink:
    def write(self, s):
        if ON[0] and s.strip():
            G[0] = 3 - G[0]
    def flush(self):
        pass
SINK = Sink()
G = [2]
ON = [False]
OUT = {"k": 1}
def make():
    def f(x):
        y = x * G[0]
        OUT["k"] = 1
        print("s", file=SINK)
        if G[0] > 1:
            y = y * 2
        return y * G[0]
    return f
def mutate(i, f):
    ON[0] = i == 1
""", [(torch.ones(2),)] * 3)


HELD_ACROSS = """
class Sink:
    def write(self, s):
        if ON[0]:
            globals()["GL"] = [5.0, 6.0]
            globals()["W"] = torch.full((2,), 7.0)
            globals()["D"] = {"a": 3.0}
    def flush(self):
        pass
SINK = Sink()
GL = [1.0, 2.0]
W = torch.ones(2)
D = {"a": 1.0}
ON = [False]
def make():
    def f(x):
        gl, w, d = GL, W, D
        print("s", file=SINK)
        y = x * w + gl[0]
        if MODE[0] == 1:
            gl.append(4.0)            # written to the held list, not the new one
        elif MODE[0] == 2:
            y = y + GL[1]             # the global read again: the new list
        elif MODE[0] == 3:
            d["b"] = 2.0
        elif MODE[0] == 4:
            y = y * d["a"] + len(gl)
        return y
    return f
MODE = [0]
def mutate(i, f):
    ON[0] = i % 3 == 2
    MODE[0] = (i // 2) % 5
    globals()["GL"] = [1.0, 2.0]
    globals()["W"] = torch.ones(2)
    globals()["D"] = {"a": 1.0}
def state(f):
    return (GL, W, D)
"""


def test_objects_held_across_a_call_that_rebinds_their_globals():
    """A list, a tensor and a dict the frame read through globals before an uncapturable
    call that rebinds those globals: after the call the frame uses the objects it holds
    (graph inputs, items, writes to them, a length), and the global read again gives the
    new object.  Every call agrees with eager."""
    import torch
    run_program(HELD_ACROSS, [(torch.randn(2),) for _ in range(16)], cache_limit=64)


PROGRAM5 = """
import random, types, collections, dataclasses, enum, functools
class Mode(enum.Enum):
    ADD = 1
    MUL = 2
class Act(enum.IntEnum):
    RELU = 0
    TANH = 1
MODE = Mode.ADD
ACT = Act.RELU
@dataclasses.dataclass(frozen=True)
class Opts:
    k: float = 1.0
    n: int = 2
OPTS = Opts()
Pair = collections.namedtuple("Pair", "a b")
PAIR = Pair(1.0, 2)
def scale(a, x, s=1.0):
    return x * a + s
PP = functools.partial(scale, 2.0)
PN = functools.partial(functools.partial(scale, 1.0), s=0.5)
class A:
    def val(self):
        return 1.0
    @staticmethod
    def st(x):
        return x + 1
    @classmethod
    def cm(cls, x):
        return x * cls.F
    F = 2.0
class B(A):
    def val(self):
        return 4.0
OBJ = A()
OBJ.w = 1.0
class Dyn:
    def __getattr__(self, name):
        return TABLE.get(name, 0.0)
TABLE = {"g": 1.0}
DYN = Dyn()
SHAPE = [3]
TUP = ([1.0, 2.0], "t")
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.register_buffer("mask", torch.ones(3))
    def forward(self, x):
        return self.lin(x) * self.mask
def make():
    m = M()
    def f(x, a=1.0, *, b=2):
        y = m(x) * a + b
        y = y + 1.0 if MODE is Mode.ADD else y * 2.0
        y = y.relu() if ACT == Act.RELU else y.tanh()
        y = y + MODE.value + int(ACT)
        y = y * OPTS.k + OPTS.n + PAIR.a * PAIR[1]
        y = PP(y) + PN(y)
        y = y + OBJ.val() + OBJ.st(1.0) + OBJ.cm(1.0) + OBJ.w
        y = y + DYN.g
        y = y.view(SHAPE[0], -1).sum(-1) + torch.tensor([1.5]).sum()
        y = y + TUP[0][1]
        return y
    f.m = m
    return f
def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: set_global("MODE", r.choice(list(Mode))),
        lambda r: set_global("ACT", r.choice(list(Act))),
        lambda r: set_global("OPTS", dataclasses.replace(OPTS, k=r.choice([1.0, 2.0]))),
        lambda r: set_global("OPTS", Opts(n=r.choice([2, 3]))),
        lambda r: set_global("PAIR", PAIR._replace(a=r.choice([1.0, 3.0]))),
        lambda r: set_global("PAIR", Pair(PAIR.a, r.choice([2, 5]))),
        lambda r: set_global("PP", functools.partial(scale, r.choice([2.0, 0.5]))),
        lambda r: set_global("PN", functools.partial(functools.partial(scale, r.choice([1.0, 3.0])), s=0.5)),
        lambda r: setattr(OBJ, "__class__", r.choice([A, B])),
        lambda r: vars(OBJ).__setitem__("w", r.choice([1.0, 2.0])),
        lambda r: OBJ.__dict__.update(val=lambda: 9.0) if "val" not in vars(OBJ) else vars(OBJ).pop("val"),
        lambda r: setattr(A, "st", r.choice([staticmethod(lambda x: x + 1), staticmethod(lambda x: x - 5)])),
        lambda r: setattr(A, "F", r.choice([2.0, 3.0])),
        lambda r: setattr(A, "cm", r.choice([classmethod(lambda cls, x: x * cls.F), classmethod(lambda cls, x: -x)])),
        lambda r: TABLE.__setitem__("g", r.choice([1.0, 4.0])),
        lambda r: setattr(Dyn, "g", 7.0) if "g" not in vars(Dyn) else delattr(Dyn, "g"),
        lambda r: TUP[0].__setitem__(1, r.choice([2.0, 6.0])),
        lambda r: setattr(f, "__defaults__", (r.choice([1.0, 2.0]),)),
        lambda r: setattr(f, "__kwdefaults__", {"b": r.choice([2, 4])}),
        lambda r: f.m.lin.weight.requires_grad_(r.random() < 0.5),
        lambda r: f.m.register_buffer("mask", torch.full((3,), r.choice([1.0, 2.0]))),
        lambda r: torch.set_default_dtype(r.choice([torch.float32, torch.float64])),
        lambda r: None,
    ]
def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 29])   # 29: the default dtype set, then a buffer made (harness)
def test_guard_fuzz_enums_partials_classes_defaults(seed, typed_checks_agree):
    """Mutation kinds the other programs do not make: a global Enum / IntEnum member
    rebound (an `is` and an `==` branch, `.value`, int()), a frozen dataclass replaced
    (dataclasses.replace), a namedtuple replaced, a partial's positional argument and a
    nested partial, an instance's __class__ swapped, its __dict__ written through vars()
    (an entry, a method shadowed), a staticmethod / classmethod / class attribute replaced,
    a __getattr__ object's table and a class attribute shadowing it, a list inside a tuple
    written, the captured function's own __defaults__ / __kwdefaults__, a parameter's
    requires_grad, a buffer re-registered, the default dtype (torch.tensor([1.5]))."""
    import torch
    x = torch.randn(3)
    dt = torch.get_default_dtype()
    try:
        run_program(f"SEED = {seed}\n" + PROGRAM5, [(x,)] * 40, name=f"fuzz5_{seed}", cache_limit=1000)
    finally:
        torch.set_default_dtype(dt)


CLASS_SWAP = """
class A:
    def val(self):
        return 1.0
class B(A):
    def val(self):
        return 4.0
OBJ = A()
OBJ.w = 1.0
def make():
    def f(x):
        return x + OBJ.val() + OBJ.w
    return f
def mutate(i, f):
    OBJ.__class__ = B if i % 2 else A
"""

CLASSMETHOD_CLS = """
class A:
    @classmethod
    def cm(cls, x):
        return x * cls.F
    F = 2.0
OBJ = A()
def make():
    def f(x):
        return x + OBJ.cm(1.0)
    return f
def mutate(i, f):
    A.F = 3.0 if i % 2 else 2.0
"""

GETATTR_SHADOWED = """
TABLE = {"g": 1.0}
class Dyn:
    def __getattr__(self, name):
        return TABLE.get(name, 0.0)
DYN = Dyn()
def make():
    def f(x):
        return x + DYN.g
    return f
def mutate(i, f):
    if i % 2:
        Dyn.g = 7.0
    elif "g" in vars(Dyn):
        del Dyn.g
"""


@pytest.mark.parametrize("prog", [CLASS_SWAP, CLASSMETHOD_CLS, GETATTR_SHADOWED],
                         ids=["class_swapped", "classmethod_cls_attr", "getattr_shadowed"])
def test_attribute_lookups_the_fuzz_found_unguarded(prog):
    """Found by the program above (each gave a stale result on the second call): an
    identity-guarded object's __class__ swapped (reads.op_load_attr guards its type), a
    class attribute read through a classmethod's `cls` (a class not reached through a read:
    taken as its constant), an attribute `__getattr__` answers, then shadowed by a class
    attribute (guarded absent from the instance and its class)."""
    import torch
    run_program(prog, [(torch.ones(2),)] * 4, recompiles=1)


PROGRAM6 = """
import random, types, functools, math
class Act(nn.Module):
    def forward(self, x):
        return x.relu()
class K:
    def val(self):
        return 1.0
def val2(self):
    return 2.0
KO = K()
G_I = 2
G_F = 1.0
TW = torch.ones(3)
def helper(x):
    return x + 1
class Mul:
    def __call__(self, x):
        return x * 3
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.act = Act()
    def forward(self, x):
        return self.act(self.lin(x))
def make():
    m = M()
    k = 1.0
    def f(x):
        y = m(x) + KO.val() + k
        y = y * G_I + (G_F if G_F == G_F else 0.0)
        y = y + TW
        y = helper(y)
        return y
    f.m = m
    return f
def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: setattr(K.val, "__code__", r.choice([K.__dict__["val"].__code__, val2.__code__])),
        lambda r: set_global("G_I", r.choice([2, True, 2.0])),
        lambda r: set_global("G_F", r.choice([1.0, float("nan"), -0.0])),
        lambda r: set_global("TW", r.choice([torch.ones(3), nn.Parameter(torch.ones(3), requires_grad=False), torch.ones(3, dtype=torch.float64)])),
        lambda r: set_global("helper", r.choice([helper, functools.partial(lambda a, x: x + a, 2.0), Mul()])),
        lambda r: f.__closure__[[c for c in f.__code__.co_freevars].index("k")].__setattr__("cell_contents", r.choice([1.0, 5.0])),
        lambda r: None,
    ]
def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)
    if r.random() < 0.2:
        torch.set_grad_enabled(r.random() < 0.5)
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_codes_numbers_callables_grad_mode(seed, typed_checks_agree):
    """More kinds: a method's __code__ replaced on the class's function, a global int
    rebound to True / 2.0, a float to NaN / -0.0, a global tensor to a Parameter / another
    dtype, a helper rebound to a partial / a callable object, a closure cell written through
    `__closure__[i].cell_contents`, the grad mode switched between calls."""
    import torch
    x = torch.randn(3)
    try:
        run_program(f"SEED = {seed}\n" + PROGRAM6, [(x,)] * 40, name=f"fuzz6_{seed}", cache_limit=1000)
    finally:
        torch.set_grad_enabled(True)


def test_module_class_swapped():
    """A submodule's __class__ swapped (m.act.__class__ = Act2) keeps the module object: the
    type of each module a call runs is guarded (calls._guard_module_call), all of them in one
    C call (guard_batches.TypesHold: no measurable guard time on a 41-module Sequential)."""
    import torch
    run_program("""
class Act(nn.Module):
    def forward(self, x):
        return x.relu()
class Act2(Act):
    def forward(self, x):
        return x.tanh()
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.act = Act()
    def forward(self, x):
        return self.act(x) + 1
def make():
    return M()
def mutate(i, m):
    m.act.__class__ = Act2 if i % 2 else Act
""", [(torch.randn(3),)] * 4)


PROGRAM7 = """
import random
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.layers = nn.ModuleList([nn.Identity(), nn.ReLU()])
        self.register_buffer("extra", torch.ones(3))
    def forward(self, x):
        y = self.lin(x)
        g = self.lin.bias.grad
        if g is not None:
            y = y + g
        for l in self.layers:
            y = l(y)
        if self.extra is not None:
            y = y * self.extra
        return y
def make():
    return M()
def _mutations(m):
    return [
        lambda r: setattr(m.lin.bias, "grad", None if r.random() < 0.5 else torch.full((3,), r.choice([1.0, 2.0]))),
        lambda r: m.layers.__setitem__(1, r.choice([nn.ReLU(), nn.Tanh(), nn.Sigmoid()])),
        lambda r: m.layers.append(nn.Tanh()) if len(m.layers) < 4 else m.layers.__delitem__(-1),
        lambda r: m.register_buffer("extra", None if r.random() < 0.5 else torch.full((3,), r.choice([1.0, 3.0]))),
        lambda r: m.lin.bias.grad.mul_(2.0) if m.lin.bias.grad is not None else None,
        lambda r: None,
    ]
def mutate(i, m):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(m))(r)
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_grads_module_lists_buffers(seed, typed_checks_agree):
    """A parameter's .grad set to None / a tensor / scaled in place (a branch on it, the
    graph reading it), a ModuleList item replaced, appended, deleted (`del` rebuilds its
    `_modules` dict), a buffer re-registered as None / another tensor.  Found: a stale
    `_modules` dict (replays used the deleted layer, or raised KeyError from a mid-call
    guard) and `p.grad` unguarded (the graph's getattr got None): fixed (reads.py, sources.py,
    replay.py)."""
    import torch
    x = torch.randn(3)
    run_program(f"SEED = {seed}\n" + PROGRAM7, [(x,)] * 40, name=f"fuzz7_{seed}", cache_limit=1000)


PROGRAM_INTS = """
import random
G_N = 2
G_LIST = [1, 4]
G_S = 0.5
STEPS = [0, 1.0]
class Cfg:
    pass
CFG = Cfg()
CFG.k = 3
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.heads = 2
        self.bn = nn.BatchNorm1d(4, momentum=None)
        self.amax = 0.5
    def forward(self, x, n):
        y = self.lin(x) * self.heads + n
        y = self.bn(y) if self.training else y
        self.amax = max(self.amax * 0.5, y.abs().max().item())
        y = y / self.amax
        if self.heads > 2:
            y = y.relu()
        return y[:, :self.heads] * (y.sum() / self.heads), y.sum(dim=self.heads % 2) - n
def helper(t, k):
    return t * k - k // 2
def make():
    m = M()
    box = [1]
    def f(x, n):
        y, z = m(x, n)
        y = y * G_N + G_LIST[0] - G_LIST[1] * n
        y = helper(y, CFG.k) + (x.long() * box[0]).sum() + box[0]
        STEPS[0] += 1
        STEPS[1] = STEPS[1] * 0.5
        y = y * STEPS[0] + STEPS[1]
        w = torch.full_like(y, G_S) * y.mean().item()
        for _ in range(G_LIST[0] % 3):
            w = w + torch.full_like(w, G_S * n)
        if n % 3 == 0:
            w = w * -1
        return y.sum(), z.sum() * n, w.sum(), torch.zeros(CFG.k % 3 + 1) + n
    f.m, f.box = m, box
    return f

def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    return [
        lambda r: set_global("G_N", r.choice([2, 3, 5, -1])),
        lambda r: G_LIST.__setitem__(0, r.choice([1, 2, 3, 4])),
        lambda r: G_LIST.__setitem__(1, r.choice([4, 5, 256])),
        lambda r: G_LIST.__setitem__(0, G_LIST[0] + 1),
        lambda r: set_global("G_S", r.choice([0.5, 0.25, 1.5, -0.0])),
        lambda r: setattr(CFG, "k", r.choice([3, 4, 7])),
        lambda r: setattr(f.m, "heads", r.choice([1, 2, 3])),
        lambda r: f.box.__setitem__(0, r.choice([1, 2, 1000])),
        lambda r: f.m.train(r.random() < 0.5),
        lambda r: set_global("G_N", r.choice([2, 2.5])),
        lambda r: STEPS.__setitem__(0, r.choice([0, 5])),
        lambda r: STEPS.__setitem__(1, 1.0),
        lambda r: None,
    ]

def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    return (G_N, list(G_LIST), CFG.k, f.m.heads, f.box[0], f.m.amax, list(STEPS))
"""


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_guard_fuzz_changing_ints(seed, typed_checks_agree):
    """Ints that change between calls (an argument, a global, a global list item, an object
    and a module attribute, a closure list item; also a float global and an int becoming a
    float): after two values at a source they are followed (graph inputs in tensor
    arithmetic, guarded by the branch, the shape, the loop count, the dim they decide); a
    float handed to `full_like` and BatchNorm(momentum=None)'s momentum run between graphs
    once they change (scalar_inputs._flow_torch_step); a float attribute written back from
    an `.item()` and read again, an int and a float list item the function increments and
    decays (flow_writes.py).  Every call against eager."""
    import torch
    torch.manual_seed(seed)
    calls = [(torch.randn(3, 4), random.Random(seed * 7 + i).choice([1, 2, 3, 6, 9]))
             for i in range(40)]
    run_program(f"SEED = {seed}\n" + PROGRAM_INTS, calls, name=f"fuzz_ints{seed}", cache_limit=1000)


PROGRAM8 = """
import random, types
import numpy as np
NL = [[1.0, 2.0], [3.0]]
DD = {"k": 2.0}
ARR2 = np.arange(4.0)
TT = torch.arange(6.0).view(2, 3)
class Plain:
    pass
OBJ = Plain()
MOD2 = types.ModuleType("fuzzmod2")
MOD2.flag = True
MOD2.fn = torch.tanh
class Base:
    K = 1.0
class Sub(Base):
    pass
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.sub = nn.Linear(4, 4)
        self.cache = {}
        self.register_buffer("rb", torch.zeros(4))
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        h = self.fc(x)
        if hasattr(self, "extra"):
            h = h + self.extra
        g = getattr(self, "gate", None)
        if g is not None:
            h = g(h)
        if "bias" in self.cache:
            h = h + self.cache["bias"]
        else:
            self.cache.setdefault("seen", 0)
            self.cache["seen"] = min(self.cache["seen"] + 1, 2)
        h = h + self.rb.to(h.dtype)
        h = self.sub(h) * 2 if self.sub.training else self.sub(h)
        return h * self.calls if self.calls < 3 else h

def make():
    m = Block()
    box = {"w": 1.0}
    def f(x):
        y = m(x)
        y = y * NL[0][1] + len(NL) + DD.get("k", 0.5) + getattr(OBJ, "z", 0.0)
        y = y + float(ARR2.sum()) + ARR2.shape[0] + (1.0 if ARR2.dtype == np.float64 else 2.0)
        t = TT.sum() + TT.shape[0] * 10 + TT.stride()[0] + (3 if TT.is_contiguous() else 5)
        y = y + t + (7.0 if TT.requires_grad else 0.0) + (1.0 if TT.dtype == torch.float32 else 4.0)
        y = y * Sub.K + box["w"]
        y = MOD2.fn(y) if MOD2.flag else y
        return y
    def rebind(b):
        nonlocal box
        box = b
    f.m, f.box, f.rebind = m, (lambda: box), rebind
    return f

def _mutations(f):
    def set_global(name, v):
        globals()[name] = v
    m = f.m
    return [
        lambda r: setattr(m, "extra", r.choice([0.5, 2.0])) if "extra" not in vars(m) else delattr(m, "extra"),
        lambda r: m.add_module("gate", r.choice([nn.Tanh(), nn.ReLU()])) if "gate" not in m._modules else delattr(m, "gate"),
        lambda r: m.cache.__setitem__("bias", torch.full((4,), r.choice([1.0, 3.0]))) if "bias" not in m.cache else m.cache.pop("bias"),
        lambda r: m.cache.clear(),
        lambda r: m.rb.resize_(r.choice([4, 1])) if not m.rb.requires_grad else None,
        lambda r: setattr(m.rb, "data", torch.ones(4, dtype=r.choice([torch.float32, torch.float64]))),
        lambda r: setattr(m.fc.weight, "data", m.fc.weight.data.t()),
        lambda r: setattr(m.fc.weight, "data", m.fc.weight.data.contiguous()),
        lambda r: m.fc.weight.requires_grad_(not m.fc.weight.requires_grad),
        lambda r: m.sub.train(not m.sub.training),
        lambda r: setattr(m, "calls", r.choice([0, 1, 2])),
        lambda r: NL[0].__setitem__(1, r.choice([2.0, 5.0])),
        lambda r: NL.append([0.0]) if len(NL) < 4 else NL.pop(),
        lambda r: NL.insert(0, [1.0, r.choice([7.0, 8.0])]) if len(NL) < 4 else NL.pop(0),
        lambda r: DD.__setitem__("k", r.choice([2.0, 9.0])) if r.random() < 0.6 else DD.pop("k", None),
        lambda r: vars(OBJ).__setitem__("z", r.choice([1.0, 4.0])) if r.random() < 0.6 else vars(OBJ).pop("z", None),
        lambda r: setattr(ARR2, "shape", r.choice([(4,), (2, 2), (1, 4)])),
        lambda r: ARR2.__iadd__(r.choice([1.0, -1.0])),
        lambda r: set_global("ARR2", ARR2.astype(r.choice([np.float32, np.float64]))),
        lambda r: setattr(TT, "data", torch.arange(6.0).view(3, 2).t().to(TT.dtype)),
        lambda r: setattr(TT, "data", torch.arange(6.0).view(2, 3).to(TT.dtype)),
        lambda r: TT.resize_(r.choice([(2, 3), (3, 2)])) if not TT.requires_grad else None,
        lambda r: TT.requires_grad_(not TT.requires_grad) if TT.is_leaf else None,
        lambda r: set_global("TT", TT.detach().to(r.choice([torch.float32, torch.float64]))),
        lambda r: set_global("TT", torch.arange(8.0)[2:].view(2, 3)),
        lambda r: setattr(Sub, "K", r.choice([2.0, 3.0])) if "K" not in vars(Sub) else delattr(Sub, "K"),
        lambda r: setattr(Base, "K", r.choice([1.0, 6.0])),
        lambda r: setattr(MOD2, "flag", not MOD2.flag),
        lambda r: setattr(MOD2, "fn", r.choice([torch.tanh, torch.sigmoid, torch.relu])),
        lambda r: f.box().__setitem__("w", r.choice([1.0, 4.0])),
        lambda r: f.rebind({"w": r.choice([0.0, 2.0])}),
        lambda r: None,
    ]

def mutate(i, f):
    if i % 2:
        return   # each state called twice: the second call replays
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    m = f.m
    return (m.calls, dict(m.cache), [list(a) for a in NL], dict(DD), dict(f.box()), m.rb, m.fc.weight.stride())
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_lazy_attributes_caches_metadata(seed, typed_checks_agree):
    """Attributes and submodules a module gains and loses (hasattr / getattr(..., None)
    branches: the lazily created head's pattern), a dict cache filled, emptied and read by
    `in`, a Python counter reset, a submodule's training flag, a buffer resized and given
    another dtype through .data, a weight transposed through .data (same shape, other
    strides) and its requires_grad flipped, nested list items and lengths, a dict key and an
    instance __dict__ key removed and restored, a NumPy array reshaped in place, a global
    tensor given another shape, strides, storage offset, dtype and requires_grad, a class
    attribute set on a subclass (shadowing) and on its base, a module attribute flag and
    function, a closure cell rebound and its dict written.  Every call against eager, outputs
    and state."""
    import torch
    x = torch.randn(2, 4)
    run_program(f"SEED = {seed}\n" + PROGRAM8, [(x,)] * 40, name=f"fuzz8_{seed}", cache_limit=1000)


PROGRAM9 = """
import collections, os, random
STATS = {"calls": 0, "tokens": 0, "name": "g"}
ENV_KEY = "MLIRCAP_FUZZ9_FLAG_" + str(SEED)
class Adapter(nn.Module):
    def __init__(self, d, r=2):
        super().__init__()
        self.down = nn.Linear(d, r, bias=False)
        self.up = nn.Linear(r, d, bias=False)
        self.scale = 0.5
    def forward(self, x):
        return x + self.up(self.down(x)) * self.scale
class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.stats = {"calls": 0, "tokens": 0}
        self.cache = {"hits": 0}
        self.head = None
    def forward(self, x):
        self.stats["calls"] += 1
        self.stats["tokens"] = self.stats.get("tokens", 0) + x.shape[0]
        STATS["calls"] += 1
        h = self.fc(x)
        n = x.shape[-1]
        if n in self.cache:
            self.cache["hits"] += 1
        else:
            self.cache[n] = torch.ones(n) * 0.5
        h = h + self.cache[n]
        if self.stats["calls"] > 50:
            h = h * 2
        h = h * min(1.0, self.stats["calls"] / 5) + self.stats.get("bias", 0.0)
        if self.head is None:
            self.head = nn.Linear(h.shape[-1], 4)
        h = self.head(h)
        if not hasattr(self, "adapter"):
            self.adapter = Adapter(h.shape[-1])
        h = self.adapter(h)
        if os.environ.get(ENV_KEY, "0") == "1":
            h = torch.tanh(h)
        return h + nn.Softmax(dim=-1)(h) * STATS["calls"] % 4

def make():
    m = Block()
    def f(x):
        return m(x)
    f.m = m
    return f

def _mutations(f):
    m = f.m
    return [
        lambda r: m.stats.__setitem__("calls", r.choice([0, 2, 7, 100])),
        lambda r: m.stats.__setitem__("calls", r.choice([2.5, True])),
        lambda r: m.stats.__setitem__("bias", r.choice([1.0, -2.0])) if "bias" not in m.stats else m.stats.pop("bias"),
        lambda r: m.stats.pop("tokens", None),
        lambda r: setattr(m, "stats", r.choice([{"calls": 1}, collections.OrderedDict(calls=3, tokens=1)])),
        lambda r: STATS.__setitem__("calls", r.choice([0, 5, -3])),
        lambda r: STATS.__setitem__("extra", 1) if "extra" not in STATS else STATS.pop("extra"),
        lambda r: m.cache.clear() if r.random() < 0.5 else m.cache.__setitem__("hits", 0),
        lambda r: m.cache.__setitem__(4, torch.full((4,), r.choice([1.0, 3.0]))),
        lambda r: setattr(m, "head", None),
        lambda r: delattr(m, "adapter") if "adapter" in m._modules else None,
        lambda r: setattr(m.adapter, "scale", r.choice([0.5, 2.0])) if "adapter" in m._modules else None,
        lambda r: os.environ.__setitem__(ENV_KEY, r.choice(["0", "1"])),
        lambda r: os.environ.pop(ENV_KEY, None),
        lambda r: None,
    ]

def mutate(i, f):
    if i % 2:
        return   # each state called twice: the second call replays
    r = random.Random(SEED * 1000 + i)
    torch.manual_seed(SEED * 1000 + i)   # (new modules the mutations make: the same in both copies)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)

def state(f):
    m = f.m
    return (dict(m.stats), {k: v for k, v in m.cache.items()}, dict(STATS), m.head is None,
            sorted(m._modules), os.environ.get(ENV_KEY))
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_guard_fuzz_dict_counters_made_modules_environment(seed, typed_checks_agree):
    """Int counters held in dicts (a module's stats dict and a global one, incremented,
    read back into a branch, a factor and a graph operand, `.get` of present and missing
    keys, `in` on a cache dict keyed by a size with a hit counter), reset, given a float or
    a bool, deleted, replaced by another dict or an OrderedDict between calls; modules the
    function makes (a head when it is None, an adapter when missing, a Softmax made in
    place: module_factories.py) reset or deleted by the program so a replay makes them
    again; an environment variable set, changed and removed.  Every call against eager,
    outputs and state (the RNG state included: the made modules draw their weights)."""
    import torch
    x = torch.randn(2, 4)
    run_program(f"SEED = {seed}\n" + PROGRAM9, [(x,)] * 40, name=f"fuzz9_{seed}", cache_limit=1000)


PROGRAM10 = """
import random, functools, weakref
import numpy as np
import torch.nn.modules.module as _mm
FLAGS = {"relu"}
FROZEN = frozenset({1, 2})
ORDER = ["a", "b", "c"]
TC = torch.tensor([1.0 + 2.0j, -1.0 + 0.5j])
TN = torch.tensor([1.0, -2.0, 3.0])
BASE = torch.arange(8.0)
TV = BASE[1:4]
TG = torch.ones(3)
WK = weakref.WeakKeyDictionary()
class _Box:
    pass
HB = _Box()
HB.hooks = []
HB.calls = []
HB.modes = []
@functools.lru_cache(maxsize=None)
def table(n):
    HB.calls.append(n)
    return tuple(0.5 * i for i in range(n))
NT = [3]
class Sub:
    def __init__(self, flag):
        self.flag = flag
class Cfg:
    def __init__(self):
        self.sub = Sub(True)
        self.k = 1.0
class Blk(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(3, 3)
    def forward(self, x):
        return self.lin(x)
ORIG_LIN_FWD = nn.Linear.forward
def lin_fwd2(self, x):
    return ORIG_LIN_FWD(self, x) * 0.5
def blk_call2(self, *a, **k):
    return a[0] - 1
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = Cfg()
        self.blk = Blk()
        self.bn = nn.BatchNorm1d(3)
    def forward(self, x):
        y = self.blk(x)
        if self.cfg.sub.flag:
            y = y * self.cfg.k
        y = self.bn(y)
        return y
def make():
    m = M()
    def f(x, s):
        y = m(x.view(1, 3).expand(2, 3).contiguous())
        y = y.relu() if "relu" in FLAGS else y.tanh()
        y = y + len(FLAGS) + sum(FROZEN) + (2 in FROZEN)
        for i, k in enumerate(ORDER):
            y = y + i * len(k)
        y = y + TC.real.sum() + TC.imag.sum() + TC.is_conj()
        y = y + (TN * 2).sum() + TN.is_neg()
        y = y + TV.sum() + TV.storage_offset()
        y = y + TG
        if m not in WK:
            WK[m] = 0
        WK[m] = min(WK[m] + 1, 3)
        y = y * s + WK[m]
        y = y + sum(table(NT[0]))
        if torch.are_deterministic_algorithms_enabled():
            y = y * 2
        return y
    f.m = m
    return f
def _mutations(f):
    m = f.m
    def set_global(name, v):
        globals()[name] = v
    def hook(kind):
        if HB.hooks:
            HB.hooks.pop().remove()
            return
        if kind == 0:
            HB.hooks.append(m.blk.register_forward_pre_hook(lambda mod, a: (a[0] * 2,)))
        elif kind == 1:
            HB.hooks.append(m.blk.register_forward_pre_hook(lambda mod, a, kw: ((a[0] + 1,), kw), with_kwargs=True))
        elif kind == 2:
            HB.hooks.append(_mm.register_module_forward_hook(lambda mod, a, o: o * 1.5 if isinstance(mod, nn.Linear) else None))
        elif kind == 3:
            HB.hooks.append(_mm.register_module_forward_pre_hook(lambda mod, a: None))
        elif kind == 4:
            HB.hooks.append(m.bn.register_forward_hook(lambda mod, a, o: o + 1, always_call=True))
    def ambient(k):
        # the calls after run under inference_mode / no_grad / neither (process-wide: each
        # copy enters and leaves its own, the same ones)
        while HB.modes:
            HB.modes.pop().__exit__(None, None, None)
        if k:
            HB.modes.append(torch.inference_mode() if k == 1 else torch.no_grad())
            HB.modes[-1].__enter__()
    return [
        lambda r: FLAGS.add("relu") if "relu" not in FLAGS else FLAGS.discard("relu"),
        lambda r: FLAGS.add(r.choice(["x", "yy"])),
        lambda r: set_global("FROZEN", frozenset(range(r.choice([1, 2, 3])))),
        lambda r: ORDER.reverse(),
        lambda r: ORDER.append("dd") if len(ORDER) < 5 else ORDER.pop(),
        lambda r: ORDER.__delitem__(0) if len(ORDER) > 1 else ORDER.insert(0, "e"),
        lambda r: setattr(m.cfg.sub, "flag", not m.cfg.sub.flag),
        lambda r: setattr(m.cfg, "sub", Sub(r.random() < 0.5)),
        lambda r: setattr(m.cfg, "k", r.choice([1.0, 3.0])),
        lambda r: setattr(nn.Linear, "forward", r.choice([lin_fwd2, ORIG_LIN_FWD])),   # (process-wide: both copies set the same)
        lambda r: setattr(Blk, "__call__", blk_call2) if "__call__" not in vars(Blk) else delattr(Blk, "__call__"),
        lambda r: hook(r.randrange(5)),
        lambda r: m.bn.train(not m.bn.training),
        lambda r: set_global("TC", TC.conj()),
        lambda r: set_global("TN", torch._neg_view(TN) if not TN.is_neg() else TN.resolve_neg()),
        lambda r: TV.set_(BASE.untyped_storage(), r.choice([0, 1, 4]), (3,), (1,)),
        lambda r: TV.as_strided_((3,), (r.choice([1, 2]),), r.choice([0, 2])),
        lambda r: TG.mul_(r.choice([2.0, 0.5])),
        lambda r: set_global("TG", TG + 1 if r.random() < 0.5 else TG.double()),
        lambda r: TG.requires_grad_(not TG.requires_grad) if TG.is_leaf else None,
        lambda r: WK.clear(),
        lambda r: table.cache_clear(),
        lambda r: NT.__setitem__(0, r.choice([2, 3, 4])),
        lambda r: torch.use_deterministic_algorithms(r.random() < 0.5),
        lambda r: None,
    ]
def mutate(i, f):
    if i % 2:
        return   # each state called twice: the second call replays
    r = random.Random(SEED * 1000 + i)
    with torch.no_grad():
        for _ in range(r.choice([1, 1, 2])):
            r.choice(_mutations(f))(r)
def state(f):
    return (sorted(FLAGS), list(ORDER), list(WK.values()), list(HB.calls), NT[0], TV, TG)
"""



@pytest.fixture
def process_state_restored():
    """What PROGRAM10's mutations change for the whole process, restored after the test:
    nn.Linear.forward, the global module hooks, the deterministic-algorithms flag."""
    import torch
    import torch.nn.modules.module as mm
    fwd = torch.nn.Linear.forward
    hooks = [mm._global_forward_hooks, mm._global_forward_pre_hooks]
    before = [set(h) for h in hooks]
    det = torch.are_deterministic_algorithms_enabled()
    yield
    torch.nn.Linear.forward = fwd
    for h, keys in zip(hooks, before):
        for k in [k for k in h if k not in keys]:
            del h[k]
    torch.use_deterministic_algorithms(det)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 4])
def test_guard_fuzz_sets_hooks_patched_classes_tensor_bits(seed, typed_checks_agree, process_state_restored):
    """Mutation kinds the programs above do not make: a set's members added / discarded
    (`in`, len) and a frozenset global rebound, a list the loop enumerates reversed, grown,
    its head deleted, a nested config attribute (m.cfg.sub.flag) flipped and its holder
    replaced, a library class's method monkeypatched for the process (nn.Linear.forward)
    and a submodule class given its own __call__, forward pre-hooks (also with kwargs),
    global module forward / pre hooks and an always_call forward hook registered and
    removed, a submodule's training flag alone, a global complex tensor rebound to its
    conjugate view and a float one to its negative view, a global view re-pointed in place
    (set_ with another storage offset, as_strided_ with other strides), a global tensor
    mutated in place vs rebound (another dtype, requires_grad), a WeakKeyDictionary counter
    cleared, an lru_cache'd helper's cache cleared and its argument changed, the
    deterministic-algorithms flag; the scalar argument switching between Python and NumPy
    floats, ints and bools.  Each state is called twice (the second call replays).  Found:
    the __call__ of a module class, the WeakKeyDictionary's contents (fixed in calls.py,
    tracer.py)."""
    import numpy as np
    import torch
    r = random.Random(seed)
    x = torch.randn(3)
    scalars = [2.0, 3, np.float64(2.0), np.float32(1.5), np.int64(3), True, np.float64(0.5), 1.5]
    calls, cur = [], 2.0
    for _ in range(40):
        if r.random() < 0.2:
            cur = r.choice(scalars)
        calls.append((x, cur))
    run_program(f"SEED = {seed}\n" + PROGRAM10, calls, name=f"fuzz10_{seed}", cache_limit=1000)


def test_grad_and_inference_mode_around_calls():
    """Calls made under no_grad, inference_mode, inference_mode(False), enable_grad (also
    nested in an outer no_grad), in random order: the forward branches on the grad and
    inference modes and makes a tensor whose is_inference() it returns; outputs,
    requires_grad, is_inference() and a BatchNorm's running statistics agree with eager."""
    import contextlib
    import copy
    import torch
    import torch.nn as nn
    from mlircap.capture import capture
    from harness import EAGER

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 3)
            self.bn = nn.BatchNorm1d(3)

        def forward(self, x):
            y = self.bn(self.lin(x))
            if torch.is_grad_enabled():
                y = y * 2
            if torch.is_inference_mode_enabled():
                y = y + 1
            return y, y.requires_grad, torch.ones(2).is_inference()

    torch.manual_seed(0)
    me = M()
    mc = copy.deepcopy(me)
    fc = capture(mc, EAGER)
    ctxs = [contextlib.nullcontext, torch.no_grad, torch.inference_mode, lambda: torch.inference_mode(False),
            torch.enable_grad]
    r = random.Random(0)
    for i in range(30):
        k, outer = r.randrange(len(ctxs)), r.random() < 0.3
        x = torch.randn(4, 3)
        with torch.no_grad() if outer else contextlib.nullcontext():
            with ctxs[k]():
                a = me(x)
            with ctxs[k]():
                b = fc(x)
        assert torch.equal(a[0], b[0]) and a[1:] == b[1:], (i, k, outer)
        assert a[0].requires_grad == b[0].requires_grad and a[0].is_inference() == b[0].is_inference(), (i, k)
        assert torch.equal(me.bn.running_mean, mc.bn.running_mean), i
    assert fc._mlircap_capture.stats.replays > 10
