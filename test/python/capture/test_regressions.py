"""Regression tests for capture-layer guard and side-effect defects (silent wrong results).

Each test compares the captured call against eager for outputs and program state.
The repros these come from are named in each test's docstring (rNN_*.py)."""
import warnings

import pytest
import torch
import torch.nn as nn

from harness import run_program
from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731


def _mlircap_compile():
    """mlircap.compile when the compiler core is built (the API wrapper tests need it)."""
    try:
        import mlircap
        from mlircap._core import core
        core()
        return mlircap.compile
    except Exception as e:  # the capture layer itself does not need the core
        pytest.skip(f"mlircap core not built: {e}")


# ------------------------------------------------------------------ r07: module wrapper
class _Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        return self.lin(x) * self.scale


def _check_module_wrapper(fast, m):
    x = torch.randn(2, 3)
    with torch.no_grad():
        assert torch.allclose(fast(x), m(x))
        fast.scale = 5.0                       # writes reach the module
        assert m.scale == 5.0 and fast.scale == 5.0
        assert torch.allclose(fast(x), m(x))
        fast.extra = 1
        assert m.extra == 1
        del fast.extra
        assert not hasattr(m, "extra")
        assert fast.eval() is fast and not m.training   # methods returning self keep the wrapper
        assert fast.train() is fast and m.training
        assert fast.train(False) is fast and not m.training
        assert fast.to(torch.float64) is fast and m.lin.weight.dtype == torch.float64
        assert fast.float() is fast and m.lin.weight.dtype == torch.float32
        assert fast.requires_grad_(False) is fast and not m.lin.weight.requires_grad
        assert list(fast.parameters()) == list(m.parameters())
        assert list(fast.state_dict()) == list(m.state_dict())
        assert torch.allclose(fast(x), m(x))
        assert torch.allclose(fast(x), m(x))


def test_r07_capture_module_wrapper_behaves_like_module():
    """r07_setattr_wrapper.py, capture() wrapper."""
    m = _Scale()
    fast = capture(m, EAGER)
    _check_module_wrapper(fast, m)
    assert fast._mlircap_capture.stats.replays >= 1


def test_r07_compiled_module_wrapper_behaves_like_module():
    """r07_setattr_wrapper.py: writes to mlircap.compile(m) reach m; eval()/to() keep compilation."""
    compile_ = _mlircap_compile()
    m = _Scale()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast = compile_(m)
        _check_module_wrapper(fast, m)
        assert type(compile_(m).eval()).__name__ == "Compiled"
        assert fast.graphs, "the compiled path was used"


# ------------------------------------------------------------------ r12: -0.0 / NaN guards
def test_r12_negative_zero_and_nan_are_guarded():
    """r12_negzero_guard.py: -0.0 reused the 0.0 variant (1/(x*z) gave +inf)."""
    nan = float("nan")
    x = torch.ones(2)
    run_program("""
def make():
    def f(x, z):
        return 1.0 / (x * z) + torch.atan2(torch.tensor(z), torch.tensor(-1.0))
    return f
""", [(x, 0.0), (x, -0.0), (x, 0.0), (x, nan), (x, nan), (x, -0.0), (x, 2.5)], recompiles=3)


def test_r12_numpy_scalar_guarded_by_value():
    np = pytest.importorskip("numpy")
    x = torch.ones(2)
    run_program("""
def make():
    def f(x, z):
        return x * float(z)
    return f
""", [(x, np.float64(2.0)), (x, np.float64(2.0)), (x, np.float64(-0.0)), (x, np.float64(3.0))], recompiles=2)


# ------------------------------------------------------------------ r11: tensor metadata
def test_r11_parameter_data_replaced_is_guarded():
    """r11_identity_tensor_meta.py: `m.weight.data = torch.randn(5, 4)` kept the same
    Parameter object, so the identity guard passed and a stale shape came back."""
    x = torch.randn(2, 4)
    run_program("""
def make():
    return nn.Linear(4, 3)
def mutate(i, m):
    with torch.no_grad():
        if i == 2:
            m.weight.data = torch.ones(5, 4); m.bias.data = torch.ones(5)
        if i == 4:
            m.double()                       # .data = ... inside Module._apply
        if i == 6:
            m.weight.requires_grad_(False)
""", [(x,), (x,), (x,), (x,), (x.double(),), (x.double(),), (x.double(),), (x.double(),)], recompiles=3)


def test_r11_global_tensor_resized_in_place():
    """r11: `T.resize_(6)` on a global tensor replayed a stale result instead of raising."""
    run_program("""
T = torch.arange(4.0)
B = torch.ones(4)
def make():
    def f(x):
        return x + T * B
    return f
def mutate(i, f):
    if i == 2:
        T.resize_(6).fill_(2.0)              # eager raises a shape error now
    if i == 3:
        T.resize_(4)
    if i == 4:
        B.set_(torch.ones(8)[::2])           # same values, other strides
""", [(torch.ones(4),)] * 6, recompiles=1)   # the raising call records no variant
