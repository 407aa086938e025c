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


def test_coalesced_sparse_nnz_follows_the_indices():
    # bench/modules10.py sparse_coo_duplicates_coalesce_to_dense: how many entries coalesce()
    # keeps follows the indices; the recorded count was replayed (a wrong result)
    src = '''
    def make():
        def f(ind, val):
            s = torch.sparse_coo_tensor(ind, val, (4, 4)).coalesce()
            return s.to_dense(), torch.sparse.mm(s, torch.eye(4) * 2), s.values().shape[0], len(s.indices()[0])
        return f
    '''
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randint(0, 4, (2, 9), generator=g), torch.randn(9, generator=g)) for _ in range(4)]
    calls.append((torch.tensor([[0, 0, 0, 0, 0, 0, 0, 0, 0]] * 2), torch.randn(9, generator=g)))   # one entry
    run_program(src, calls)


def test_sparse_tensor_from_outside_values_shape():
    # a sparse tensor from outside the function (set on the function between calls): its nnz
    # is no part of a tensor guard's sizes
    src = '''
    def sp(n):
        i = torch.stack([torch.arange(n) % 4, torch.arange(n) // 4])
        return torch.sparse_coo_tensor(i, torch.arange(1.0, n + 1), (4, 4))
    def mutate(i, f):
        f.s = sp((3, 5, 5, 2, 7)[i])
    def make():
        def f(x):
            v = f.s.coalesce().values()
            return v.shape[0] + 1, x * v.sum(), f.s.to_dense() + x, f.s._nnz()
        return f
    '''
    run_program(src, [(torch.randn(4, 4),) for _ in range(5)])


def test_coalesced_sparse_from_outside_values_shape():
    # its values() / indices() shapes follow its nnz, which no tensor guard covers
    src = '''
    def sp(n):
        i = torch.stack([torch.arange(n) % 4, torch.arange(n) // 4])
        return torch.sparse_coo_tensor(i, torch.arange(1.0, n + 1), (4, 4)).coalesce()
    def mutate(i, f):
        f.s = sp((3, 5, 5, 2, 7)[i])
    def make():
        def f(x):
            return f.s.values().shape[0], x * f.s._values().sum(), f.s.indices().shape
        return f
    '''
    run_program(src, [(torch.randn(4, 4),) for _ in range(5)])


# ---- `opt.step(closure)`: a closure made in the call handed to an uncapturable call
def test_optimizer_step_closure_is_made_again_at_replay():
    # bench/modules10.py optimizer_step_with_closure_returns_loss: capture gave up ('cannot
    # reproduce value of type function'); the closure's cells (the module, x, y, a float
    # argument) take the replay's values
    src = '''
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 1)
            self.opt = torch.optim.SGD(self.l.parameters(), lr=0.1, momentum=0.5)
        def forward(self, x, y, w):
            def closure():
                self.opt.zero_grad()
                loss = F.mse_loss(self.l(x), y) * w
                loss.backward()
                return loss
            loss = self.opt.step(closure)
            return loss.detach(), self.l.weight.detach().clone()
    def make():
        return M()
    '''
    g = torch.Generator().manual_seed(0)
    calls = [(torch.randn(4, 3, generator=g), torch.randn(4, 1, generator=g), 0.5 + i % 2) for i in range(4)]
    c = run_program(src, calls)
    # (w, a float in a cell, guarded by value: one variant per value)
    assert c.recompiles == 1 and all(len(v.graphs) == 1 for v in c.variants), c.stats.recompile_reasons


def test_lbfgs_closure_runs_several_times():
    src = '''
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 1)
            self.opt = torch.optim.LBFGS(self.l.parameters(), lr=0.5, max_iter=4)
        def forward(self, x, y):
            def closure():
                self.opt.zero_grad()
                loss = ((self.l(x) - y) ** 2).mean()
                loss.backward()
                return loss
            return self.opt.step(closure).detach() * 2
    def make():
        return M()
    '''
    g = torch.Generator().manual_seed(1)
    run_program(src, [(torch.randn(5, 3, generator=g), torch.randn(5, 1, generator=g)) for _ in range(3)])


def test_closure_writing_its_cells_runs_eagerly():
    # its writes would reach the new function's cells, not the program's: eager, eager's result
    src = '''
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(3, 1)
            self.opt = torch.optim.SGD(self.l.parameters(), lr=0.1)
        def forward(self, x):
            n = 0
            def closure():
                nonlocal n
                n += 1
                self.opt.zero_grad()
                loss = self.l(x).pow(2).mean()
                loss.backward()
                return loss
            loss = self.opt.step(closure)
            return loss.detach() + n
    def make():
        return M()
    '''
    run_program(src, [(torch.randn(4, 3),) for _ in range(3)], allow_eager=True)


# ---- `t.data *= mask`: the in-place write through t.data, set back onto t, writes nothing more
def test_masked_weight_data_inplace_is_one_graph():
    # bench/modules8.py pixelcnn_masked_conv_weight_data_inplace: `self.weight.data *= self.mask`
    # set t.data to a view of t's own elements; as a write after the graph, the conv reading the
    # weight ended the graph first ('a use of a tensor whose .data the open graph's step writes')
    src = '''
    class Masked(nn.Conv2d):
        def __init__(self):
            super().__init__(1, 4, 3, padding=1)
            self.register_buffer("mask", torch.ones_like(self.weight))
            self.mask[:, :, 2:] = 0
        def forward(self, x):
            self.weight.data *= self.mask
            return super().forward(x)
    def mutate(i, m):
        with torch.no_grad():
            m[0].weight.add_(0.25)           # the weight changed between calls
            if i == 2:
                m[0].mask[:, :, 1] = 0       # and the mask
    def make():
        return nn.Sequential(Masked(), nn.ReLU(), nn.Conv2d(4, 2, 1))
    '''
    g = torch.Generator().manual_seed(0)
    c = run_program(src, [(torch.randn(2, 1, 6, 6, generator=g),) for _ in range(4)])
    assert _breaks(c) == 0 and c.graph_count == 1, [v.breaks for v in c.variants]


def test_data_rebound_to_new_values_still_written_after_the_graph():
    # `w.data = w.data * 0.9`: new memory, a real write (eager's result either way)
    src = '''
    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.l = nn.Linear(4, 3)
        def forward(self, x):
            self.l.weight.data.clamp_(-0.3, 0.3)
            self.l.weight.data = self.l.weight.data * 0.9
            return self.l(x)
    def make():
        return M()
    '''
    run_program(src, [(torch.randn(2, 4),) for _ in range(4)])


def test_data_set_to_a_transposed_view_is_a_write():
    # same memory, other strides: t takes v's layout (eager's result, and t's strides after)
    src = '''
    def make():
        w = torch.arange(6.0).reshape(2, 3).contiguous()
        def f(x):
            w.data = w.data.t() if w.shape[0] == 2 else w.data.t()
            return x + w.sum(0), w.stride(), w.shape
        return f
    '''
    run_program(src, [(torch.randn(3),) for _ in range(1)] + [(torch.randn(2),)])
