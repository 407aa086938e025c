"""Ops that return their tensor argument itself (`w.flatten(1)` of a matrix, `.contiguous()` of a
contiguous tensor, `.to()` / `.float()` / `.type_as()` converting nothing, `atleast_2d`,
`broadcast_tensors` of equal shapes) in training steps with two forward / backward passes per call.

2aa2e45 keeps such a result bound to the argument (a parameter stays the leaf its `.grad` and its
in-place update need); the op's node was left in the graph without users, and the split of a graph
into its gradient groups (graph_prep._separate_gradient_groups) gave up on any node without users:
a GAN step's graph computing the discriminator's loss and the generator's `fake` was one autograd
node again, the loss's backward freed its saved tensors and the generator loss's backward through
`fake` raised 'Trying to backward through the graph a second time' where eager runs. The same
error, with any op (also before 2aa2e45), where a hand-written power iteration's `u.div_(...)` under
no_grad made outputs without gradient history (u / v) that the split gave to the first group: the
in-place write ran in the generator's part, the discriminator's part read u, no split. Ops giving a
new object for the same shape (`reshape`, `expand_as`) run beside them. Compared with eager after
every call: outputs, gradients, parameters and buffers."""
import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from functorch.compile import make_boxed_func
from torch._functorch.aot_autograd import aot_module_simplified

import mlircap
from mlircap.capture import capture


def _aot(gm, ex):
    """aot_autograd as mlircap's backend runs it (one autograd node per graph), its graphs run as
    they are (no compile)."""
    return aot_module_simplified(gm, ex, fw_compiler=lambda g, e: make_boxed_func(g.forward))


# ops applied to matrices (a parameter, an input, a value the graph computed)
MATRIX_OPS = {
    "contiguous": lambda t: t.contiguous(),
    "to_same_dtype": lambda t: t.to(torch.float32),
    "float": lambda t: t.float(),
    "type_as": lambda t: t.type_as(t),
    "flatten_1": lambda t: t.flatten(1),
    "atleast_2d": torch.atleast_2d,
    "broadcast_tensors": lambda t: torch.broadcast_tensors(t, t)[0],
    "reshape_same_shape": lambda t: t.reshape(t.shape),
    "expand_as_same_shape": lambda t: t.expand_as(t),
}
# the same kind for the 1-d bias
VECTOR_OPS = {
    "contiguous": lambda t: t.contiguous(),
    "to_same_dtype": lambda t: t.to(torch.float32),
    "float": lambda t: t.float(),
    "type_as": lambda t: t.type_as(t),
    "flatten_1": lambda t: t.flatten(),
    "atleast_2d": torch.atleast_1d,
    "broadcast_tensors": lambda t: torch.broadcast_tensors(t, t)[0],
    "reshape_same_shape": lambda t: t.reshape(-1),
    "expand_as_same_shape": lambda t: t.expand_as(t),
}


def _close(a, b, what):
    if isinstance(a, (tuple, list)):
        assert len(a) == len(b), what
        for i, (x, y) in enumerate(zip(a, b)):
            _close(x, y, f"{what}[{i}]")
    elif a is None or b is None:
        assert a is b, what
    else:
        assert a.requires_grad == b.requires_grad, what
        torch.testing.assert_close(b.detach(), a.detach(), rtol=1e-5, atol=1e-6, msg=what)


def _compare(make, compile_fn, calls):
    """make() -> (step, state): the eager copy and the compiled copy from one seed, called with the
    same arguments and the same random state; outputs and state compared after every call."""
    torch.manual_seed(0)
    step_e, state_e = make()
    torch.manual_seed(0)
    step_c, state_c = make()
    fast = compile_fn(step_c)
    for i, args in enumerate(calls):
        torch.manual_seed(100 + i)
        want = step_e(*args)
        torch.manual_seed(100 + i)
        got = fast(*[a.clone() for a in args])
        _close(want, got, f"call {i} outputs")
        _close(state_e(), state_c(), f"call {i} state")
    assert torch.is_grad_enabled()
    c = fast._call if isinstance(fast, mlircap.api.Compiled) else fast._mlircap_capture
    assert c.stats.replays >= 1 and not any(v.eager for v in c.variants), \
        [v.reason for v in c.variants if v.eager]


class _PowerIterationLinear(nn.Module):
    """spectral_norm written by hand: the weight passed through `op` (the same object for
    flatten(1) of a matrix, as torch's _reshape_weight_to_matrix), its power iteration writing the
    u / v buffers with `torch.mv(..., out=)` under no_grad on every forward, the weight divided by
    its estimated largest singular value."""

    def __init__(self, n_in, n_out, op, vop):
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)
        self.register_buffer("u", F.normalize(torch.randn(n_out), dim=0))
        self.register_buffer("v", F.normalize(torch.randn(n_in), dim=0))
        self.op, self.vop = op, vop

    def forward(self, x):
        w = self.op(self.lin.weight)
        if self.training:
            with torch.no_grad():
                torch.mv(w, self.v, out=self.u)
                self.u.div_(self.u.norm() + 1e-12)
                torch.mv(w.t(), self.u, out=self.v)
                self.v.div_(self.v.norm() + 1e-12)
        sigma = torch.dot(self.u.clone(), torch.mv(w, self.v.clone()))
        return F.linear(self.op(x), w / sigma, self.vop(self.lin.bias))


