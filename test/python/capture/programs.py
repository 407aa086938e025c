"""Feature programs: (name, source, calls, expectations).  Each source defines make()
returning a function or module; optional mutate(i, obj) runs before call i on both copies."""
import torch

torch.manual_seed(1234)


from dataclasses import dataclass  # noqa: E402


@dataclass
class Cfg:
    scale: float
    act: str


def R(*s, **kw):
    return torch.randn(*s, **kw)


X34, X54, X34b = R(3, 4), R(5, 4), R(3, 4)
XD = R(3, 4, dtype=torch.float64)
XN = R(3, 4).t()  # non-contiguous (stride change)
P = []


import functools  # noqa: E402


def _scale(x, s):
    return x * s


_P2 = functools.partial(_scale, s=2.0)
_P3 = functools.partial(_scale, s=3.0)


def prog(name, src, calls, graphs=None, recompiles=None, breaks=None, **kw):
    P.append(dict(name=name, src=src, calls=calls, graphs=graphs, recompiles=recompiles, breaks=breaks, **kw))


SHAPES = [(X34,), (X34b,), (X54,), (XD,), (X34,)]

# ---------------------------------------------------------------- basics / control flow
prog("pointwise", """
def make():
    def f(x):
        return torch.sin(x) * 2 + x.cos()
    return f
""", SHAPES, graphs=3, recompiles=2)

prog("python_if_on_arg", """
def make():
    def f(x, flag):
        if flag:
            return x + 1
        return x - 1
    return f
""", [(X34, True), (X34, True), (X34, False), (X34, False)], graphs=2, recompiles=1)

prog("python_int_arg_loop", """
def make():
    def f(x, n):
        for i in range(n):
            x = x * 0.5 + i
        return x
    return f
""", [(X34, 3), (X34b, 3), (X34, 4)], graphs=2, recompiles=1)

