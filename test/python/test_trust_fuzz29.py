"""Session 29 findings of bench/fuzz_graphs.py on fresh seeds (issue 10: compiled code never
crashes, never returns a wrong result, never raises an error eager does not raise)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F


@pytest.fixture(scope="module")
def fuzz():
    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs29", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _draws(fuzz, fn, *args):
    mode = fuzz._draws_mode()
    with mode:
        fn(*args)
    return mode


def test_attention_without_dropout_draws_nothing(fuzz):
    """aten._scaled_dot_product_flash_attention_for_cpu is tagged nondeterministic_seeded (its
    dropout): with dropout_p 0 it draws nothing, and the float64 reference stays; with a dropout
    it is still a draw the reference cannot replay."""
    q = torch.randn(1, 2, 5, 8)
    k, v = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    none = _draws(fuzz, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    assert none.ok and not none.draws
    drop = _draws(fuzz, lambda: F.scaled_dot_product_attention(q, k, v, dropout_p=0.5))
    assert drop.draws or not drop.ok
    replayed = _draws(fuzz, lambda: torch.rand(3) + F.scaled_dot_product_attention(q, k, v).sum())
    assert replayed.ok and [name for name, _ in replayed.draws] == ["rand"]


def test_userops_seed_2027_is_judged_against_float64(fuzz):
    """A causal bfloat16 attention row whose one unmasked score is +inf: eager's CPU flash
    kernel gives 0, its float64 kernel and the compiled graph NaN (inf - inf in the softmax).
    Without a float64 reference (the attention counted as a random draw) it was WRONG."""
    prog = fuzz.generate(2027, ["userops"])
    assert "is_causal=True, scale=2.0, enable_gqa=True" in prog["source"]
    assert fuzz.fp64_reference(prog, fuzz.make_inputs(prog, alt=True)) is not None
    rec = fuzz.run_program(prog)
    assert rec["category"] in ("compiled", "fallback"), rec
