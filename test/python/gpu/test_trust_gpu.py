"""Trust on CUDA: the test_trust.py regressions whose code paths differ on the
GPU (plan constants, CUDA-graph replay outputs, eager islands, isolation)."""
import os
import subprocess
import sys
import warnings

import pytest
import torch

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


def _compiled(fast) -> bool:
    return bool(fast.graphs) and all(g.fallback_reason is None and g.executable is not g.gm for g in fast.graphs)


def check(fn, *args, calls=4):
    want = fn(*args)
    fast = mlircap.compile(fn)
    for _ in range(calls):   # first call records, then compiled, CUDA-graph capture, replays
        got = fast(*args)
        got, ref = (got, want) if isinstance(got, tuple) else ((got,), (want,))
        for a, b in zip(got, ref):
            assert type(a) is torch.Tensor and a.device.type == "cuda"
            torch.testing.assert_close(a, b, equal_nan=True)
    assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    return fast


def test_constants_and_constant_outputs_on_cuda():
    x = torch.ones(3, device="cuda")
    check(lambda x: x * torch.tensor([2.0, 3.0, 4.0], device="cuda"), x)
    fast = check(lambda x: (x + 1, torch.ones(3, device="cuda") * 5), x)
    _, c = fast(x)
    c.add_(100)   # the caller owns its outputs: replays must not see this
    torch.testing.assert_close(fast(x)[1], torch.full((3,), 5.0, device="cuda"))


def test_graph_without_inputs_runs_on_the_device_it_makes_tensors_on():
    # OpInfo sweep on the H200 (157a7dd): arange/linspace/logspace/eye with device="cuda"
    # and no tensor input were compiled for the CPU and returned CPU tensors
    check(lambda: torch.linspace(0, 1, 50, device="cuda") * 3)
    check(lambda: (torch.arange(10, device="cuda", dtype=torch.float32).exp(), torch.eye(4, device="cuda")))
    # a CPU tensor beside GPU ones: each output stays on its own device
    f = lambda x: (x + 1, torch.arange(4) * 2)   # noqa: E731
    fast = mlircap.compile(f)
    x = torch.ones(3, device="cuda")
    for _ in range(3):
        a, b = fast(x)
        assert a.device.type == "cuda" and b.device.type == "cpu"
        torch.testing.assert_close(b, torch.arange(4) * 2)


def test_random_ops_follow_torch_generator_on_cuda():
    f = lambda x: x + torch.rand_like(x)   # noqa: E731
    fast = mlircap.compile(f)
    x = torch.zeros(1000, device="cuda")
    for _ in range(4):
        torch.manual_seed(7)
        want = f(x)
        torch.manual_seed(7)
        assert torch.equal(fast(x), want)
    torch.manual_seed(8)
    assert not torch.equal(fast(x), want)


