"""Guard-soundness fuzz of numbers followed from a module's counters (flows.py): a step counter
incremented in the call, a decay warmed up from it (`min(self.decay, (1 + step) / (warm +
step))`), a cosine learning rate, each returned, stored, handed to in-place / foreach / alpha /
clamp operators (scalar_inputs.py: graph inputs) and to Python branches; between calls the
counter is reset or set to another int or a float, the decay and warmup attributes are
changed, the update form switched and the EMA weights overwritten.  Every call is compared
with eager for results, module state and globals (harness.run_program: two copies)."""
import pytest

from harness import run_program
from test_fuzz_guards import typed_checks_agree  # noqa: F401  (the fixture: both guard views agree)

PROGRAM = """
import math, random
MODE = ["foreach"]
ESCAPE = [False]
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin, self.ema = nn.Linear(3, 3), nn.Linear(3, 3)
        self.ema.requires_grad_(False)
        self.step, self.decay, self.warm = 0, 0.99, 4
    def forward(self, x):
        with torch.no_grad():
            self.step += 1
            d = min(self.decay, (1 + self.step) / (self.warm + self.step))
            ep, sp = list(self.ema.parameters()), [p.detach() for p in self.lin.parameters()]
            if MODE[0] == "foreach":
                torch._foreach_mul_(ep, d)
                torch._foreach_add_(ep, sp, alpha=1 - d)
            elif MODE[0] == "lerp":
                torch._foreach_lerp_(ep, sp, 1 - d)
            else:
                for e, s in zip(ep, sp):
                    e.mul_(d).add_(s, alpha=1 - d)
        lr = 0.1 * math.cos(math.pi * min(self.step, 10) / 20)
        y = self.ema(x) * d + self.lin(x).clamp(-d, d)
        if self.step % 3 == 0:
            y = y + lr
        if ESCAPE[0]:   # an operator taking d as a constant: guarded by value (flows.py escape)
            y = F.leaky_relu(y, negative_slope=0.1 * d)
        self.last = lr
        return y, d, lr, self.step

def make():
    return M()

def mutate(i, f):
    r = random.Random(SEED * 1000 + i)
    k = r.randrange(9)
    if k == 0:
        f.step = 0
    elif k == 1:
        f.step = r.randrange(30)
    elif k == 2:
        f.step = float(r.randrange(5)) + 0.5
    elif k == 3:
        f.decay = r.choice([0.9, 0.99, 0.5])
    elif k == 4:
        f.warm = r.choice([2, 4, 10])
    elif k == 5:
        MODE[0] = r.choice(["foreach", "lerp", "loop"])
    elif k == 7:
        ESCAPE[0] = not ESCAPE[0]
    elif k == 6:
        with torch.no_grad():
            f.ema.weight.fill_(r.random())

def state(f):
    return (f.step, f.decay, f.warm, getattr(f, "last", None), list(MODE), list(ESCAPE))
"""


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_counter_float_fuzz(seed, typed_checks_agree):  # noqa: F811
    import torch
    g = torch.Generator().manual_seed(seed)
    calls = [(torch.randn(2, 3, generator=g),) for _ in range(30)]
    run_program(f"SEED = {seed}\n" + PROGRAM, calls, name=f"counter{seed}", cache_limit=1000)
