"""Random-program differential fuzzer (bench/fuzz_graphs.py, issue 10), seeds 1200:1500 of each
mode and userops seeds 150:400: the wrong results and errors it found, minimized, and the
fuzzer's own fixes (false positives)."""
import torch


def _load_fuzz():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs18", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _program(source, families, grad=False):
    return {"seed": 1, "source": source, "families": families, "tol": 1e-4, "sizes": {"s0": 8}, "alt_sizes": {"s0": 8},
            "grad": grad, "inputs": [{"dims": ["s0"], "dtype": "float32", "layout": "contig", "fill": "normal"}]}


# ------------------------------- the float64 reference of a program that casts to float32
# --grad seed 1221: log_softmax(conv2d(...).float()) then reciprocal: values of log_softmax near
# 0 make the gradient ill-conditioned (1e6, float32 rounding moves it by 2.6e5). The float64
# reference ran `.float()` too, so from there on it computed eager's float32 steps and matched
# eager's gradient to 7 digits; a compiled gradient of the same float32 error counted wrong.
# The reference now keeps float64 through a cast to float32.
def test_fp64_reference_keeps_float64_through_float32_casts():
    fuzz = _load_fuzz()
    src = ("def f(x0):\n    v0 = torch.log_softmax((x0 * 30).float(), 0)\n"
           "    v1 = torch.softmax(x0, 0, dtype=torch.float32)\n    return (v0, v1, x0.sum(dtype=torch.float32))\n")
    prog = _program(src, ["softmax"])
    ins = fuzz.make_inputs(prog)
    ref = fuzz.fp64_reference(prog, ins)[0]
    x = ins[0].double()
    assert [r.dtype for r in ref] == [torch.float64] * 3
    assert torch.equal(ref[0], torch.log_softmax(x * 30, 0))
    assert torch.equal(ref[1], torch.softmax(x, 0))
    assert torch.equal(ref[2], x.sum())


def test_fp64_reference_of_a_gradient_through_a_float32_cast():
    fuzz = _load_fuzz()
    src = "def f(x0):\n    v0 = torch.reciprocal(torch.log_softmax((x0 * 30).float(), 0))\n    return (v0.double().sum(), v0.detach())\n"
    prog = _program(src, ["softmax"], grad=True)
    ins = fuzz.make_inputs(prog)
    (_, grads, _), _ = fuzz.fp64_reference(prog, [t.requires_grad_() for t in ins])
    x = ins[0].detach().double().requires_grad_()
    torch.reciprocal(torch.log_softmax(x * 30, 0)).sum().backward()
    assert grads[0].dtype == torch.float64 and torch.equal(grads[0], x.grad)


def test_fp64_reference_of_a_bit_view_stays_float32():
    # a view of a float32's bits as int32 depends on the format: the reference casts there
    fuzz = _load_fuzz()
    prog = _program("def f(x0):\n    return (x0.float().view(torch.int32) & 255,)\n", ["view"])
    ins = fuzz.make_inputs(prog)
    ref = fuzz.fp64_reference(prog, ins)[0]
    assert torch.equal(ref[0], ins[0].view(torch.int32) & 255)


def test_fuzz_seed_1221_grad_not_counted_wrong():
    fuzz = _load_fuzz()
    prog = fuzz.generate(1221, grad=True)
    res = fuzz.run_program(prog)
    assert res["category"] in ("compiled", "fallback"), res