def test_islands_on_cuda():
    emb = torch.nn.Embedding(100, 16).cuda()
    with torch.no_grad():
        check(lambda i: torch.nn.functional.layer_norm(emb(i), (16,)) * 2, torch.randint(0, 100, (4, 8), device="cuda"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check(lambda x: torch.special.i0(x.exp()) + 1, torch.rand(64, device="cuda"))
        check(lambda x: (x.float() / 255).relu() * 2, torch.randint(0, 255, (8, 8), dtype=torch.uint8, device="cuda"))


def test_out_of_bounds_index_raises_on_cuda():
    # A bad index triggers a device-side assert, which ends the CUDA context:
    # run it in a child process and check it raised instead of returning.
    code = ("import torch, mlircap\n"
            "emb = torch.nn.Embedding(10, 4).cuda(); f = mlircap.compile(lambda i: emb(i) * 2)\n"
            "with torch.no_grad():\n"
            "    good = torch.tensor([1, 2], device='cuda'); f(good); f(good)\n"
            "    try:\n"
            "        out = f(torch.tensor([1, 10**6], device='cuda')); torch.cuda.synchronize(); print('RETURNED', out)\n"
            "    except Exception as e:\n"
            "        print('RAISED', type(e).__name__)\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=dict(os.environ))
    assert "RAISED" in r.stdout and "RETURNED" not in r.stdout, r.stdout + r.stderr[-2000:]


def test_bad_chip_is_a_fallback_not_an_abort():
    f = lambda x: torch.softmax(x, -1)   # noqa: E731
    fast = mlircap.compile(f, chip="sm_xx")
    x = torch.randn(4, 8, device="cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(2):
            torch.testing.assert_close(fast(x), f(x))
    assert fast.graphs[0].fallback_reason


def test_masked_attention_is_a_library_step_and_the_split_graph_one_cuda_graph(capsys):
    # Attention with an explicit mask (transformers builds one while compiling)
    # ran as a random island (its dropout tag) or decomposed: now torch's fused
    # kernel (chosen as the graph is traced) is a library step, and the graph
    # split around it replays as one CUDA graph.
    from mlircap import logs

    def f(q, k, v, mask, w):
        a = torch.nn.functional.scaled_dot_product_attention(q.relu(), k, v, attn_mask=mask)
        return (a * w).sum(-1) + 1, a.transpose(1, 2).reshape(2, 197, -1) @ torch.ones(256, 8, device="cuda",
                                                                                      dtype=a.dtype)

    logs.set_logs("kernels", "fallback")
    try:
        for dtype in (torch.float32, torch.bfloat16):
            w = torch.randn(64, device="cuda", dtype=dtype)
            fast = mlircap.compile(f)
            for call in range(5):   # record, compiled, capture, replays; fresh inputs each call
                q, k, v = (torch.randn(2, 4, 197, 64, device="cuda", dtype=dtype) for _ in range(3))
                mask = torch.randn(2, 1, 197, 197, device="cuda", dtype=dtype)
                with warnings.catch_warnings():
                    warnings.simplefilter("error")   # no fallback of any kind
                    want, got = f(q, k, v, mask, w), fast(q, k, v, mask, w)
                for a, b in zip(got, want):
                    torch.testing.assert_close(a, b, rtol=2e-2, atol=2e-2)
            assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    finally:
        logs.set_logs()
    err = capsys.readouterr().err
    assert err.count("attention: library") == 2, err[-3000:]
    assert err.count("captured the partitioned graph as one CUDA graph") == 2, err[-3000:]


_FUSED = r"_scaled_dot_product_(flash|efficient|cudnn)_attention\w*: library"


def _bf16_attention_logs(f, capsys, seq: int) -> tuple:
    """Compiles `f(x, w)` (bf16, [2, seq, 256] @ [256, 768]), checks 4 calls against
    eager with no fallback of any kind; (compiled function, fallback+passes log)."""
    from mlircap import logs

    logs.set_logs("fallback,passes")
    try:
        x = torch.randn(2, seq, 256, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(256, 768, device="cuda", dtype=torch.bfloat16) / 16
        fast = mlircap.compile(f)
        for _ in range(4):
            with warnings.catch_warnings():
                warnings.simplefilter("error")   # no fallback of any kind
                torch.testing.assert_close(fast(x, w), f(x, w), rtol=2e-2, atol=2e-2)
        assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    finally:
        logs.set_logs()
    return fast, capsys.readouterr().err


def test_bf16_sdpa_is_torchs_fused_kernel_not_float32_math(capsys):
    # scaled_dot_product_attention in bf16 was decomposed into its math form, which
    # upcasts q and k to float32 (ViT-B bf16: 24 float32 GEMMs per call). Now the
    # fused kernel torch picks is a library step, and q, k, v reach it in the
    # compiled part's layout (no copy back to eager's strides).
    import re

    def f(x, w):
        q, k, v = (x @ w).view(2, 197, 3, 4, 64).permute(2, 0, 3, 1, 4).unbind(0)
        a = torch.nn.functional.scaled_dot_product_attention(q.relu(), k, v)
        return a.transpose(1, 2).reshape(2, 197, 256) * 2 + 1

    fast, err = _bf16_attention_logs(f, capsys, 197)
    assert re.search(_FUSED, err), err[-3000:]
    assert not any("batch_matmul" in g.linalg_ir for g in fast.graphs), "attention's math form left"


def test_constant_masks_do_not_force_math_attention(capsys):
    # transformers (5.17) builds ViT's "no mask" while compiling as an all-True
    # [batch, 1, L, S] bool mask from arange; with it no fused kernel applies and
    # bf16 attention ran as its float32 math form (ViT-B: 24 float32 GEMMs). The
    # constant mask is dropped (attention_masks.py), and a constant causal mask
    # becomes is_causal=True: torch's fused kernels run as in eager.
    import re

    def f(x, w):
        q, k, v = (x @ w).view(2, 197, 3, 4, 64).permute(2, 0, 3, 1, 4).unbind(0)
        idx = torch.arange(197, device="cuda")
        full = ((idx[:, None] >= 0) & (idx[None, :] < 197))[None, None].expand(2, 1, 197, 197)
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=full)
        b = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=idx[None, :] <= idx[:, None])
        return (a + b).transpose(1, 2).reshape(2, 197, 256) * 2 + 1

    fast, err = _bf16_attention_logs(f, capsys, 197)
    assert "masks nothing: dropped" in err and "is causal: is_causal=True" in err, err[-3000:]
    assert len(re.findall(_FUSED, err)) >= 2, err[-3000:]
    assert not any("batch_matmul" in g.linalg_ir for g in fast.graphs), "attention's math form left"


def test_hand_written_attention_with_constant_masks_runs_flash(capsys):
    # transformers' eager attention while compiling: an extended "no padding" mask
    # (1 - ones) * finfo.min added and a constant causal masked_fill; both fold, so the
    # fused kernel is chosen without a mask (is_causal) as for eager's SDPA.
    import re

    def f(x, w):
        q, k, v = (x @ w).view(2, 128, 3, 4, 64).permute(2, 0, 3, 1, 4).unbind(0)
        s = q @ k.transpose(-2, -1) * 0.125
        s = s + (1.0 - torch.ones(2, 1, 1, 128, device="cuda", dtype=x.dtype)) * torch.finfo(x.dtype).min
        idx = torch.arange(128, device="cuda")
        s = s.masked_fill(~(idx[None, :] <= idx[:, None]), float("-inf"))
        return (s.softmax(-1) @ v).transpose(1, 2).reshape(2, 128, 256) + 1

    _, err = _bf16_attention_logs(f, capsys, 128)
    assert "constant masks folded (2 step(s), is_causal)" in err, err[-3000:]
    assert re.search(_FUSED, err), err[-3000:]


def test_whole_fallback_launches_eagers_kernels():
    # A graph with nothing compiled runs the captured graph as it is, not aot_autograd's
    # decomposed graph (BERT bf16 with a bad chip: 85.6 ms against eager's 6.2 ms when
    # it ran the decomposition). Measured structurally: one call launches the kernels
    # eager launches, none more (bench/gpu.py reports the time side by side).
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    from mlircap import models
    from mlircap.backend import _runs_nothing_compiled

    # a model whose code does not ask torch.compiler.is_compiling() (transformers builds
    # extra masks when it does, which eager never runs)
    m, args = models.build("attention", scale="small", dtype=torch.bfloat16, device="cuda")
    fast = mlircap.compile(m, chip="sm_1")   # a chip no GPU has: every graph falls back whole

    def kernels(fn):
        with torch.no_grad():
            fn(*args)
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                fn(*args)
                torch.cuda.synchronize()
        return Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(fast(*args), m(*args))
        got, want = kernels(fast), kernels(m)
    assert fast.graphs and all(_runs_nothing_compiled(g) for g in fast.graphs)
    assert sum(got.values()) <= sum(want.values()), (got - want)


def test_plan_that_cannot_be_captured_runs_without_cuda_graphs(monkeypatch, capsys):
    # zoo moe fp32 (1ca1719): "Cannot copy between CPU and CUDA tensors during CUDA
    # graph capture" reached the user from a compiled call. A plan step that cannot
    # run under capture (here a library call that copies from CPU memory, as a
    # host-side operand would) leaves that plan running step by step, not raising.
    from mlircap import logs
    from mlircap.runtime.plan import PlanExecutor

    real = PlanExecutor._run_library

    def host_copy_then_run(self, step, t):
        torch.ones(1).to("cuda")     # fails while the stream is capturing
        return real(self, step, t)

    monkeypatch.setattr(PlanExecutor, "_run_library", host_copy_then_run)
    f = lambda x, w: torch.relu(x @ w) + 1   # noqa: E731 - a matmul library step between kernels
    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    logs.set_logs("kernels")
    try:
        fast = mlircap.compile(f)
        for _ in range(5):   # record, compiled, capture (fails), then step by step
            with warnings.catch_warnings():
                warnings.simplefilter("error")   # no fallback to eager either
                torch.testing.assert_close(fast(x, w), f(x, w))
        assert not torch.cuda.is_current_stream_capturing()
        assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    finally:
        logs.set_logs()
    assert "CUDA graph capture failed" in capsys.readouterr().err


def test_split_graph_with_random_islands_replays_as_one_cuda_graph_with_eager_draws(capsys):
    # Held-out wav2vec2 bf16 (H200, be6798e): its layerdrop draws torch.rand([]) in eval
    # mode too, so the split graph (14 parts) ran part by part from Python: 0.38x
    # inductor+CUDA graphs. Random islands (default generator) now replay inside the
    # CUDA graph, drawing what eager draws: same seed, same values and generator state;
    # no reseed, fresh values.
    from mlircap import logs

    def f(x, w):
        h = torch.relu(x) @ w
        p = torch.rand([], device=x.device)            # a layerdrop draw
        keep = torch.rand_like(h) > 0.3                   # dropout's mask
        return torch.where(keep, h, 0.0) * 2 + p, torch.randn(4, device=x.device)

    x, w = torch.randn(64, 32, device="cuda"), torch.randn(32, 16, device="cuda")
    logs.set_logs("kernels")
    try:
        fast = mlircap.compile(f)
        for call in range(6):   # record, compiled, capture, replays
            torch.manual_seed(call)
            want = f(x, w)
            state = torch.cuda.get_rng_state()
            torch.manual_seed(call)
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                got = fast(x, w)
            for a, b in zip(got, want):
                torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
            assert torch.equal(torch.cuda.get_rng_state(), state), call
        a, b = fast(x, w), fast(x, w)   # no reseed: the stream moves on, as eager's does
        assert not torch.equal(a[1], b[1]) and not torch.equal(a[0], b[0])
        assert _compiled(fast), [g.fallback_reason for g in fast.graphs]
    finally:
        logs.set_logs()
    assert "captured the partitioned graph as one CUDA graph" in capsys.readouterr().err