prog("while_loop", """
def make():
    def f(x):
        i = 0
        while i < 4:
            x = x + i
            i += 1
        return x
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("comprehensions", """
def make():
    def f(xs):
        ys = [x * 2 for x in xs]
        d = {i: y.sum() for i, y in enumerate(ys)}
        s = sum(y.mean() for y in ys)
        return ys, d, s
    return f
""", [([X34, X34b],), ([X34b, X34],), ([X34, X34b, X34],)], graphs=2, recompiles=1)

prog("closure_cell", """
SCALE = [2.0]
def make():
    k = 3.0
    def f(x):
        return x * k
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("closure_mutated_between_calls", """
def make():
    box = {'k': 2.0}
    scale = 1.5
    def f(x):
        return x * scale + box['k']
    f.box = box
    return f
def mutate(i, f):
    if i == 2:
        f.box['k'] = 5.0
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=1, recompiles=0)   # (a float dict item: a graph input)

prog("nonlocal_counter", """
def make():
    count = 0
    def f(x):
        nonlocal count
        count += 1
        return x + 1
    f.get = lambda: count
    return f
def state(f):
    return f.get()
""", [(X34,), (X34b,), (X34,)], recompiles=2)

prog("star_args_kwargs", """
def make():
    def f(*xs, scale=1.0, **kw):
        out = sum(xs) * scale
        if kw.get('neg'):
            out = -out
        return out
    return f
""", [((X34, X34b), {}), ((X34, X34b), {'scale': 2.0}), ((X34b, X34), {'scale': 2.0}),
      ((X34, X34b), {'neg': True, 'scale': 2.0})], graphs=2, recompiles=1)   # scale: a graph input

prog("default_args", """
def make():
    def f(x, y=None, alpha=0.5):
        if y is None:
            y = torch.ones_like(x)
        return x * alpha + y
    return f
""", [(X34,), (X34, X34b), (X34b,), (X34, X34b, 2.0)], graphs=2, recompiles=1)   # alpha: a graph input

prog("globals_read", """
ALPHA = 2.0
MODE = 'relu'
def make():
    def f(x):
        y = x * ALPHA
        if MODE == 'relu':
            return torch.relu(y)
        return torch.tanh(y)
    return f
def mutate(i, f):
    global MODE, ALPHA
    if i == 2: MODE = 'tanh'
    if i == 3: ALPHA = 3.0
""", [(X34,), (X34b,), (X34,), (X34,), (X34b,)], graphs=3, recompiles=2)

prog("global_write", """
CALLS = 0
LAST = None
def make():
    def f(x):
        global CALLS, LAST
        LAST = x.sum()
        return x + 1
    return f
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("global_counter_recompiles", """
STEP = 0
def make():
    def f(x):
        global STEP
        STEP += 1
        return x * STEP
    return f
""", [(X34,), (X34,), (X34,)], recompiles=2)

prog("global_tensor", """
W = torch.randn(4, 4)
def make():
    def f(x):
        return x @ W
    return f
def mutate(i, f):
    global W
    if i == 2: W = torch.ones(4, 4)
    if i == 3: W = torch.ones(4, 2)
""", [(X34,), (X34b,), (X34,), (X34,)], graphs=2, recompiles=1)

prog("tuple_dict_io", """
def make():
    def f(pair, d):
        a, b = pair
        return {'sum': a + b, 'prod': a * d['w'], 'n': len(d)}, (b, a)
    return f
""", [(((X34, X34b), {'w': X34}), {}), (((X34b, X34), {'w': X34b}), {})], graphs=1, recompiles=0)

prog("dict_keys_change", """
def make():
    def f(d):
        return sum(v * i for i, v in enumerate(d.values()))
    return f
""", [({'a': X34, 'b': X34b},), ({'a': X34b, 'b': X34},), ({'a': X34, 'c': X34b, 'd': X34},)], graphs=2, recompiles=1)

prog("string_formatting", """
def make():
    def f(x, tag):
        key = f"{tag}_{x.shape[0]}x{x.dim()}"
        return {key: x * 2, 'name': key.upper()}
    return f
""", [(X34, 'a'), (X34b, 'a'), (X34, 'b')], graphs=2, recompiles=1)

prog("isinstance_dispatch", """
def make():
    def f(x, y):
        if isinstance(y, torch.Tensor):
            return x + y
        if isinstance(y, (int, float)):
            return x * y
        return x
    return f
""", [(X34, X34b), (X34, 2.0), (X34, 'foo'), (X34b, X34)], graphs=2, recompiles=2)

prog("shape_dependent_python", """
def make():
    def f(x):
        if x.shape[0] > 4:
            x = x[:4]
        n = x.size(-1)
        return x.reshape(-1, n // 2).sum(0)
    return f
""", [(X34,), (X54,), (X34b,)], graphs=2, recompiles=1)

prog("recursion_user_fn", """
def rec(x, n):
    if n == 0:
        return x
    return rec(x * 2 - 1, n - 1)
def make():
    def f(x):
        return rec(x, 3)
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("generator_user", """
def gen(x, n):
    for i in range(n):
        yield x * i
def make():
    def f(x):
        return torch.stack(list(gen(x, 3)))
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("lambda_map_sorted", """
def make():
    def f(xs):
        ys = sorted(xs, key=lambda t: t.shape[0])
        return list(map(lambda t: t.relu(), ys))
    return f
""", [([X54, X34],), ([X54, X34b],)], graphs=1, recompiles=0)

prog("user_exception_raised", """
def make():
    def f(x, k):
        if k < 0:
            raise ValueError(f"bad k {k}")
        return x * k
    return f
""", [(X34, 2), (X34, -1), (X34b, 2), (X34, -1)], graphs=1, recompiles=0)

prog("user_exception_caught", """
def make():
    def f(x, d):
        try:
            s = d['scale']
        except KeyError:
            s = 1.0
        return x * s
    return f
""", [(X34, {}), (X34b, {}), (X34, {'scale': 3.0})], graphs=2, recompiles=1)

prog("no_grad_block", """
def make():
    lin = nn.Linear(4, 3)
    def f(x):
        with torch.no_grad():
            y = lin(x)
        z = lin(x)
        return y, z
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("requires_grad_input", """
def make():
    def f(x):
        return (x * x).sum()
    return f
""", [(R(3, 4, requires_grad=True),), (R(3, 4, requires_grad=True),), (X34,)], graphs=2, recompiles=1)

prog("inplace_on_input", """
def make():
    def f(x, y):
        x.add_(1)
        y.mul_(2)
        return x + y
    return f
""", [(X34, X34b), (X34b, X34)], graphs=1, recompiles=0)

prog("views_and_inplace", """
def make():
    def f(x):
        v = x.view(-1)
        v[0] = 100.0
        t = x.t()
        t.mul_(2)
        return x.sum(), v
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("setitem_slices", """
def make():
    def f(x, i):
        y = x.clone()
        y[:, i] = 0
        y[y < 0] = -1
        return y
    return f
""", [(X34, 1), (X34b, 1), (X34, 2)], graphs=2, recompiles=1)

prog("namedtuple_result", """
def make():
    def f(x):
        m = x.max(dim=1)
        return m.values + m.indices, m
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("rng_rand_dropout_fn", """
def make():
    def f(x):
        noise = torch.rand_like(x)
        return F.dropout(x, 0.5, training=True) + noise + torch.randn(3, 4)
    return f
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

# ---------------------------------------------------------------- modules
prog("mlp_module", """
class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 2)
    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))
def make():
    return MLP()
""", SHAPES[:3], graphs=2, recompiles=1)

prog("module_flag_attr", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.use_act = True
    def forward(self, x):
        y = self.lin(x)
        if self.use_act:
            y = torch.relu(y)
        return y
def make():
    return M()
def mutate(i, m):
    if i == 2: m.use_act = False
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1)

prog("train_eval_dropout", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.3)
    def forward(self, x):
        return self.drop(self.lin(x))
def make():
    return M()
def mutate(i, m):
    if i == 2: m.eval()
    if i == 4: m.train()
""", [(X34,), (X34,), (X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1)

prog("batchnorm_train_running_stats", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))
def make():
    return M()
def mutate(i, m):
    if i == 3: m.eval()
""", [(R(2, 3, 8, 8),), (R(2, 3, 8, 8),), (R(2, 3, 8, 8),), (R(2, 3, 8, 8),), (R(2, 3, 8, 8),)], graphs=2, recompiles=1)

prog("modulelist_loop", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(4, 4) for _ in range(3)])
    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x) + (x if i % 2 else 0)
        return self.layers[-1](x)
def make():
    return M()
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("moduledict_select", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.heads = nn.ModuleDict({'a': nn.Linear(4, 2), 'b': nn.Linear(4, 3)})
    def forward(self, x, which):
        return self.heads[which](x)
def make():
    return M()
""", [(X34, 'a'), (X34b, 'a'), (X34, 'b')], graphs=2, recompiles=1)

prog("sequential_nested", """
class Block(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d, d), nn.LayerNorm(d), nn.SiLU())
    def forward(self, x):
        return x + self.net(x)
def make():
    return nn.Sequential(Block(4), Block(4), nn.Linear(4, 1))
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("super_and_inheritance", """
class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        return self.lin(x)
class Child(Base):
    def forward(self, x):
        y = super().forward(x)
        return y * 2
def make():
    return Child()
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("property_access", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self._scale = 2.0
    @property
    def scale(self):
        return self._scale * 2
    def forward(self, x):
        return self.lin(x) * self.scale
def make():
    return M()
def mutate(i, m):
    if i == 2: m._scale = 3.0
""", [(X34,), (X34b,), (X34,)], graphs=2, recompiles=1)

prog("module_attr_write_counter", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.calls = 0
    def forward(self, x):
        self.calls += 1
        return self.lin(x)
def make():
    return M()
""", [(X34,), (X34b,), (X34,)], recompiles=0)   # a counter: written as calls + 1, no guard on its value

prog("module_tensor_attr_write", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.last = None
    def forward(self, x):
        y = self.lin(x)
        self.last_out = y.detach()
        return y
def make():
    return M()
def state(m):
    return m.__dict__.get('last_out')
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("buffer_update_inplace", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer('ema', torch.zeros(4))
    def forward(self, x):
        with torch.no_grad():
            self.ema.mul_(0.9).add_(x.mean(0) * 0.1)
        return x - self.ema
def make():
    return M()
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("buffer_reassign", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer('state', torch.zeros(4))
    def forward(self, x):
        self.state = self.state * 0.5 + x.sum(0)
        return self.state + 1
def make():
    return M()
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("list_append_side_effect", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.history = []
    def forward(self, x):
        y = x * 2
        self.history.append(y.sum())
        return y
def make():
    return M()
def state(m):
    return m.history
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("dict_and_set_mutation", """
LOG = {}
SEEN = set()
def make():
    def f(x, name):
        LOG[name] = x.mean()
        SEEN.add(name)
        return x + 1
    return f
""", [(X34, 'a'), (X34b, 'b'), (X34, 'a'), (X34b, 'c')], graphs=3, recompiles=2)

prog("dataclass_input", """
def make():
    def f(x, cfg):
        y = x * cfg.scale
        return torch.relu(y) if cfg.act == 'relu' else torch.sigmoid(y)
    return f
""", [(X34, Cfg(2.0, 'relu')), (X34b, Cfg(2.0, 'relu')), (X34, Cfg(2.0, 'sigmoid')), (X34, Cfg(3.0, 'sigmoid'))],
     graphs=3, recompiles=2)

prog("dataclass_output", """
from dataclasses import dataclass
@dataclass
class Out:
    logits: torch.Tensor
    loss: torch.Tensor
    n: int
def make():
    def f(x):
        l = x.sum(-1)
        return Out(logits=l, loss=l.mean(), n=x.shape[0])
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("custom_object_state", """
class Counter:
    def __init__(self):
        self.n = 0
        self.total = None
def make():
    c = Counter()
    def f(x):
        c.total = x.sum() if c.total is None else c.total + x.sum()
        return x * 2
    f.c = c
    return f
def state(f):
    return (f.c.n, f.c.total)
""", [(X34,), (X34b,), (X34,)], recompiles=1)

prog("module_method_helper", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def _norm(self, x, eps=1e-5):
        return x / (x.norm(dim=-1, keepdim=True) + eps)
    def forward(self, x):
        return self._norm(self.lin(x))
def make():
    return M()
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("staticmethod_classmethod", """
class M(nn.Module):
    FACTOR = 3
    @staticmethod
    def act(x):
        return x.clamp(min=0)
    @classmethod
    def fac(cls):
        return cls.FACTOR
    def forward(self, x):
        return self.act(x) * self.fac()
def make():
    return M()
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("functools_partial", """
import functools
def scale(x, s):
    return x * s
def make():
    g = functools.partial(scale, s=4.0)
    def f(x):
        return g(x) + 1
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("module_kwargs_forward", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x, mask=None, *, scale=1.0):
        y = self.lin(x) * scale
        if mask is not None:
            y = y.masked_fill(mask, 0.0)
        return y
def make():
    return M()
""", [((X34,), {}), ((X34b,), {}), ((X34,), {'mask': X34 > 0}), ((X34,), {'mask': X34b > 0, 'scale': 2.0})],
     graphs=2, recompiles=1)   # scale: a graph input

prog("attention_block", """
import math
class Attn(nn.Module):
    def __init__(self, d=8, h=2):
        super().__init__()
        self.h = h
        self.qkv = nn.Linear(d, 3 * d)
        self.o = nn.Linear(d, d)
    def forward(self, x, causal=True):
        B, T, C = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q, k, v = [t.view(B, T, self.h, C // self.h).transpose(1, 2) for t in (q, k, v)]
        att = q @ k.transpose(-2, -1) / math.sqrt(C // self.h)
        if causal:
            att = att.masked_fill(torch.triu(torch.ones(T, T, dtype=torch.bool), 1), float('-inf'))
        y = att.softmax(-1) @ v
        return self.o(y.transpose(1, 2).reshape(B, T, C))
def make():
    return Attn()
""", [(R(2, 5, 8),), (R(2, 5, 8),), (R(2, 6, 8),)], graphs=2, recompiles=1)

prog("rnn_cell_loop", """
class Cell(nn.Module):
    def __init__(self):
        super().__init__()
        self.cell = nn.GRUCell(4, 6)
    def forward(self, xs):
        h = torch.zeros(xs.shape[1], 6)
        outs = []
        for t in range(xs.shape[0]):
            h = self.cell(xs[t], h)
            outs.append(h)
        return torch.stack(outs)
def make():
    return Cell()
""", [(R(3, 2, 4),), (R(3, 2, 4),)], graphs=1, recompiles=0)

# ---------------------------------------------------------------- graph breaks
prog("item_break", """
def make():
    def f(x):
        y = x * 2
        m = y.abs().max().item()   # read after the graph, which divides by its float64 copy (deferred.py)
        return y / m + 1
    return f
""", [(X34,), (X34,), (X34 * 1,)], graphs=1, recompiles=0, breaks=0)

prog("item_value_changes", """
def make():
    def f(x):
        s = x.sum().item()   # a new value each call: computed in the graph from its copy (deferred.py)
        return x * s
    return f
""", [(X34,), (X34b,), (X34,)], breaks=0, recompiles=0)

prog("data_dependent_branch", """
def make():
    def f(x):
        y = x.sin()
        if y.sum() > 0:
            return y * 2
        return y - 1
    return f
""", [(torch.ones(3, 4),), (torch.ones(3, 4) * 2,), (-torch.ones(3, 4),), (torch.ones(3, 4),), (-torch.ones(3, 4) * 2,)],
     graphs=4, recompiles=1, breaks=2)

prog("bool_inplace_rollback", """
def make():
    def f(x, acc):
        acc.add_(x)
        if acc.mean() > 0:
            return acc * 2
        return acc * -1
    return f
""", [(torch.ones(2, 2), torch.zeros(2, 2)), (torch.ones(2, 2), torch.zeros(2, 2)), (-torch.ones(2, 2), torch.zeros(2, 2)),
      (torch.ones(2, 2), torch.zeros(2, 2))], recompiles=1)

prog("tolist_break", """
def make():
    def f(x):
        idx = x.argmax(-1).tolist()
        return [x[i, j] * 2 for i, j in enumerate(idx)]
    return f
""", [(torch.arange(12.).view(3, 4),), (torch.arange(12.).view(3, 4) + 1,)], graphs=2, recompiles=0)

prog("print_break", """
def make():
    def f(x):
        y = x + 1
        print("y sum shape", y.shape)
        return y * 2
    return f
""", [(X34,), (X34b,)], graphs=2, recompiles=0, breaks=1)

prog("uncapturable_call", """
import zlib
def make():
    def f(x):
        y = x * 2
        r = zlib.crc32(b"abc") > 5
        return y + 1 if r else y
    return f
""", [(X34,), (X34b,)], graphs=2, breaks=1, recompiles=0)

prog("rng_dropout_module_train", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
    def forward(self, x):
        return self.drop(torch.relu(self.lin(x))) + self.drop(x)
def make():
    return M()
""", [(X34,), (X34,), (X34,)], graphs=1, recompiles=0)

prog("loss_functions", """
def make():
    def f(logits, target, pred, y):
        ce = F.cross_entropy(logits, target, label_smoothing=0.1)
        mse = F.mse_loss(pred, y, reduction='sum')
        return ce + 0.5 * mse
    return f
""", [(R(4, 5), torch.tensor([0, 1, 2, 3]), R(4), R(4)), (R(4, 5), torch.tensor([4, 1, 0, 3]), R(4), R(4))],
     graphs=1, recompiles=0)

prog("dtype_conversion_and_factories", """
def make():
    def f(x):
        idx = torch.arange(x.shape[0])
        onehot = F.one_hot(idx, num_classes=5).to(x.dtype)
        return onehot[:, :x.shape[1]] + x.float().to(x.dtype)
    return f
""", [(X34,), (X34b,), (XD,)], graphs=2, recompiles=1)

prog("tensor_iteration", """
def make():
    def f(x):
        out = 0
        for row in x:
            out = out + row * 2
        return out
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0)

prog("stride_guard", """
def make():
    def f(x):
        return x.contiguous().view(-1) * 2
    return f
""", [(X34,), (R(4, 3).t(),), (X34b,)], graphs=2, recompiles=1)

prog("min_max_builtins_on_shapes", """
def make():
    def f(x, y):
        n = min(x.shape[0], y.shape[0])
        return x[:n] + y[:n], max(x.dim(), y.dim())
    return f
""", [(X34, X54), (X34b, X54), (X54, X34)], graphs=2, recompiles=1)

prog("cache_limit_warning", """
def make():
    def f(x, k):
        return x[:, :k] * 2
    return f
""", [(X34, i) for i in (0, 1, 2, 0, 3, 4, 1)], recompiles=2, cache_limit=3, expect_warning=True)  # a shape: guarded

prog("submodule_hook_added", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 2)
        self.seen = []
    def forward(self, x):
        return self.b(self.a(x))
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.a.register_forward_hook(lambda mod, inp, out: out * 2)
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1)

prog("sliding_window_list", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.window = []
    def forward(self, x):
        self.window.append(x.sum())
        if len(self.window) > 3:
            self.window.pop(0)
        return torch.stack(self.window).mean()
def make():
    return M()
def state(m):
    return m.window
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=4, recompiles=3)

prog("list_item_store_without_read", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.slots = [None, 1, 'keep']
    def forward(self, x):
        self.slots[0] = x.sum()
        return x * 2
def make():
    return M()
def mutate(i, m):
    if i == 3: m.slots[1] = 7
def state(m):
    return m.slots
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=1, recompiles=0)   # (item 0 written alone: no guard on the list)

prog("global_log_append_only", """
LOG = []
CACHE = {}
def make():
    def f(x, key):
        y = x.relu()
        LOG.append(('step', y.shape[0]))
        CACHE[key] = y
        return y
    return f
""", [(X34, 'k'), (X34b, 'k'), (X34, 'k'), (X54, 'k')], graphs=2, recompiles=1)

prog("manual_seed_inside", """
def make():
    def f(x):
        torch.manual_seed(123)
        return x + torch.rand(3, 4)
    return f
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0, breaks=1)

prog("logging_call_replayed", """
import logging
log = logging.getLogger("mlircap.test.prog")
def make():
    def f(x):
        y = x.tanh()
        log.debug("computed %s", tuple(y.shape))
        return y * 3
    return f
""", [(X34,), (X34b,)], graphs=1, recompiles=0, breaks=0)   # not enabled for DEBUG: a no-op, guarded

prog("autocast_inside_falls_back", """
def make():
    w = torch.randn(4, 4)
    def f(x):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = x @ w
        return y.float() + 1
    return f
""", [(X34,), (X34b,)], allow_eager=True)

prog("class_method_monkeypatched", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def act(self, y):
        return y.relu()
    def forward(self, x):
        return self.act(self.lin(x))
def make():
    return M()
def mutate(i, m):
    if i == 2:
        type(m).act = lambda self, y: y.sigmoid()
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1)

prog("hash_id_nondeterminism", """
def make():
    def f(x):
        o = object()
        return x * (2 if id(o) % 2 == 0 else 3)
    return f
""", [(X34,), (X34b,), (X34,)], allow_eager=True)

prog("aliasing_result_stored", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        out = {'y': self.lin(x), 'extra': [x.sum()]}
        self.last = out
        self.last_extra = out['extra']
        return out
def make():
    return M()
def state(m):
    return (m.last is m.__dict__.get('last'), m.last['extra'] is m.last_extra)
""", [(X34,), (X34b,), (X34,)], graphs=1, recompiles=0)

prog("vars_and_dunder_dict_reads", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.shift = 1.0
    def forward(self, x):
        return x * vars(self)['scale'] + self.__dict__['shift']
def make():
    return M()
def mutate(i, m):
    if i == 2: m.scale = 3.0
    if i == 3: m.shift = -1.0
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=1, recompiles=0)   # (float items of vars(self): graph inputs)

prog("class_attribute_changed", """
class M(nn.Module):
    SCALE = 2.0
    def forward(self, x):
        return x * self.SCALE
class Obj:
    OFFSET = 1
def make():
    o = Obj()
    m = M()
    def f(x):
        return m(x) + o.OFFSET
    f.m = m
    return f
def mutate(i, f):
    if i == 2: type(f.m).SCALE = 9.0
    if i == 3: Obj.OFFSET = 5
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=3, recompiles=2)

prog("attr_list_sorted_in_place", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.vals = [3, 1, 2]
    def forward(self, x):
        self.vals.sort()
        return x * self.vals[0]
def make():
    return M()
def mutate(i, m):
    if i == 2: m.vals.append(0)
def state(m):
    return m.vals
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=4, recompiles=3)

prog("getattr_by_name", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Linear(4, 4)
        self.which = 'a'
    def forward(self, x):
        return getattr(self, self.which)(x) if hasattr(self, 'a') else x
def make():
    return M()
def mutate(i, m):
    if i == 2: m.which = 'b'
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1)

prog("config_dict_nested_mutation", """
CFG = {'layers': [1, 2], 'act': 'relu'}
def make():
    def f(x):
        for k, v in CFG.items():
            if k == 'act' and v == 'relu':
                x = x.relu()
        return x * sum(CFG['layers'])
    return f
def mutate(i, f):
    if i == 2: CFG['layers'].append(10)
    if i == 3: CFG['act'] = 'none'
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=3, recompiles=2)

prog("parameters_replaced_frozen_updated", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.l = nn.Linear(4, 4)
    def forward(self, x):
        return self.l(x)
def make():
    return M()
def mutate(i, m):
    if i == 1:
        with torch.no_grad(): m.l.weight.add_(1.0)   # optimizer-style in-place update
    if i == 2: m.l.weight = nn.Parameter(torch.ones(4, 4))
    if i == 3: m.l.bias.requires_grad_(False)
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=3, recompiles=2)

prog("tensor_error_caught", """
def make():
    def f(x):
        try:
            return x @ x
        except RuntimeError:
            return x.t() @ x
    return f
""", [(X34,), (X34b,), (R(4, 4),), (X34,)], graphs=2, recompiles=1)

prog("parameters_walk_regularizer", """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(4, 4)
        self.b = nn.Sequential(nn.Linear(4, 2), nn.BatchNorm1d(2))
    def forward(self, x):
        y = self.b(self.a(x))
        reg = sum(p.pow(2).sum() for p in self.parameters())
        n_bufs = len(list(self.buffers()))
        names = [n for n, _ in self.named_modules()]
        return y.sum() + 1e-3 * reg + n_bufs, names
def make():
    return M()
def mutate(i, m):
    if i == 2:
        with torch.no_grad(): m.a.weight.mul_(0.5)
    if i == 3: m.a.bias = None
""", [(X34,), (X34b,), (X34,), (X34b,), (X34,)], graphs=2, recompiles=1)

prog("contextvar_state", """
import contextvars
MODE = contextvars.ContextVar("mode", default="train")
SCALE = contextvars.ContextVar("scale")
def inner(x):
    return x * 2 if MODE.get() == "double" else x
def make():
    def f(x):
        tok = MODE.set("double")
        try:
            y = inner(x)
        finally:
            MODE.reset(tok)
        SCALE.set(y.sum())          # net state change: replayed
        return y + (1 if MODE.get() == "train" else 0)
    return f
def mutate(i, f):
    if i == 2: MODE.set("eval")
def state(f):
    return SCALE.get(None)
""", [(X34,), (X34b,), (X34,), (X34b,)], graphs=2, recompiles=1, breaks=0)

prog("builtin_shadowed_later", """
def make():
    def f(x, xs):
        return x * len(xs)
    return f
def mutate(i, f):
    if i == 2:
        f.__globals__['len'] = lambda s: 10
""", [(X34, [1, 2]), (X34b, [1, 2]), (X34, [1, 2]), (X34b, [1, 2])], graphs=2, recompiles=1)

prog("partial_argument", """
import functools
def scale(x, s):
    return x * s
def make():
    def f(x, fn):
        return fn(x) + 1
    return f
""", [(X34, _P2), (X34b, _P2), (X34, _P3), (X34b, _P2)], graphs=2, recompiles=1)

prog("aliased_tensor_arguments", """
def make():
    def f(a, b):
        a.add_(1)
        return b * 2
    return f
def mutate(i, f):
    pass
""", [(X34, X34b), (X34b, X34)], graphs=1, recompiles=0)
