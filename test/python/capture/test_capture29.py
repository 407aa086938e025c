"""Capture rate where Dynamo captures one graph and mlircap did not (issue 11 item 4), session 26.

vmap of a body that branches on shapes: `torch.vmap(row, in_dims=(0, None), out_dims=1,
chunk_size=2)` over `def row(v, m): h = v @ m; if h.shape[0] > 3: ...` (bench/modules10.py
vmap_in_dims_none_out_dims_1_chunked) ran between graphs: the body was not "pure tensor code"
(a branch, a `shape` read) and chunk_size was refused.  Inside vmap a batched tensor's data
cannot become a Python value (eager raises), so its branches follow per-example shapes
(guarded) and dims (constants); an argument mapped with in_dims None is not batched and
`if m.sum() > 0:` runs in eager: the call runs once watched, and a body that read tensor data
as a Python value stays a call between graphs.

Each test compares results, arguments and module state with eager after every call (harness),
and changes the inputs between calls (guards)."""
import torch

from harness import run_program

_VMAP_SHAPE_BRANCH = """
def row(v, m):
    h = v @ m
    if h.shape[0] > 3:
        h = h - h.mean()
    if h.ndim == 1:
        h = h * 2
    return torch.softmax(h, 0)

def make():
    def f(x, w):
        return torch.vmap(row, in_dims=(0, None), out_dims=1, chunk_size=2)(x, w) + 1
    return f
"""


def test_vmap_shape_branch_chunked_one_graph():
    # the mapped function's per-example shape changes between calls: [4] (branch taken),
    # [3] (not taken); values change every call
    calls = [(torch.randn(6, 3), torch.randn(3, 4)), (torch.randn(6, 3), torch.randn(3, 4)),
             (torch.randn(5, 3), torch.randn(3, 3)), (torch.randn(5, 3), torch.randn(3, 3)),
             (torch.randn(6, 3), torch.randn(3, 4))]
    c = run_program(_VMAP_SHAPE_BRANCH, calls, breaks=0)
    assert all(len(v.graphs) == 1 for v in c.variants), [len(v.graphs) for v in c.variants]


_VMAP_DATA_BRANCH = """
def body(v, m):
    if m.sum() > 0:      # m is not batched (in_dims None): eager reads its data
        return v * 2
    return v - 1

def make():
    def f(x, m):
        return torch.vmap(body, in_dims=(0, None))(x, m) * 3
    return f
"""


def test_vmap_branch_on_unbatched_data_follows_data():
    # the branch follows m's values: a graph holding one branch would be wrong at the call
    # where the sign flips
    calls = [(torch.randn(4, 3), torch.ones(2)), (torch.randn(4, 3), torch.ones(2)),
             (torch.randn(4, 3), -torch.ones(2)), (torch.randn(4, 3), torch.ones(2))]
    c = run_program(_VMAP_DATA_BRANCH, calls)
    assert sum(len(v.breaks) for v in c.variants) >= 1
