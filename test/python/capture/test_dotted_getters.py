"""Submodules and parameters looked up by dotted name in torch's own (untraced) code:
m.get_submodule("enc.0"), m.get_parameter("enc.0.weight"), m.get_buffer(...),
operator.attrgetter("enc.0.weight")(m), as peft / transformers utilities do.  What they
returned was 'reached through an untracked path' and capture gave up (bench/capture2.py
attrgetter_map_itemgetter).  Their lookups are now read as the attribute loads they make
(special_calls._dotted_reads): tracked and guarded, so swapping the submodule is seen."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(4)]

_PROG = """
import operator
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.enc = nn.Sequential(nn.Linear(8, 8), nn.Tanh())
        self.register_buffer("scale", torch.tensor(0.5))
    def forward(self, x):
        a = self.get_submodule("enc.0")(x)
        b = x @ self.get_parameter("enc.0.weight").t()
        c = x @ operator.attrgetter("enc.0.weight")(self).t()
        return (a + b + c) * self.get_buffer("scale")
def make():
    return M()
"""


def test_dotted_getters_one_graph():
    run_program(_PROG, [(x,) for x in X], graphs=1, breaks=0, recompiles=0)


def test_dotted_getters_see_a_swapped_submodule():
    """The submodule is replaced before the third call: the lookups' guards fail and the new
    module's weights are used, as eagerly."""
    run_program(_PROG + """
def mutate(i, m):
    if i == 2:
        torch.manual_seed(5)
        m.enc[0] = nn.Linear(8, 8)
""", [(x,) for x in X])
