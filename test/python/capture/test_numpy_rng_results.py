"""Arrays drawn from NumPy's RNGs (a RandomState, np.random's global one) inside the captured
function are results of uncapturable calls: they reach the graph as inputs
(np_interop.np_track_result), so a new draw per call is no recompile (issue 11).  Outputs
and the RNG's state are compared with eager."""
import copy
import warnings

import pytest
import torch
import torch.nn as nn

from harness import same
from mlircap.capture import capture

np = pytest.importorskip("numpy")
EAGER = lambda gm, ex: gm.forward  # noqa: E731


class NoiseAndDropMask(nn.Module):
    def __init__(self):
        super().__init__()
        self.rs = np.random.RandomState(0)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        noise = self.rs.normal(0.0, 0.1, size=tuple(x.shape))
        keep = self.rs.rand(*x.shape) < 0.8          # NumPy comparison: translated into the graph
        x = x * torch.from_numpy(keep) + torch.from_numpy(noise * 0.5).float()
        return self.fc(x)


def _rs_state(m):
    return m.rs.get_state()[1]


def test_randomstate_arrays_are_graph_inputs_no_recompile():
    torch.manual_seed(0)
    ref = NoiseAndDropMask()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for _ in range(6):
        x = torch.randn(4, 8)
        same(fast(x), ref(x))
        assert np.array_equal(_rs_state(m), _rs_state(ref))
    c = fast._mlircap_capture
    assert len(c.variants) == 1 and c.stats.replays == 5, c.stats.recompile_reasons


def test_global_permutation_reaching_a_tensor_and_the_return_value():
    def f(x):
        p = np.random.permutation(x.shape[0])
        q = p[::-1] + 1                   # translated NumPy operations on the draw
        y = x[torch.from_numpy(p)] * torch.from_numpy(q).float()[:, None]
        return y, p                       # the array itself returned: the draw of this call

    fast = capture(f, EAGER)
    for i in range(5):
        x = torch.randn(6, 3)
        np.random.seed(i)
        a = f(x)
        np.random.seed(i)
        same(fast(x), a)
    assert len(fast._mlircap_capture.variants) == 1


def test_draw_used_in_python_is_guarded_by_contents():
    # the array decides Python control flow: its contents are guarded (a recompile per draw
    # where they differ), the results stay those of eager
    def f(x):
        r = np.random.randint(0, 2, size=2)
        x = x + torch.from_numpy(r).float().sum()
        if r[0] == 1:                     # a Python branch on the array
            x = x * 2
        return x

    fast = capture(f, EAGER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i in range(8):
            x = torch.randn(3)
            np.random.seed(i)
            a = f(x)
            np.random.seed(i)
            same(fast(x), a)


def test_draw_written_in_place_after_the_tensor_is_made():
    # from_numpy shares the array's memory: the later in-place write shows in the tensor (an
    # in-place NumPy operator on the array: the call runs eagerly)
    def f(x):
        a = np.random.rand(3)
        t = torch.from_numpy(a)
        a *= 10.0
        return x + t

    fast = capture(f, EAGER)
    for i in range(4):
        x = torch.randn(3, dtype=torch.float64)
        np.random.seed(i)
        e = f(x)
        np.random.seed(i)
        same(fast(x), e)


_RS = np.random.RandomState(0)
_BOUNDS = (0.5, 1.5)


def _bound_method_draws(x):
    lam = _RS.uniform(*_BOUNDS)          # a bound Cython method through CALL_FUNCTION_EX
    draw = _RS.rand                      # a bound method kept in a variable
    noise = draw(*x.shape)
    return x * lam + torch.from_numpy(noise).float()


def test_bound_cython_rng_methods_are_replayed():
    # these were taken for traced Python code: not replayed (the same draw every call, the
    # RandomState not advanced) or a tensor of unknown origin
    fast = capture(_bound_method_draws, EAGER)
    xs = [torch.randn(2, 3) for _ in range(4)]
    _RS.seed(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got = [fast(x) for x in xs]
    st = _RS.get_state()
    _RS.seed(3)
    want = [_bound_method_draws(x) for x in xs]
    same(got, want)
    assert np.array_equal(st[1], _RS.get_state()[1]) and st[2] == _RS.get_state()[2]
    assert not any(v.eager for v in fast._mlircap_capture.variants)


class FeatureSubset(nn.Module):
    def __init__(self):
        super().__init__()
        self.rs = np.random.RandomState(1)
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        keep = self.rs.permutation(x.shape[1])[: x.shape[1] // 2]
        mask = self.rs.rand(x.shape[0]) < 0.5
        y = x[:, np.sort(keep)].repeat(1, 2)     # a tracked int array indexing a tensor
        return self.fc(y)[mask], keep            # a boolean one, and the draw returned


def test_drawn_index_arrays_index_tensors_in_the_graph():
    torch.manual_seed(0)
    ref = FeatureSubset()
    m = copy.deepcopy(ref)
    fast = capture(m, EAGER)
    for _ in range(5):
        x = torch.randn(6, 8)
        same(fast(x), ref(x))
        assert np.array_equal(_rs_state(m), _rs_state(ref))
    c = fast._mlircap_capture
    assert len(c.variants) == 1 and c.stats.replays == 4, c.stats.recompile_reasons
