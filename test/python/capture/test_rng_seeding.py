"""Seeding inside the captured function without losing it to eager:

* torch.testing's wrapper_set_seed (OpInfo's random ops) seeds, runs the op and restores
  torch's RNG in untraced library code: capture gave up on the whole function ("untraced
  library code ... changed the RNG state").  Its function is learned as a state writer and
  replayed whole between graphs from the next call on;
* a torch.Generator made and seeded in the function (`torch.Generator().manual_seed(s)`)
  and random ops drawing from it (`torch.randn(..., generator=g)`): replayed steps in order.

Same seeds, same values, same RNG state afterwards as eager (the harness checks torch's
global RNG state after every call)."""
import torch
import torch.nn.functional as F

from harness import run_program
from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731


def _calls(*shape, n=4):
    torch.manual_seed(5)
    return [(torch.randn(*shape),) for _ in range(n)]


def test_library_helper_that_reseeds_is_replayed_whole():
    c = run_program("""
from torch.testing._utils import wrapper_set_seed
def make():
    def f(x):
        y = x.sin() * 2
        z = wrapper_set_seed(F.dropout, y, p=0.5, training=True)
        return z + torch.rand_like(x), torch.rand(1)
    return f
""", _calls(16), allow_eager=True)
    # the first call may give up (the helper is learned there); later ones replay graphs
    assert c.stats.replays >= 2 and not any(v.eager for v in c.variants), [v.reason for v in c.variants]


def test_learned_helper_in_a_module_with_grad():
    from torch.testing._utils import wrapper_set_seed
    torch.manual_seed(0)
    ref = torch.nn.Linear(6, 6)
    m = torch.nn.Linear(6, 6)
    m.load_state_dict(ref.state_dict())

    def f(mod, x):
        return wrapper_set_seed(F.dropout, mod(x), p=0.3, training=True).sum(1)

    fast = capture(f, EAGER)
    for i in range(4):
        x = torch.randn(3, 6)
        torch.manual_seed(i)
        e = f(ref, x)
        e.sum().backward()
        torch.manual_seed(i)
        c = fast(m, x)
        c.sum().backward()
        assert torch.equal(e, c)
        assert torch.equal(ref.weight.grad, m.weight.grad)
    cap = fast._mlircap_capture
    assert cap.stats.replays >= 2 and not any(v.eager for v in cap.variants), [v.reason for v in cap.variants]


def test_generator_made_and_seeded_in_the_function():
    run_program("""
def make():
    def f(x, seed):
        y = x + 1
        g = torch.Generator().manual_seed(seed)
        n = torch.randn(x.shape, generator=g)
        u = torch.empty_like(x).uniform_(-1, 1, generator=g)
        p = torch.randperm(x.shape[0], generator=g)
        return (y * n + u)[p], torch.rand_like(x)
    return f
""", [(x, 3) for (x,) in _calls(6)[:2]] + [(x, 4) for (x,) in _calls(6)[2:]], recompiles=1)


def test_generator_held_by_the_module_advances_like_eager():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.g = torch.Generator().manual_seed(1234)
        self.fc = nn.Linear(4, 4)
    def forward(self, x):
        keep = torch.rand(x.shape, generator=self.g) > 0.3
        return self.fc(x * keep)
def make():
    return M()
def state(m):
    return m.g.get_state()
""", _calls(3, 4), recompiles=0)
