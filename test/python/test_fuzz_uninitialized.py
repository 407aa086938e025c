"""bench/fuzz_graphs.py compares only memory eager defines: an element eager computes from memory
nothing wrote (a storage that resize_ grew, torch.empty) is allocator garbage in eager too, so it
is no reference (edges seed 1844 was reported WRONG for it); a difference anywhere else still is
a wrong result."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch


@pytest.fixture(scope="module")
def fuzz():
    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs_uninit", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _call(f, tensors):
    """The harness's call, reduced: fresh copies, (outputs, inputs after the call, exception)."""
    ins = [t.clone() for t in tensors]
    try:
        return f(*ins), ins, None
    except Exception as e:  # noqa: BLE001
        return None, ins, e


def _grows(x):
    """resize_ grows x's storage from 6 to 10 elements: x[6:] is memory nothing wrote."""
    x.resize_(10)
    return (x.to(torch.uint8).double(), x[:6] * 2)


def test_uninitialized_elements_are_not_compared_but_defined_ones_are(fuzz):
    x = torch.arange(6, dtype=torch.int32)
    eager = _call(_grows, [x])
    got = _call(_grows, [x])
    # a compiled result whose garbage is other garbage: excused
    other = (eager[0][0].clone(), eager[0][1].clone())
    other[0][6:] = 99.0 - other[0][6:]
    ins = [eager[1][0].clone()]
    ins[0][6:] = -5
    assert fuzz._eager_reads_uninitialized(_call, _grows, [x], (other, ins), 0.0)
    assert fuzz._eager_reads_uninitialized(_call, _grows, [x], (got[0], got[1]), 0.0)
    # a wrong value of the same shape in the defined part of either output or of the input
    for where in range(3):
        bad = (other[0].clone(), other[1].clone())
        bad_ins = [ins[0].clone()]
        if where == 0:
            bad[0][2] += 1
        elif where == 1:
            bad[1][5] += 1
        else:
            bad_ins[0][0] += 1
        assert not fuzz._eager_reads_uninitialized(_call, _grows, [x], (bad, bad_ins), 0.0), where
    # a wrong shape is wrong too
    short = (other[0][:9], other[1])
    assert not fuzz._eager_reads_uninitialized(_call, _grows, [x], (short, ins), 0.0)


def test_a_program_without_uninitialized_memory_is_never_excused(fuzz):
    def f(x):
        x.resize_(4)          # shrinks: every element defined
        return (x * 3,)

    x = torch.arange(6, dtype=torch.int64)
    out, ins, _ = _call(f, [x])
    assert fuzz._eager_reads_uninitialized(_call, f, [x], (out, ins), 0.0) is False
    assert not fuzz._eager_reads_uninitialized(_call, f, [x], ((out[0] + 1,), ins), 0.0)


def test_empty_is_poisoned_like_a_grown_storage(fuzz):
    def f(x):
        e = torch.empty(3, dtype=x.dtype)
        return (torch.cat([x * 2, e]),)

    x = torch.arange(4, dtype=torch.float32)
    out, ins, _ = _call(f, [x])
    garbage = out[0].clone()
    garbage[4:] = torch.tensor([1.0, float("nan"), -3.0])
    assert fuzz._eager_reads_uninitialized(_call, f, [x], ((garbage,), ins), 0.0)
    garbage[0] = 5.0
    assert not fuzz._eager_reads_uninitialized(_call, f, [x], ((garbage,), ins), 0.0)


def test_edges_seed_1844_is_not_wrong(fuzz):
    """x1 is x0 (offset 1 in a 25-element storage at the second shapes); x1.resize_(31) grows the
    storage to 32 elements and v1 = x1.to(uint8) reads the 7 new ones."""
    prog = fuzz.generate(1844, ["edges"])
    assert "resize_(31)" in prog["source"]
    rec = fuzz.run_program(prog)
    assert rec["category"] in ("compiled", "fallback"), rec
