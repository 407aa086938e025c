"""The compiled wrapper of a container module behaves as the module under Python's container
protocol (issue 11, r07: the wrapper of a module must behave like that module). Python looks
`len()`, `[]`, iteration, `in` and truth up on the type, past the wrapper's __getattr__:
`len(mlircap.compile(nn.Sequential(...)))` raised TypeError ('CompiledModule' has no len())."""
import copy

import pytest
import torch
import torch.nn as nn

import mlircap


def _seq():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))


def test_sequential_len_index_iter_slice():
    m = _seq()
    fast = mlircap.compile(m)
    assert len(fast) == 3
    assert fast[0] is m[0] and fast[-1] is m[2]
    assert [type(x).__name__ for x in fast] == ["Linear", "ReLU", "Linear"]
    assert isinstance(fast[:2], nn.Sequential) and len(fast[:2]) == 2
    assert bool(fast) and not bool(mlircap.compile(nn.Sequential()))


def test_setitem_and_delitem_reach_the_module_and_the_compiled_call():
    m = _seq()
    ref = copy.deepcopy(m)
    fast = mlircap.compile(m)
    x = torch.randn(5, 4)
    for _ in range(2):
        torch.testing.assert_close(fast(x), ref(x))
    fast[1] = nn.Tanh()
    ref[1] = nn.Tanh()
    assert isinstance(m[1], nn.Tanh)
    for _ in range(2):
        torch.testing.assert_close(fast(x), ref(x))
    del fast[2]
    del ref[2]
    assert len(m) == 2
    torch.testing.assert_close(fast(x), ref(x))


def test_module_dict_and_list():
    d = nn.ModuleDict({"a": nn.Linear(2, 2)})
    fast = mlircap.compile(d)
    assert "a" in fast and "b" not in fast and list(fast) == ["a"] and fast["a"] is d["a"]
    layers = nn.ModuleList([nn.Linear(2, 2), nn.ReLU()])
    fl = mlircap.compile(layers)
    assert len(fl) == 2 and fl[1] is layers[1]


def test_modules_without_the_protocol_raise_as_eager():
    lin = nn.Linear(2, 2)
    fast = mlircap.compile(lin)
    assert bool(fast)   # truth of a module without __len__
    for op in (len, iter, lambda m: m[0], lambda m: 1 in m):
        with pytest.raises(TypeError) as want:
            op(lin)
        with pytest.raises(TypeError) as got:
            op(fast)
        assert str(got.value) == str(want.value)
