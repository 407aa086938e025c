"""Fixes found by bench/heldout11.py (programs from other domains: image processing, optical flow,
super-resolution, LLM serving, quantization, simulation, ...), each a tiny program compared with eager after
every call."""
import math

import pytest
import torch

import mlircap


def _psnr(sr, hr):
    """EDSR's calc_psnr: the tensor handed to math.log10 itself (its Tensor.__float__ a graph break)."""
    mse = (sr - hr).pow(2).mean()
    return -10 * math.log10(mse)


def _sqrt_branch(x):
    s = math.sqrt(x.abs().mean())
    if s > 1.0:
        return x / s, s
    return x * 2, s


def _in_loop(xs):
    total = 0.0
    for x in xs:
        total = total + math.exp(-x.pow(2).sum())
    return total


@pytest.mark.parametrize("fn,make", [
    (_psnr, lambda i: (torch.rand(2, 3, 8, 8), torch.rand(2, 3, 8, 8))),
    (_sqrt_branch, lambda i: (torch.randn(6) * (0.2 + i),)),
    (_in_loop, lambda i: ([torch.randn(3) * 0.5 for _ in range(3)],)),
])
def test_math_function_of_a_tensor_is_followed(tmp_path, monkeypatch, fn, make):
    """`math.log10(t)` of a one-element tensor: the number its __float__ reads was guarded by value, so each
    call recorded and compiled again (EDSR's PSNR: a new variant per call until the cache limit)."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    torch.manual_seed(0)
    fast = mlircap.compile(fn)
    for i in range(5):
        args = make(i)
        ref, got = fn(*args), fast(*args)
        for r, g in zip(ref if isinstance(ref, tuple) else (ref,), got if isinstance(got, tuple) else (got,)):
            if isinstance(r, torch.Tensor):
                torch.testing.assert_close(g, r, rtol=1e-6, atol=1e-6)
            else:
                assert type(g) is type(r) and g == pytest.approx(r, rel=1e-6)
    stats = fast._call.stats
    assert stats.records <= 2 and stats.replays >= 3, (stats.records, stats.replays)


def test_math_function_of_a_tensor_raises_as_eager(tmp_path, monkeypatch):
    """a replayed math.log10 of a value it rejects raises eager's ValueError."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fast = mlircap.compile(lambda x: 1 + math.log10(x.sum()))
    for v in (1.0, 3.0, 5.0):
        assert fast(torch.tensor([v, 1.0])) == pytest.approx(1 + math.log10(v + 1.0), rel=1e-6)
    with pytest.raises(ValueError):
        fast(torch.tensor([-3.0, 1.0]))
    assert fast(torch.tensor([8.0, 1.0])) == pytest.approx(1 + math.log10(9.0), rel=1e-6)


def _loop_counter_program(kind):
    """a simulation's step counter and clock in a dict, incremented inside the time-step loop (a lattice
    Boltzmann / molecular-dynamics driver), the count returned."""
    state = {"f": None, "steps": 0, "t": 0.0}

    def simulate(x, n_steps, dt):
        if kind == "carried" and state["f"] is not None:
            x = x + state["f"]
        for _ in range(n_steps):
            x = x * 0.9 + dt
            state["steps"] += 1
            if kind == "clock":
                state["t"] += dt
        if kind == "carried":
            state["f"] = x   # another key of the dict stored after the loop
        return x, state["steps"]
    return simulate, state


@pytest.mark.parametrize("kind", ["count", "clock"])
def test_dict_counter_incremented_in_a_loop_is_followed(tmp_path, monkeypatch, kind):
    """`state["steps"] += 1` inside the loop: the second store to the item in one call was not followed, so
    the counter was guarded by value, a new recording on every call until the cache limit."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    fe, se = _loop_counter_program(kind)
    fc, sc = _loop_counter_program(kind)
    fast = mlircap.compile(fc)
    for i in range(6):
        x = torch.randn(4)
        (re, ne), (rc, nc) = fe(x, 3, 0.01 * (1 + i % 2)), fast(x, 3, 0.01 * (1 + i % 2))
        torch.testing.assert_close(rc, re)
        assert nc == ne and sc["steps"] == se["steps"] and sc["t"] == se["t"], (sc, se)
        if kind == "carried":
            torch.testing.assert_close(sc["f"], se["f"])
    stats = fast._call.stats
    assert stats.records <= 2 and stats.replays >= 4, (stats.records, stats.replays)


def test_dict_counter_in_a_loop_read_by_the_graph(tmp_path, monkeypatch):
    """the counter read back inside the loop by tensor code (a schedule by step) and by a branch."""
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))

    def make():
        st = {"step": 0}

        def f(x, n):
            for _ in range(n):
                st["step"] += 1
                x = x + 0.1 * st["step"]
                if st["step"] % 4 == 0:
                    x = x * 0.5
            return x
        return f, st
    fe, se = make()
    fc, sc = make()
    fast = mlircap.compile(fc)
    for _ in range(6):
        x = torch.randn(3)
        torch.testing.assert_close(fast(x, 3), fe(x, 3))
        assert sc == se
