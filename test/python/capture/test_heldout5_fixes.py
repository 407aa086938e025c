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


def torch_randn(*shape, seed):
    import torch
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def torch_randint(high, shape, seed):
    import torch
    return torch.randint(0, high, shape, generator=torch.Generator().manual_seed(seed))
