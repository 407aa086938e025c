"""Axis patterns parsed with a compiled regex inside the captured function (einops-style
`rearrange(x, "b t (h d) -> b h t d", h=2)` written by hand, as many repositories do): the
methods of a `re.Pattern` / `re.Match` were uncapturable calls, each a graph break (bench/
capture6.py c6_einops_by_hand_attention_heads: 5 graphs, 4 breaks).  They are pure functions of
their text, run during the recording like str methods; the pattern object is guarded, so
rebinding the global pattern, the pattern text or the sizes between calls records again."""
from harness import run_program

import torch

EINOPS = """
import math
import re
AXES = re.compile(r"\\(([^)]*)\\)|(\\S+)")
PATTERN = ["b t (h d) -> b h t d"]
def parse(side):
    return [g.split() if g else [a] for g, a in AXES.findall(side)]
def rearrange(x, pattern, **sizes):
    lhs, rhs = (s.strip() for s in pattern.split("->"))
    left, right = parse(lhs), parse(rhs)
    known = dict(sizes)
    for group, n in zip(left, x.shape):
        unknown = [a for a in group if a not in known]
        if unknown:
            known[unknown[0]] = n // math.prod(known[a] for a in group if a in known)
    m = re.match(r"\\s*(\\w+)", lhs)
    assert m is not None and m.group(1) in known
    flat = [a for g in left for a in g]
    x = x.reshape([known[a] for a in flat]).permute([flat.index(a) for g in right for a in g])
    return x.reshape([math.prod(known[a] for a in g) for g in right])
class Heads(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(8, 24)
        self.heads = 2
    def forward(self, x):
        q, k, v = (rearrange(t, PATTERN[0], h=self.heads) for t in self.qkv(x).chunk(3, -1))
        a = (q @ k.transpose(-1, -2)).softmax(-1)
        return rearrange(a @ v, "b h t d -> b t (h d)")
def make():
    return Heads()
"""


def test_hand_written_rearrange_is_one_graph():
    calls = [(torch.randn(2, 5, 8),) for _ in range(3)]
    c = run_program(EINOPS, calls, graphs=1, breaks=0, recompiles=0)
    assert not any(v.eager for v in c.variants)


def test_rearrange_guards_follow_pattern_text_object_and_sizes():
    """The pattern text (a list item), the compiled pattern (a global) and the head count
    change between calls: each change is seen, the results match eager's."""
    mutate = """
def mutate(i, m):
    if i == 1:
        PATTERN[0] = "b t (d h) -> b h t d"
    if i == 2:
        globals()["AXES"] = re.compile(r"[(\\[]([^)\\]]*)[)\\]]|(\\S+)")   # (a b) or [a b]
        PATTERN[0] = "b t [h d] -> b h t d"
    if i == 3:
        m.heads = 4
"""
    calls = [(torch.randn(2, 5, 8),) for _ in range(5)]
    c = run_program(EINOPS + mutate, calls, name="einops_mut")
    assert len(c.variants) == 4 and not any(v.eager for v in c.variants)
    assert c.stats.replays == 1
