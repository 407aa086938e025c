"""Capture-rate defects of issue 11 item 4 (bench/capture_all.py's cases not captured as one
graph), each with the guard that keeps it sound when the value changes between calls.

* `x.grad_fn is None` of a tensor that has a grad_fn (a non-leaf argument, a graph value
  requiring grad) broke the graph ('non-tensor result of getset_descriptor.__get__',
  bench/modules.py requires_grad_input): only its presence is seen when the reader tests it
  against None next, guarded for a tensor from outside."""
import torch

from harness import run_program


def _breaks(c):
    return sum(len(v.breaks) for v in c.variants)


def test_grad_fn_is_none_of_non_leaf_global_is_guarded():
    # H is a non-leaf (grad_fn MulBackward0) on some calls, a leaf or a plain tensor on others
    src = '''
    H = None
    def mutate(i, f):
        global H
        base = torch.arange(4.0, requires_grad=i % 3 != 2)
        H = base * 2 if i % 3 == 0 else base.detach().requires_grad_(i % 3 == 1)
    def make():
        def f(x):
            if H.grad_fn is not None:
                y = x * H
            else:
                y = x + H
            return y.sum(0), H.grad_fn is None
        return f
    '''
    calls = [(torch.randn(3, 4),) for _ in range(7)]
    c = run_program(src, calls)
    assert _breaks(c) == 0, [v.breaks for v in c.variants]
    assert c.recompiles == 2, c.stats.recompile_reasons   # (non-leaf, leaf, no grad: the guards)


def test_grad_fn_of_graph_value_follows_requires_grad():
    src = '''
    def make():
        lin = nn.Linear(4, 4)
        def f(x, w):
            y = lin(x) * w
            if y.grad_fn is None:
                return y - 1, False
            return y * 2, y.grad_fn is not None
        return f
    '''
    calls = [(torch.randn(2, 4), torch.randn(4).requires_grad_(i % 2 == 0)) for i in range(4)]
    c = run_program(src, calls)
    assert _breaks(c) == 0, [v.breaks for v in c.variants]


def test_grad_fn_under_no_grad_has_none():
    # the same graph value without grad: grad_fn None in eager and at replay
    src = '''
    def make():
        lin = nn.Linear(4, 4)
        def f(x, train):
            with torch.set_grad_enabled(train):
                y = lin(x)
            return y, y.grad_fn is None
        return f
    '''
    calls = [(torch.randn(2, 4), i % 2 == 0) for i in range(4)]
    c = run_program(src, calls)
    assert _breaks(c) == 0, [v.breaks for v in c.variants]


def test_grad_fn_used_as_a_value_still_breaks():
    # the node itself reaches the program (its name): a graph break as before, eager's result
    src = '''
    H = None
    def mutate(i, f):
        global H
        H = torch.ones(3, requires_grad=True) * (2 if i % 2 else 1)
    def make():
        def f(x):
            g = H.grad_fn
            return x * H, type(g).__name__
        return f
    '''
    run_program(src, [(torch.randn(3),) for _ in range(3)])