def _gan(op, vop, power=False, hooks=False):
    """A GAN step (DCGAN / WGAN loop): the discriminator's loss on `fake.detach()` and its
    backward and step, then the generator's loss through `fake` and its backward and step. The
    discriminator passes its input, weight, bias and hidden value through the op."""
    G = nn.Sequential(nn.Linear(2, 4), nn.Tanh())
    D1 = _PowerIterationLinear(4, 3, op, vop) if power else nn.Linear(4, 3)
    D2 = nn.Linear(3, 1)
    feats = {}
    if hooks:
        D1.register_forward_hook(lambda m, i, o: feats.__setitem__("h", o))
        D2.weight.register_hook(lambda g: g * 0.5)
    optD = torch.optim.SGD([*D1.parameters(), *D2.parameters()], lr=0.1, momentum=0.9)
    optG = torch.optim.Adam(G.parameters(), lr=1e-2)

    def D(x):
        h = D1(x) if power else F.linear(op(x), op(D1.weight), vop(D1.bias))
        h = op(F.leaky_relu(h, 0.2))
        return F.linear(h, op(D2.weight), vop(D2.bias))

    def step(real):
        z = torch.randn(real.shape[0], 2)
        fake = G(z)
        d_loss = D(real).mean() - D(fake.detach()).mean()
        optD.zero_grad()
        d_loss.backward()
        optD.step()
        g_loss = -D(fake).mean()
        optG.zero_grad()
        g_loss.backward()
        optG.step()
        out = [d_loss.detach(), g_loss.detach(), fake.detach()]
        return out + ([feats["h"].detach()] if hooks else [])

    mods = (G, D1, D2)

    def state():
        ps = [p for m in mods for p in m.parameters()]
        return [p.detach().clone() for p in ps] + [p.grad for p in ps] + \
            [b.clone() for m in mods for b in m.buffers()]
    return step, state


_CALLS = [(torch.randn(5, 4),) for _ in range(4)]


@pytest.mark.parametrize("name", sorted(MATRIX_OPS))
def test_gan_step_op_returning_its_argument(name):
    """The ops on D's input, weight, bias and hidden value, both passes of the call, aot_autograd's
    one node per graph (each name raised 'backward through the graph a second time' on its
    second call without the fix, but reshape / expand_as: new objects)."""
    _compare(lambda: _gan(MATRIX_OPS[name], VECTOR_OPS[name]), lambda f: capture(f, _aot), _CALLS)


@pytest.mark.parametrize("name", ["flatten_1", "contiguous", "to_same_dtype", "reshape_same_shape"])
def test_gan_step_power_iteration_out_writes(name):
    """D's first layer a hand-written spectral norm: `torch.mv(w, v, out=u)` under no_grad writes
    its buffers on each of the call's three discriminator passes."""
    _compare(lambda: _gan(MATRIX_OPS[name], VECTOR_OPS[name], power=True), lambda f: capture(f, _aot), _CALLS)


@pytest.mark.parametrize("name", ["flatten_1", "float", "broadcast_tensors"])
def test_gan_step_hooks(name):
    """The same with a forward hook storing D's hidden value in a dict and a gradient hook on a
    parameter of D."""
    _compare(lambda: _gan(MATRIX_OPS[name], VECTOR_OPS[name], power=True, hooks=True),
             lambda f: capture(f, _aot), _CALLS)


def _two_steps(op, vop):
    """Two forward / backward passes per call on one network (two micro-batches, an update after
    each): the network's power-iteration layer stepped by an optimizer, the head by hand from its
    `.grad` under no_grad (`p.sub_(lr * p.grad)`), the op on the parameters, the input and the
    hidden value; the head's parameters read through the op after their update."""
    net = _PowerIterationLinear(4, 3, op, vop)
    head = nn.Linear(3, 2)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)

    def half(x):
        h = op(torch.relu(net(op(x))))
        loss = F.linear(h, op(head.weight), vop(head.bias)).pow(2).mean()
        opt.zero_grad()
        head.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        with torch.no_grad():
            head.weight.sub_(0.05 * head.weight.grad)
            head.bias.sub_(0.05 * head.bias.grad)
        return loss.detach()

    def step(x1, x2):
        return half(x1), half(x2), op(head.weight).sum().detach()

    def state():
        ps = [*net.parameters(), *head.parameters()]
        return [p.detach().clone() for p in ps] + [p.grad for p in ps] + [net.u.clone(), net.v.clone()]
    return step, state


@pytest.mark.parametrize("name", ["flatten_1", "contiguous", "broadcast_tensors", "expand_as_same_shape"])
def test_two_updates_per_call(name):
    """Compiled by mlircap (aot_autograd's trace of a graph reading `.grad` fails: that graph would
    run as it is)."""
    calls = [(torch.randn(5, 4), torch.randn(5, 4)) for _ in range(4)]
    _compare(lambda: _two_steps(MATRIX_OPS[name], VECTOR_OPS[name]), mlircap.compile, calls)


def test_spectral_norm_gan_step_compiled():
    """torch's spectral_norm parametrization on the discriminator, compiled by mlircap itself."""
    def make():
        G, D = nn.Linear(2, 4), nn.utils.parametrizations.spectral_norm(nn.Linear(4, 1))
        optD, optG = torch.optim.SGD(D.parameters(), lr=0.1), torch.optim.SGD(G.parameters(), lr=0.1)

        def step(real):
            fake = G(torch.randn(real.shape[0], 2))
            d_loss = D(real).mean() - D(fake.detach()).mean()
            optD.zero_grad()
            d_loss.backward()
            optD.step()
            g_loss = -D(fake).mean()
            optG.zero_grad()
            g_loss.backward()
            optG.step()
            return d_loss.detach(), g_loss.detach()

        def state():
            ps = [*G.parameters(), *D.parameters()]
            return [p.detach().clone() for p in ps] + [p.grad for p in ps] + [b.clone() for b in D.buffers()]
        return step, state
    _compare(make, mlircap.compile, [(torch.randn(3, 4),) for _ in range(4)])

