"""TensorMetas (_tensor_meta.cpp, built by _tensor_ext.py): the merged tensor guard of a
variant checks every tensor's metadata in one C call, the same facts as torch's
TensorGuards: its answer equals TensorGuards' on tensors mutated in every way that keeps
the object (set_data, in-place resizes and transposes, requires_grad, dtype), under other
thread-local dispatch states, and for other tensor types; a variant's parameters guarded
this way still recompile when `p.data` changes shape."""
import pytest
import torch

from harness import EAGER
from mlircap.capture import _tensor_ext, capture
from mlircap.capture.guard_tensors import _tensor_guards

EXT = _tensor_ext.load(block=True)
pytestmark = pytest.mark.skipif(EXT is None, reason=f"_mlircap_tensor_meta not built: {_tensor_ext.error()}")


def _examples():
    return [torch.randn(3, 4), torch.nn.Parameter(torch.randn(4)), torch.randn(2, 3).t(), torch.zeros(()),
            torch.arange(6), torch.randn(5, dtype=torch.float64).requires_grad_(), torch.randn(4, 4)[:, 1:3]]


_MUTATIONS = [
    ("set_data other shape", lambda t: setattr(t, "data", torch.randn(*t.shape, 2)) if t.dim() else None),
    ("set_data other dtype", lambda t: setattr(t, "data", t.data.double() if t.dtype != torch.float64 else t.data.float())),
    ("resize_", lambda t: t.detach().resize_(7) if not t.requires_grad else None),
    ("t_", lambda t: t.detach().t_() if t.dim() == 2 else None),
    ("unsqueeze_", lambda t: t.detach().unsqueeze_(0)),
    ("as_strided_", lambda t: t.detach().as_strided_((1,), (1,)) if t.numel() else None),
    ("requires_grad flip", lambda t: t.requires_grad_(not t.requires_grad) if t.is_leaf and t.is_floating_point()
     else None),
    ("nothing", lambda t: None),
]


@pytest.mark.parametrize("name,mut", _MUTATIONS, ids=[m[0] for m in _MUTATIONS])
def test_agrees_with_tensor_guards(name, mut):
    ts = _examples()
    tm, tg = EXT.TensorMetas(*ts), _tensor_guards(*ts)
    assert tm.check(*ts) and tg.check(*ts)
    for i in range(len(ts)):
        with torch.no_grad():
            mut(ts[i])
        assert tm.check(*ts) == tg.check(*ts), (name, i)
    others = [t.detach().clone() for t in ts]
    assert tm.check(*others) == tg.check(*others)
    assert tm.check(*ts[:-1]) is False


@pytest.mark.parametrize("ctx", [torch.no_grad, torch.inference_mode, lambda: torch.autocast("cpu"),
                                 torch._C._DisableTorchDispatch])
def test_thread_local_dispatch_state(ctx):
    """Built under one dispatch state, checked under another (and the reverse): the keys
    are compared as the state applies them, as TensorGuards compares them."""
    ts = _examples()
    tm, tg = EXT.TensorMetas(*ts), _tensor_guards(*ts)
    with ctx():
        assert tm.check(*ts) == tg.check(*ts)
        tm2, tg2 = EXT.TensorMetas(*ts), _tensor_guards(*ts)
    assert tm2.check(*ts) == tg2.check(*ts)


def test_other_tensor_types():
    class Sub(torch.Tensor):
        pass
    t = torch.randn(3)
    tm = EXT.TensorMetas(t, t)
    assert not tm.check(t, t.as_subclass(Sub)) and not tm.check(t, torch.nn.Parameter(t))
    assert tm.check(t, 1.0) is False   # a non-tensor fails (never crashes)
    with pytest.raises(TypeError):
        EXT.TensorMetas(t, torch.nested.nested_tensor([torch.randn(2), torch.randn(3)]))


def test_variant_guards_parameters_in_one_call():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(4)])

        def forward(self, x):
            for lin in self.layers:
                x = torch.relu(lin(x))
            return x
    m = M()
    cm = capture(m, EAGER)
    x = torch.randn(2, 4)
    assert torch.equal(cm(x), m(x)) and torch.equal(cm(x), m(x))
    c = cm._mlircap_capture
    assert c.stats.replays == 1 and len(c.variants) == 1
    merged = [k for k in c.variants[0].consts if type(k) is EXT.TensorMetas]   # (the compiled guard's)
    assert len(merged) == 1 and merged[0].size() >= 9, merged
    with torch.no_grad():
        m.layers[2].weight.data = torch.randn(4, 4).t()   # same shape, other strides
    assert torch.equal(cm(x), m(x)) and len(c.variants) == 2
    with torch.no_grad():
        m.layers[1].bias.data = torch.randn(1)            # broadcasts: other shape, same result shape
    assert torch.equal(cm(x), m(x)) and len(c.variants) == 3


_PTR_MUTATIONS = [
    ("set_data same shape", lambda t: setattr(t, "data", torch.randn_like(t))),
    ("set_data other dtype", lambda t: setattr(t, "data", t.data.double())),
    ("set_ to another storage", lambda t: t.set_(torch.randn(t.shape))),
    ("resize_ past capacity", lambda t: t.detach().resize_(t.numel() * 64)),
    ("in-place add (same address)", lambda t: t.detach().add_(1)),
    ("nothing", lambda t: None),
]


@pytest.mark.parametrize("name,mut", _PTR_MUTATIONS, ids=[m[0] for m in _PTR_MUTATIONS])
def test_static_inputs_data_ptrs(name, mut):
    """The CUDA graphs' replay check of inputs used in place (runtime/cuda.py _StaticInputs,
    DataPtrs: one C call) answers as the Python check (address and dtype of each), on
    tensors mutated in every way that keeps the object."""
    from mlircap.runtime.cuda import _StaticInputs

    args = (torch.randn(3, 4), 2.0, torch.nn.Parameter(torch.randn(5)), torch.randn(6))
    s = _StaticInputs()
    s._set_static(args, [0, 2])
    assert s._static_check is not None
    assert s._static_match(args)
    for k in (0, 2):
        with torch.no_grad():
            mut(args[k])
        expect = all(args[i].data_ptr() == p and args[i].dtype is d for i, p, d in s._static_inputs)
        assert s._static_check.match(args) is expect
        assert s._static_check.match(list(args)) is expect
        saved, s._static_check = s._static_check, None   # the Python form agrees
        assert s._static_match(args) is expect
        s._static_check = saved
    assert (name in ("nothing", "in-place add (same address)")) is s._static_match(args)
    assert not s._static_check.match(args[:2])          # too short: False, no error
    assert not s._static_check.match((1.0,) * 4)         # not tensors


def test_static_inputs_take_the_c_check_once_built(monkeypatch):
    """Captured before the extension was built (it builds in the background): a later
    replay whose inputs match switches to the C check."""
    from mlircap.runtime import cuda

    args = (torch.randn(3), torch.randn(4))
    real = cuda._data_ptrs
    monkeypatch.setattr(cuda, "_data_ptrs", lambda idx, ts: None)
    s = cuda._StaticInputs()
    s._set_static(args, [1])
    assert s._static_check is None and s._static_match(args)
    monkeypatch.setattr(cuda, "_data_ptrs", real)
    assert s._static_match(args) and s._static_check is not None
    with torch.no_grad():
        args[1].data = torch.randn(4)
    assert not s._static_match(args)
