"""CPU plans run their kernels from C++ (the binding's CpuProgram): one call per
run of kernels between library ops, from a table of data pointers."""
import threading

import pytest
import torch

import mlircap
from mlircap._core import core


def compiled_executable(fn, *args):
    fast = mlircap.compile(fn)
    with torch.no_grad():
        fast(*args)
        fast(*args)
    (graph,) = fast.graphs
    assert graph.fallback_reason is None
    return fast, graph.executable


def kernel_runs(exe):
    return [(b, e) for step, b, e in exe._segments if step is None]


def test_kernels_between_library_ops_run_in_one_call_each():
    def f(x, w1, w2):
        h = torch.nn.functional.gelu(x @ w1)
        h = (h.sum(0) + 1).exp().sum() * h      # three kernels in a row
        return torch.softmax(h @ w2, -1)

    # seeded: exp of a sum scales the logits of the softmax, which turn rounding into a 2e-4
    # relative difference on some draws (1 of 128 elements in one full-suite run)
    g = torch.Generator().manual_seed(0)
    args = (torch.randn(8, 32, generator=g), torch.randn(32, 64, generator=g) / 8, torch.randn(64, 16, generator=g) / 8)
    fast, exe = compiled_executable(f, *args)
    steps = [s.kind for s in exe.plan.steps]
    assert steps.count("library") == 2
    # every maximal run of kernel steps is one program range, covering all kernels
    expected, i = [], 0
    while i < len(steps):
        j = i
        while j < len(steps) and steps[j] == "kernel":
            j += 1
        if j > i:
            expected.append(j - i)
        i = max(j, i + 1)
    runs = kernel_runs(exe)
    assert [e - b for b, e in runs] == expected and max(expected) >= 3
    assert runs[-1][1] == len(exe.program) == exe.n_kernels
    with torch.no_grad():
        torch.testing.assert_close(fast(*args), f(*args), rtol=1e-5, atol=1e-5)


def test_all_kernel_graph_is_one_call():
    def f(x):
        return (x.sum(0) + 1).exp().sum() * x

    x = torch.randn(4, 8)
    fast, exe = compiled_executable(f, x)
    assert exe.n_kernels == 3 and kernel_runs(exe) == [(0, 3)]
    torch.testing.assert_close(fast(x), f(x))


def test_views_inputs_outputs_and_constants():
    # transposed inputs (made contiguous), an output that is a view, one that is an input
    def f(x, w):
        y = torch.tanh(x @ w.t())
        return y.t(), y * 2, x

    x, w = torch.randn(6, 5), torch.randn(3, 5)
    fast, exe = compiled_executable(f, x, w)
    for args in [(x, w), (torch.randn(5, 6).t(), torch.randn(5, 3).t())]:
        with torch.no_grad():
            got, ref = fast(*args), f(*args)
        for g, r in zip(got, ref):
            torch.testing.assert_close(g, r)


def test_wrong_dtype_is_rejected():
    fast, exe = compiled_executable(lambda x: x + 1, torch.randn(8))
    with pytest.raises(RuntimeError, match="expected f32"):
        exe(torch.ones(8, dtype=torch.float64))


def test_threads_share_one_executable():
    # descriptors are filled per run: concurrent calls (the GIL is released
    # while kernels run) do not see each other's pointers
    def f(x):
        return torch.exp(x * 2).sum(-1) + x.amax(-1)

    x0 = torch.randn(64, 256)
    _, exe = compiled_executable(f, x0)
    errors = []

    def worker(seed):
        g = torch.Generator().manual_seed(seed)
        for _ in range(200):
            x = torch.randn(64, 256, generator=g)
            (out,) = exe(x)
            if not torch.allclose(out, f(x), rtol=1e-5, atol=1e-4):
                errors.append(seed)

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_program_checks_the_pointer_table():
    engine, _ = core().cpu_plan_compile("""
func.func @main(%a: tensor<4xf32>) -> tensor<4xf32> {
  %e = tensor.empty() : tensor<4xf32>
  %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>],
      iterator_types = ["parallel"]} ins(%a : tensor<4xf32>) outs(%e : tensor<4xf32>) {
  ^bb0(%x: f32, %o: f32):
    %s = arith.addf %x, %x : f32
    linalg.yield %s : f32
  } -> tensor<4xf32>
  return %0 : tensor<4xf32>
}""", 3)
    program = core().CpuProgram()
    program.add(engine.lookup("main_k0"), [0, 1], [[4], [4]])
    a, out = torch.arange(4, dtype=torch.float32), torch.zeros(4)
    with pytest.raises(IndexError):
        program.run([a.data_ptr()])
    program.run([a.data_ptr(), out.data_ptr()])
    torch.testing.assert_close(out, a * 2)


@pytest.mark.parametrize("case", ["returned", "viewed_by_matmul", "depthwise_sliced"])
def test_convolution_results_are_used_not_copied(case):
    """A convolution has no out= form: its result tensor becomes the plan's value (its
    pointer, and its views' pointers, go into the table after the step) instead of being
    copied into a preallocated buffer. Same values as the step-by-step reference and eager."""
    torch.manual_seed(0)
    w = torch.randn(6, 4, 3, 3)
    dw = torch.randn(4, 1, 3, 3)
    m = torch.randn(6 * 8 * 8, 5)

    def returned(x):
        c = torch.nn.functional.conv2d(x, w, padding=1)
        return c, torch.relu(c) * 2             # the raw result is an output, and a kernel's input

    def viewed_by_matmul(x):
        c = torch.nn.functional.conv2d(x, w, padding=1)
        return torch.tanh(c.flatten(1) @ m)     # a library step reads a view of it

    def depthwise_sliced(x):
        c = torch.nn.functional.conv2d(x, dw, padding=1, groups=4)
        return c[:, 1:3] + c[:, :2], torch.nn.functional.conv2d(torch.sigmoid(c), w)

    fn = {"returned": returned, "viewed_by_matmul": viewed_by_matmul, "depthwise_sliced": depthwise_sliced}[case]
    x = torch.randn(2, 4, 8, 8)
    fast, exe = compiled_executable(fn, x)
    convs = [s for s in exe.plan.library_steps if s.op.startswith("conv2d")]
    # float32 depthwise convolutions run in the core's kernel, into their buffer
    # (test_cpu_depthwise_kernel); the others' results are rebound
    assert convs and all((s.out in exe._rebound) != (id(s) in exe._native) for s in convs)
    assert all(id(s) in exe._native for s in convs if s.op == "conv2d_depthwise_nchw_chw")
    assert "copy_" not in exe.source and "RL(" not in exe.source
    ins = fast.graphs[0].last_inputs()   # x and the captured weights
    assert ins is not None
    with torch.no_grad():
        eager = fn(x)
        eager = eager if isinstance(eager, tuple) else (eager,)
        for _ in range(2):   # the second call reuses the workspace pool
            got, ref = exe(*ins), exe._call_generic(*ins)
            assert len(got) == len(ref) == len(eager)
            for g, r, e in zip(got, ref, eager):
                torch.testing.assert_close(g, r, rtol=0, atol=0)
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
            for g, e in zip(fast(x) if isinstance(fn(x), tuple) else (fast(x),), eager):
                torch.testing.assert_close(g, e, rtol=1e-4, atol=1e-4)
