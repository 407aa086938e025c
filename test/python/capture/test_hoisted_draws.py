"""Draws from a Python or NumPy RNG met inside a graph (`if random.random() < p:` between
layers, `x * rs.uniform(0.9, 1.1)`) run before that graph instead of splitting it: one
graph where every draw was a split (graph.py _hoisted_step).  Not after a torch random op
in the same graph (a replay that misses restores the torch RNG state the draw left).  Every
call is compared with eager: outputs, module state, torch's RNG state, the Python / NumPy
generators' states; calls whose draws take other branches are new variants (mid-replay
guards fail, the replay rolls back)."""
import torch

from harness import run_program


def _x(i):
    torch.manual_seed(i)
    return torch.randn(3, 8)


LAYERDROP = """
import random
RNG = random.Random(0)
class M(nn.Module):
    def __init__(self, n=4, p=0.3):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(8, 8) for _ in range(n)])
        self.p = p
    def forward(self, x):
        for layer in self.layers:
            if self.training and RNG.random() < self.p:
                continue
            x = x + BODY
        return x
def make():
    return M()
def state(m):
    return RNG.getstate()
"""


def test_layerdrop_draws_do_not_split_the_graph():
    c = run_program(LAYERDROP.replace("BODY", "torch.relu(layer(x))"), [(_x(i),) for i in range(10)])
    assert all(len(v.graphs) == 1 and v.splits == 0 for v in c.variants), [(len(v.graphs), v.splits) for v in c.variants]
    assert c.stats.replays >= 1


def test_draw_after_a_torch_random_op_splits_the_graph():
    """With dropout before the draw in the graph, the draw is a graph break as before."""
    c = run_program(LAYERDROP.replace("BODY", "F.dropout(torch.relu(layer(x)), 0.2)"), [(_x(i),) for i in range(10)])
    assert any(v.splits > 0 for v in c.variants)


def test_numpy_draws_inside_a_graph():
    """`rs.uniform(...)` times a tensor between two layers and an array of noise from
    `rs.normal(size=...)` added: one graph, one variant (the float is a graph input)."""
    c = run_program("""
import numpy as np
RS = np.random.RandomState(0)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a, self.b = nn.Linear(8, 8), nn.Linear(8, 8)
    def forward(self, x):
        h = self.a(x) * RS.uniform(0.9, 1.1)
        h = h + torch.from_numpy(RS.normal(size=(3, 8))).float()
        return self.b(h)
def make():
    return M()
def state(m):
    return RS.get_state()[1].tolist()
""", [(_x(i),) for i in range(4)], recompiles=0)
    assert all(len(v.graphs) == 1 and v.splits == 0 for v in c.variants)
