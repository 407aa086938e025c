"""Fixes found by bench/heldout5.py's programs, each minimized to the idiom that failed; every call
is compared with eager (outputs, arguments, module state) by the harness."""
from harness import run_program


def test_vmap_of_grad_of_an_unrebuildable_function_runs_eagerly_instead_of_raising():
    """DP-SGD's per-sample gradients, `vmap(grad(loss_fn))(params, x, y)` with loss_fn calling
    torch.func.functional_call: the replay cannot rebuild grad's function, so the call was left to
    the recorder, which recorded functorch's own ops on its wrapped tensors (no storage) and raised
    'Cannot access data pointer of Tensor that doesn't have storage' where eager ran (heldout5
    dp_sgd_vmap). The function now runs eagerly, as eager, with the call unrecorded."""
    run_program("""
from torch.func import functional_call, grad, vmap

def make():
    model = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 3))
    params = {k: v.detach().clone() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return F.cross_entropy(functional_call(model, p, (x[None],)), y[None])
    per_sample = vmap(grad(loss_fn), in_dims=(None, 0, 0))

    def step(x, y):
        g = per_sample(params, x, y)
        norms = torch.stack([g[k].flatten(1).norm(dim=1) for k in g]).norm(dim=0)
        for k in params:
            params[k].sub_(0.1 * g[k].mean(0))
        return norms, params["0.weight"].clone()
    return step
""", [(torch_randn(8, 6, seed=i), torch_randint(3, (8,), seed=i)) for i in range(3)], allow_eager=True)


def test_setitem_of_a_slice_updated_in_place_is_captured():
    """`f[:, 1] -= 9.8 * rho` (gravity on one column, SPH / N-body code) is
    f.__setitem__((slice, 1), f[:, 1].__isub__(...)): the value written is the very view it is
    written to. It was taken for an operand laid out otherwise over the written memory, and the
    whole function ran eagerly ('wrote in place to a tensor whose elements share memory'; heldout5
    sph_fluid). One graph for three calls now; a partial overlap still runs eagerly (the test
    below)."""
    run_program("""
def make():
    def step(pos, rho):
        f = pos * 2.0
        f[:, 1] -= 9.8 * rho
        f[0] += 1.0
        f[..., :1] *= rho[:, None]
        return f
    return step
""", [(torch_randn(5, 2, seed=i), torch_randn(5, seed=10 + i)) for i in range(3)], graphs=1, recompiles=0)


def test_setitem_from_an_overlapping_shifted_view_still_matches_eager():
    """x[1:] = x[:-1] writes from another layout of the same memory: still eager's result."""
    run_program("""
def make():
    def shift(a):
        x = a * 1.0
        x[1:] = x[:-1]
        return x
    return shift
""", [(torch_randn(6, seed=i),) for i in range(2)], allow_eager=True)


def test_namedtuple_made_from_a_generator_of_tensors_is_captured():
    """A streaming LSTM's carried state detached between calls, `self.state = State(*(s.detach()
    for s in self.state))`: f(*gen) of a namedtuple class turned gen into a tuple in the handler,
    untraced, so the detached tensors were of unknown origin and the whole function ran eagerly
    (heldout5 namedtuple_stream). The namedtuple's generated __new__ is traced code: CPython runs
    the generator, traced, as for a user function. One graph per state shape (None, then a
    State), each replayed."""
    run_program("""
import collections
from typing import NamedTuple

class State(NamedTuple):
    h: torch.Tensor
    c: torch.Tensor

Pair = collections.namedtuple("Pair", "a b")

class Streamer:
    def __init__(self):
        self.state = None
        self.pair = None

    def __call__(self, x):
        st = self.state if self.state is not None else State(x * 0, x * 0 + 1)
        h, c = torch.tanh(st.h + x), st.c * torch.sigmoid(x)
        self.state = State(*(s.detach() for s in (h, c)))
        self.pair = Pair(*(t * 2 for t in self.state))
        return h + c

def make():
    return Streamer()

def state(s):
    return s.state, s.pair
""", [(torch_randn(3, seed=i),) for i in range(4)], graphs=2, recompiles=1)


