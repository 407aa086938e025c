"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 900:1200 of each
mode and the userops group (attention, fft, einsum, distributions, masks): the wrong results
and errors it found, minimized. Each case compares compiled calls (the recording call and the
replayed compiled variant) with eager."""
import pytest
import torch

import mlircap


def _grads(fn, *xs):
    xs = [x.detach().clone().requires_grad_() for x in xs]
    out = fn(*xs)
    out[0].backward()
    return [x.grad for x in xs]


def _assert_grads_as_eager(f, *xs, tol=0.0):
    want = _grads(f, *xs)
    fast = mlircap.compile(f)
    for _ in range(3):
        for g, w in zip(_grads(fast, *xs), want):
            torch.testing.assert_close(g, w, equal_nan=True, rtol=tol, atol=tol)


# ------------------------------------------------------------------ logit's gradient bounds
# --grad seed 1015: torch.logit(conv2d(x, w), eps=1e-3) of NaN pixels: eager's gradient is NaN
# there, torch's decomposition of logit_backward gave 0 (and x.grad lost its NaNs). Fewer
# elements than one vector of eager's CPU kernel (its vectorized body keeps 0 for a NaN, its
# scalar loop and the CUDA kernel give NaN).
_X = [float("nan"), 0.5, 0.25, 1.0, 0.0, 2.0, -1.0]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("eps", [1e-3, 0.0, -1.0, None])
def test_logit_gradient_of_nan_and_bounds(eps, dtype):
    def f(x):
        return ((torch.logit(x, eps=eps) * torch.arange(1, 8)).sum(),)
    _assert_grads_as_eager(f, torch.tensor(_X, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_logit_gradient_bounds_rounded_to_the_dtype(dtype):
    # 1 - 1e-3 rounds to 1.0 in bfloat16, to 1 - 2**-10 in float16: eager's CPU kernel keeps
    # such an x inside the bounds (a large or infinite gradient), torch's decomposition
    # compared with 0.999 in float32 (0)
    def f(x):
        return ((torch.logit(x, eps=1e-3) * torch.tensor([1.0, -2.0, 3.0, 0.5])).sum(),)
    _assert_grads_as_eager(f, torch.tensor([0.5, 1.0, 1 - 2**-10, 1e-3], dtype=dtype))


def test_logit_gradient_of_a_convolution_with_nan_pixels():
    # seed 1015 minimized: bfloat16 pixels with NaN, a 1x1 convolution, logit with eps
    g = torch.Generator().manual_seed(1015)
    x = torch.randn(2, 3, 5, 4, generator=g).to(torch.bfloat16)
    x[0, 1, 2, 2] = float("nan")   # pixels the stride-2 convolution reads
    x[1, 0, 4, 0] = float("nan")
    w = (torch.rand(1, 3, 1, 1, generator=g) * 0.3).to(torch.bfloat16)

    def f(x, w):
        return (torch.logit(torch.nn.functional.conv2d(x, w, stride=2), eps=1e-3).double().sum(),)
    _assert_grads_as_eager(f, x, w, tol=2e-2)   # the NaN pattern exactly, values to bfloat16's rounding


# ------------------------------------------- the fuzzer's float64 reference of random programs
def _load_fuzz():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs17", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _program(source, families):
    return {"seed": 1, "source": source, "families": families, "tol": 1e-4, "sizes": {"s0": 8}, "alt_sizes": {"s0": 8},
            "inputs": [{"dims": ["s0"], "dtype": "float32", "layout": "contig", "fill": "normal"}]}


def test_fp64_reference_replays_the_random_draws():
    # --grad seed 1171: frac() of a layer_norm output near 1e4 after rand_like, compiled 20x
    # closer to the float64 program than eager, was counted wrong: a program drawing random
    # numbers had no float64 reference (float64 draws other numbers). The float64 run now
    # takes the program's own draws, cast.
    fuzz = _load_fuzz()
    prog = _program("def f(x0):\n    v0 = torch.rand_like(x0)\n    return ((x0 * 1e4 + v0).frac(),)\n", ["rng", "unary"])
    ins = fuzz.make_inputs(prog)
    ref = fuzz.fp64_reference(prog, ins)
    torch.manual_seed(fuzz.CALL_SEED)
    drawn = torch.rand(8)
    assert torch.equal(ref[0][0], (ins[0].double() * 1e4 + drawn.double()).frac())
    # a draw whose values depend on a tensor's (normal about a mean tensor): no reference
    prog = _program("def f(x0):\n    return (torch.normal(x0, 1.0) * 1e4,)\n", ["rng"])
    assert fuzz.fp64_reference(prog, fuzz.make_inputs(prog)) is None


def test_fuzz_seed_1171_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    rec = fuzz.run_program(fuzz.generate(1171, None, grad=True))
    assert rec["category"] in ("compiled", "fallback"), rec
    assert any("within 2x eager's own error" in n for n in rec.get("fp64", [])), rec


def test_userops_group_draws_its_families_only():
    # generator v3's group (attention, fft, einsum, distributions, masks): selected by
    # --families userops only, so earlier modes' programs stay the same
    fuzz = _load_fuzz()
    assert "attention" not in fuzz.family_weights(None)
    for mode in ("modules", "dtypes", "tensorops"):
        assert not set(fuzz.family_weights([mode])) & {"attention", "fft", "einsum", "distrib", "masked"}
    seen = set()
    for seed in range(12):
        p = fuzz.generate(seed, ["userops"])
        assert p["v2"] and p == fuzz.generate(seed, ["userops"])
        assert set(p["families"]) <= set(fuzz.GROUPS["userops"])
        seen |= set(p["families"])
    assert {"attention", "fft", "einsum", "distrib", "masked"} <= seen
    recs = fuzz.run_programs([fuzz.generate(s, ["userops"]) for s in (1, 3)], jobs=1, timeout=120, progress=False)
    assert [r["category"] for r in recs if r["category"] not in ("compiled", "fallback")] == [], recs


# ------------------------- an unused division after attention in a differentiated graph
# --grad --families userops seed 20: a division nothing reads (kept: eager raises
# for an integer divisor of 0) on a path through matmul / masked_fill / ~mask: the graph ran
# eagerly whole ('an unused op that checks its data ...'); the checks now run as a graph of
# eager kernels before the compiled one
def _attention_with_unused_division(divisor):
    def f(q, k, v, m):
        s = torch.softmax(((q @ k.transpose(-2, -1)) * 0.5).masked_fill(~m, -float("inf")), -1) @ v
        n = (s < 1).sum(-1)
        unused = s.masked_fill(~(s < 1), 0.0).sum(-1) / n.clamp(min=1) + n // divisor(n)  # noqa: F841
        return ((s * s).sum(),)
    return f


def _attention_inputs():
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, 3, 4, generator=g) for _ in range(3))
    return q, k, v, torch.rand(3, 3, generator=g) < 0.7


def test_unused_division_after_attention_compiles():
    f = _attention_with_unused_division(lambda n: n.clamp(min=1))
    q, k, v, m = _attention_inputs()

    def grads(fn):
        xs = [t.clone().requires_grad_() for t in (q, k, v)]
        fn(*xs, m)[0].backward()
        return [x.grad for x in xs]
    want = grads(f)
    fast = mlircap.compile(f)
    for _ in range(3):
        for g, w in zip(grads(fast), want):
            torch.testing.assert_close(g, w)
    assert fast.graphs and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def test_unused_integer_division_by_zero_after_attention_raises_as_eager():
    f = _attention_with_unused_division(lambda n: n * 0)
    q, k, v, m = _attention_inputs()
    xs = [t.clone().requires_grad_() for t in (q, k, v)]
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        f(*xs, m)
    fast = mlircap.compile(f)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="ZeroDivisionError"):
            fast(*[t.clone().requires_grad_() for t in (q, k, v)], m)
