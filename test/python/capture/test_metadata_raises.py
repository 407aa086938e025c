"""A torch op that raises for its tensors' layout or shapes (`x.view(...)` of a non-contiguous
tensor, `torch.cat` of mismatched shapes) inside `try: ... except RuntimeError:` raises at
every call with the same guarded metadata: nothing runs for it at replay and the `except`
path stays in the same graph (torch_calls._raise_from_metadata).  Before, the op was a step
between graphs run again at each call to see whether it still raised (bench/capture4.py
try_view_except_reshape: 2 graphs).  A call whose metadata differs (a contiguous input,
whose view succeeds) is a new variant; every call is compared with eager."""
import torch

from harness import run_program

VIEW_OR_RESHAPE = """
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 6)
    def forward(self, x):
        h = self.fc(x)
        try:
            flat = x.view(x.shape[0], -1)
            tag = 1.0
        except RuntimeError:
            flat = x.reshape(x.shape[0], -1)
            tag = 2.0
        try:
            both = torch.cat([h, flat.t()], 0)
        except RuntimeError as e:
            both = torch.cat([h.flatten(), flat.flatten()]) * (len(str(e)) > 0)
        return both * tag
def make():
    return Net()
"""


def _calls():
    base = [torch.randn(6, 4).t() for _ in range(3)]       # (4, 6) non-contiguous: view raises
    return [(b,) for b in base] + [(torch.randn(4, 6),), (torch.randn(4, 6),), (torch.randn(6, 4).t(),)]


def test_view_raising_for_the_layout_stays_in_the_graph():
    c = run_program(VIEW_OR_RESHAPE, _calls())
    # one variant per layout (the strides are guarded), each one graph without a break
    assert len(c.variants) == 2, [v.breaks for v in c.variants]
    assert all(len(v.graphs) == 1 and not v.breaks for v in c.variants), [v.breaks for v in c.variants]
    assert c.stats.replays >= 3


def test_value_dependent_raise_is_still_run_at_each_call():
    """An op whose failure depends on tensor values (an index out of range) stays a step run
    again at each call."""
    c = run_program("""
class Net(nn.Module):
    def forward(self, x, idx):
        try:
            return x.index_select(0, idx) * 2
        except IndexError:
            return x.sum(0, keepdim=True)
def make():
    return Net()
""", [(torch.randn(4, 3), torch.tensor([0, 9])), (torch.randn(4, 3), torch.tensor([1, 2])),
      (torch.randn(4, 3), torch.tensor([7, 1]))])
    assert any(v.breaks for v in c.variants)