def test_int_counter_read_then_incremented_is_not_guarded_by_value():
    """A schedule reading a step counter before its increment, `lr = warmup(self.n)` ...
    `self.n += 1` (or `self.n = self.n + 1`), with no graph break: the read was followed, but
    the store of the followed int escaped (only floats were written back as expressions), so
    the counter was guarded by value: a recompile every step until cache_limit, then eager
    (heldout5 lr_sched_sgd's pattern without its backward). Three recompiles now (the first,
    before the counter is seen to change), one where the warmup branch ends, and one at
    step == warmup (the counter then is the very int object 3 the comparison's other operand is:
    ambiguous, guarded; 6 recompiles before); every call compared with eager."""
    run_program("""
import math

def warmup_decay(step, warmup=3, base=0.1):
    if step < warmup:
        return base * (step + 1) / warmup
    return base * math.exp(-0.1 * step)

class Opt:
    def __init__(self):
        self.p = torch.zeros(8)
        self.n = 0
        self.m = 0

    def __call__(self, g):
        lr = warmup_decay(self.n)
        self.p.add_(g, alpha=-lr)
        self.n += 1
        self.m = self.m + 2
        return self.p * 1.0

def make():
    return Opt()

def state(o):
    return o.p, o.n, o.m
""", [(torch_randn(8, seed=i),) for i in range(7)], recompiles=3)


def test_returned_float_computed_from_attributes_is_not_guarded():
    """An EMA's decay warmup returned to the caller, `d = min(self.decay, (1 + self.updates) /
    (10 + self.updates))` after `self.updates += 1` (timm's ModelEmaV2, heldout4 ema_update): a
    returned float whose expression read an attribute was guarded by value (the return is
    evaluated after the replay's writes), a recompile per update. The attributes are now bound
    as the replay starts, as for written-back floats: no recompile, d and the EMA as eager's."""
    run_program("""
class EMA:
    def __init__(self):
        self.shadow = torch.zeros(8)
        self.decay = 0.999
        self.updates = 0

    @torch.no_grad()
    def update(self, p):
        self.updates += 1
        d = min(self.decay, (1 + self.updates) / (10 + self.updates))
        self.shadow.mul_(d).add_(p, alpha=1 - d)
        return d

def make():
    ema = EMA()

    def step(p):
        d = ema.update(p)
        return ema.shadow * 2, d
    step.ema = ema
    return step

def state(f):
    return f.ema.shadow, f.ema.updates
""", [(torch_randn(8, seed=i),) for i in range(5)], recompiles=0, graphs=1)


def test_counter_after_a_draw_from_an_explicit_generator_is_not_guarded_by_value():
    """A Monte Carlo pricer owning a torch.Generator counts its paths after the draw
    (`z = torch.randn(n, generator=self.gen)` ... `self.paths += n`): the draw is a step between
    graphs and was counted as an uncapturable call that may write any state, so the counter read
    after it was guarded by value mid-replay: every call missed ('a data-dependent value changed
    (mid-replay guard)') until cache_limit, then eager (heldout5 mc_asian_option). A draw reads
    and writes its generator and tensors only; the counter is followed: one recompile (before it
    is seen to change), the generator's state and the draws as eager's."""
    run_program("""
import math

class Pricer:
    def __init__(self):
        self.gen = torch.Generator().manual_seed(1234)
        self.paths = 0

    def __call__(self, s0, n=64):
        z = torch.randn(n, 4, generator=self.gen)
        payoff = torch.clamp(s0 * torch.exp(0.2 * z.cumsum(1)).mean(1) - 1.0, min=0)
        self.paths += n
        return payoff.mean(), (payoff > 0).sum()

def make():
    return Pricer()

def state(p):
    return p.gen.get_state(), p.paths
""", [(1.0 + 0.1 * i,) for i in range(5)], recompiles=1)


def torch_randn(*shape, seed):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def torch_randint(high, shape, seed):
    import torch
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))
