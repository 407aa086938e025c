"""A float that changes between calls, handed as the scalar of an in-place or alpha-taking
operator (`p.add_(g, alpha=-lr)`, `p.addcdiv_(m, denom, value=-lr / bc1)`,
`v.addcmul_(g, g, value=1 - b2)`, `ema.mul_(d).add_(p, alpha=1 - d)`) from an argument or a
module's step counter, is a 0-d graph input, not a constant guarded by value (a recompile per
step of a hand-written optimizer or EMA).  The graph computes it in a form eager's kernel rounds
the same way (`a + alpha * b` is one fused multiply-add, as `addcmul(a, b, alpha)` is): every
call is compared with eager bit for bit (the harness runs the captured graphs eagerly), sizes
1003 so that the vectorized loops and their scalar tails both run."""
import torch

import mlircap
from harness import run_program

N = 1003


def _g(i):
    torch.manual_seed(100 + i)
    return torch.randn(N)


ADAM = """
class Opt(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("p", torch.randn(1003))
        self.register_buffer("m", torch.zeros(1003))
        self.register_buffer("v", torch.zeros(1003))
        self.register_buffer("ema", torch.randn(1003))
        self.step = 0

    @torch.no_grad()
    def forward(self, g, lr):
        self.step += 1
        b1, b2 = 0.9, 0.999
        self.m.mul_(b1).add_(g, alpha=1 - b1)
        self.v.mul_(b2).addcmul_(g, g, value=1 - b2)
        bc1 = 1 - b1 ** self.step
        bc2 = 1 - b2 ** self.step
        denom = (self.v.sqrt() / (bc2 ** 0.5)).add_(1e-8)
        self.p.addcdiv_(self.m, denom, value=-lr / bc1)
        d = min(0.999, (1 + self.step) / (10 + self.step))
        self.ema.mul_(d).add_(self.p, alpha=1 - d)
        self.p.sub_(g, alpha=lr * d)
        return self.p.add(g, alpha=d), torch.add(self.p, g, alpha=lr).div_(lr)
def make():
    return Opt()
"""


def test_adam_and_ema_with_step_counter_and_lr_take_the_floats_as_inputs():
    """Bias corrections from the module's step counter, a decay warmup and a changing lr as
    alpha= / value= of add_, sub_, addcmul_, addcdiv_, mul_, div_ and out-of-place add: one
    graph for 6 calls, equal to eager bit for bit (before: a recompile every call)."""
    run_program(ADAM, [(_g(i), 0.01 * (i + 1)) for i in range(6)], recompiles=0, graphs=1)


def test_alpha_from_float_argument_float64_and_2d():
    """float64 and 2-d non-contiguous operands, alpha and value from float arguments."""
    run_program("""
def make():
    def f(p, g, h, lr, beta):
        p.add_(g.t(), alpha=-lr)
        p.addcmul_(g.t(), h, value=beta)
        return p.sub(h, alpha=beta * lr), p.addcdiv(g.t(), h.abs() + 1, value=-lr)
    return f
""", [(torch.randn(16, 24, dtype=torch.float64), torch.randn(24, 16, dtype=torch.float64),
       torch.randn(16, 24, dtype=torch.float64), 0.013 * (i + 1), 0.7 / (i + 1)) for i in range(5)],
        recompiles=0, graphs=1)


def test_compiled_hand_adam_one_variant_matches_eager():
    """Through the real backend: one variant over 6 steps, results within float32 rounding of
    eager (the backend's own lowering of a multiply-add may round the product apart)."""
    ns_e, ns_c = {}, {}
    src = "import torch\nimport torch.nn as nn\n" + ADAM
    exec(src, ns_e)
    exec(src, ns_c)
    torch.manual_seed(0)
    me = ns_e["make"]()
    torch.manual_seed(0)
    mc = ns_c["make"]()
    cf = mlircap.compile(mc)
    for i in range(6):
        re = me(_g(i), 0.01 * (i + 1))
        rc = cf(_g(i), 0.01 * (i + 1))
        for a, b in zip(re, rc):
            torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6)
        for k, v in me.state_dict().items():
            torch.testing.assert_close(mc.state_dict()[k], v, rtol=1e-5, atol=1e-6)
    assert len(cf._call.variants) == 1, cf.explain().recompile_reasons


def test_counter_of_an_object_read_in_a_no_grad_decorated_method():
    """`@torch.no_grad() def step(self)` of a plain object reached through a closure (a
    hand-written optimizer, an EMA helper): torch's wrapper of the decorated method, untraced,
    took the object as an argument, and a call of untraced code guarded everything it may read
    by value: the step counter recompiled every call.  The wrapper only hands its arguments to
    the traced method: the object's counter and floats are read lazily there (bench/heldout4.py
    hand_adam: 4 recompiles in 5 calls, then eager)."""
    run_program("""
class Opt:
    def __init__(self):
        self.p = torch.randn(1003)
        self.m = torch.zeros(1003)
        self.step = 0
        self.lr = 0.01

    @torch.no_grad()
    def update(self, g):
        self.step += 1
        self.m.mul_(0.9).add_(g, alpha=0.1)
        bc = 1 - 0.9 ** self.step
        self.p.add_(self.m, alpha=-self.lr / bc)
        return self.p.clone()
def make():
    opt = Opt()
    def f(g):
        return opt.update(g) * 2
    return f
""", [(_g(i),) for i in range(6)], recompiles=0, graphs=1)


def test_float_handed_through_a_no_grad_decorated_function_and_returned():
    """A float argument handed to a `@torch.no_grad()` helper (used there as mul_'s operand)
    and a float the helper returns, returned by the captured function: torch's wrapper stood
    between the two traced frames, so the float was guarded where it entered and where it came
    back (a recompile per value); the wrapper passes both on unchanged."""
    run_program("""
@torch.no_grad()
def scaled(x, s):
    x.mul_(s)
    return s * 0.5
def make():
    def f(x, s):
        h = scaled(x, s)
        return x + 1, h
    return f
""", [(torch.randn(N), 0.1 * (i + 1)) for i in range(5)], recompiles=0, graphs=1)
