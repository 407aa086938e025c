"""RNG state written inside a captured function: `torch.manual_seed`, `Generator.manual_seed`,
`torch.random.fork_rng`, `get/set_rng_state`.  Each runs eagerly between graphs (a graph break),
so the random ops of the graph after it draw from the state it set; every call's outputs and
torch's RNG state after it equal eager's (run_program checks both), also when a mid-replay guard
fails after the RNG was written (the next variant continues from the state the call left)."""
import torch

from harness import run_program

X = torch.randn(3)
ONES, NEG = torch.ones(3), -torch.ones(3)


def test_manual_seed_between_random_ops():
    run_program("""
def make():
    def f(x):
        a = torch.rand(3) + x
        torch.manual_seed(123)
        b = torch.rand(3) * x
        return a, b, torch.randn(2)
    return f
""", [(X,), (X * 2,), (X,)], graphs=2, recompiles=0, breaks=1)


def test_generator_method_manual_seed():
    run_program("""
def make():
    def f(x):
        gen = torch.default_generator
        a = torch.randn(3) + x
        gen.manual_seed(7)
        return a, torch.randn(3) + x
    return f
""", [(X,), (X * 2,), (X,)], graphs=2, recompiles=0, breaks=1)


def test_fork_rng_block():
    run_program("""
def make():
    def f(x):
        a = torch.rand(3) + x
        with torch.random.fork_rng():
            torch.manual_seed(5)
            b = torch.rand(3) + x
        return a, b, torch.rand(3) + x
    return f
""", [(X,), (X * 2,), (X,)], graphs=3, recompiles=0)


def test_get_and_set_rng_state():
    run_program("""
def make():
    def f(x):
        s = torch.get_rng_state()
        a = torch.rand(3) + x
        torch.set_rng_state(s)
        return a, torch.rand(3) + x
    return f
""", [(X,), (X * 2,), (X,)], graphs=2, recompiles=0)


def test_mid_replay_miss_after_manual_seed():
    """The first variant seeds, draws, then its guard on a data-dependent branch fails: the
    replay rolls the RNG back, and the variant that continues must start from the seeded
    state, not the rolled-back one (the seed is not run again)."""
    run_program("""
def make():
    def f(x):
        torch.manual_seed(0)
        y = torch.rand(3) + x
        if y.sum() > 2:
            return y * 2, torch.rand(2)
        return y - 1, torch.rand(2)
    return f
""", [(ONES,), (NEG,), (ONES,), (NEG,), (NEG,)], graphs=4, recompiles=1)


def test_mid_replay_miss_inside_fork_rng():
    """A guard inside a fork_rng block fails: __enter__ already ran in the replay that missed,
    the re-recording takes its result and the block's __exit__ still restores the state."""
    run_program("""
def make():
    def f(x):
        a = torch.rand(2)
        with torch.random.fork_rng():
            torch.manual_seed(3)
            y = torch.rand(3) + x
            if y.sum() > 2:
                z = y * 2
            else:
                z = y - 1
        return a, z, torch.rand(2)
    return f
""", [(ONES,), (NEG,), (ONES,), (NEG,)], recompiles=1)


def test_seeded_dropout_module():
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.drop = nn.Dropout(0.5)
    def forward(self, x, seed):
        h = self.drop(self.lin(x))
        torch.manual_seed(seed)
        return self.drop(h), torch.rand(1)
def make():
    return M()
""", [(torch.randn(2, 4), 1), (torch.randn(2, 4), 1), (torch.randn(2, 4), 2)], graphs=4, recompiles=1)
