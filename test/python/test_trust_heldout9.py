"""Held-out trust sweep, batch 9 (issue 10): regressions found by bench/modules8.py (image
restoration, geometry, attention variants, generative samplers, RL, LLM quantization, scientific
code, tensor semantics and autograd machinery). Each test runs mlircap.compile against eager over
several calls and compares outputs and the gradients a call leaves.

PYTEST_DONT_REWRITE"""

import torch

import mlircap


def _graphs_compiled(fast):
    return [g for g in fast.graphs if g.fallback_reason is None and g.executable is not g.gm]


# ----------------------------------------------- two backward passes through one compiled graph
class _TwoBackward(torch.nn.Module):
    """A loss backpropagated twice (GAN / multi-loss code): backward(retain_graph=True), the
    gradient cloned, then a multiple of the same loss backpropagated again. The second loss is
    its own captured graph whose inputs are the loss and the weight (read for its .grad)."""

    def __init__(self, retain_second):
        super().__init__()
        self.lin = torch.nn.Linear(3, 2)
        self.retain_second = retain_second

    def forward(self, x):
        y = torch.tanh(self.lin(x)).sum()
        y.backward(retain_graph=True)
        g1 = self.lin.weight.grad.clone()
        (y * 2).backward(retain_graph=self.retain_second)
        return g1, self.lin.weight.grad.clone(), self.lin.bias.grad.clone(), y.detach()


def _run_two_backward(retain_second):
    torch.manual_seed(0)
    ref = _TwoBackward(retain_second)
    mine = _TwoBackward(retain_second)
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(4):
        x = torch.randn(4, 3)
        for m in (ref, mine):
            m.zero_grad(set_to_none=False)
        want = ref(x)
        got = fast(x)
        for j, (w, g) in enumerate(zip(want, got)):
            torch.testing.assert_close(g, w, msg=lambda m: f"call {i}, output {j}: {m}")
    assert _graphs_compiled(fast)


def test_second_backward_through_retained_graph():
    """The second backward (no retain_graph) raised 'Trying to backward through the graph a
    second time' on the first compiled call: the graph of `y * 2` takes y and the weight, and
    its backward's autograd.grad with respect to the weight went on through y's own graph,
    freeing its saved tensors before the engine reached it."""
    _run_two_backward(retain_second=False)


def test_retained_graphs_gradient_not_counted_twice():
    """With retain_graph on both passes nothing raised, but the weight's gradient through y was
    returned twice (by the `y * 2` graph's backward and through the engine): a wrong .grad."""
    _run_two_backward(retain_second=True)


# ------------------------------------------------------- saved tensor hooks, forward-mode AD
class _Compressed(torch.nn.Module):
    """Activation compression: saved_tensors_hooks whose pack keeps each saved tensor in float16
    (counted on the module) and whose unpack returns float32."""

    def __init__(self, inside=True):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(6, 8), torch.nn.Linear(8, 3)
        self.inside, self.packed = inside, 0

    def pack(self, t):
        self.packed += 1
        return t.to(torch.float16)

    def body(self, x):
        return torch.sigmoid(self.l2(torch.tanh(self.l1(x)) * 3.3)).pow(2).sum()

    def forward(self, x):
        if self.inside:
            with torch.autograd.graph.saved_tensors_hooks(self.pack, lambda t: t.to(torch.float32)):
                return self.body(x)
        return self.body(x)


def _check_compressed(inside):
    torch.manual_seed(0)
    ref, mine = _Compressed(inside), _Compressed(inside)
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(3):
        x = torch.randn(4, 6) * 3
        grads = []
        for m, f in ((ref, ref), (mine, fast)):
            m.zero_grad()
            if inside:
                loss = f(x)
            else:
                with torch.autograd.graph.saved_tensors_hooks(m.pack, lambda t: t.to(torch.float32)):
                    loss = f(x)
            loss.backward()
            grads.append((loss.detach(), m.l1.weight.grad.clone(), m.l2.bias.grad.clone(), m.packed))
        for j, (w, g) in enumerate(zip(*grads)):
            torch.testing.assert_close(g, w, msg=lambda s: f"call {i}, value {j}: {s}")


def test_saved_tensors_hooks_inside_compiled_function():
    """The hooks pushed inside the function ran on the recording call only: replayed graphs saved
    unrounded activations (gradients off by 2e-3) and never called pack (the count stayed)."""
    _check_compressed(inside=True)


def test_saved_tensors_hooks_around_compiled_call():
    """A compiled module called under the user's saved_tensors_hooks: its compiled graph saves
    other tensors than eager's ops do, so the call runs eagerly."""
    _check_compressed(inside=False)


def test_activation_checkpointing_still_compiles():
    """torch.utils.checkpoint (non-reentrant) pushes saved tensor hooks of its own, which keep the
    values: a checkpointed block stays one compiled graph, as before."""
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    lin = torch.nn.Linear(5, 5)

    def f(x):
        return checkpoint(lambda t: torch.tanh(lin(t)) * 2, x, use_reentrant=False).sum()

    fast = mlircap.compile(f)
    for _ in range(3):
        x = torch.randn(3, 5, requires_grad=True)
        want = torch.autograd.grad(f(x), x)[0]
        got = torch.autograd.grad(fast(x), x)[0]
        torch.testing.assert_close(got, want)
    assert _graphs_compiled(fast)


class _Jvp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 4)

    def forward(self, x, t):
        import torch.autograd.forward_ad as fwAD
        with fwAD.dual_level():
            d = fwAD.make_dual(x, t)
            y = torch.sin(self.lin(d)) * d.sum(-1, keepdim=True)
            p, tan = fwAD.unpack_dual(y)
        return p, tan


def test_forward_ad_dual_level_inside_compiled_function():
    """fwAD.dual_level() inside the function: the graph recorded make_dual / unpack_dual at the
    recording's level, and the second call raised 'Trying to access a forward AD level with an
    invalid index'; the function now runs eagerly."""
    torch.manual_seed(0)
    ref, mine = _Jvp(), _Jvp()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(3):
        x, t = torch.randn(2, 3), torch.randn(2, 3)
        for j, (w, g) in enumerate(zip(ref(x, t), fast(x, t))):
            torch.testing.assert_close(g, w, msg=lambda s: f"call {i}, output {j}: {s}")


# --------------------------------------- anomaly detection, autograd node hooks, dispatch modes
def _compare_train(make, make_input, calls=3):
    torch.manual_seed(0)
    ref, mine = make(), make()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(calls):
        x = make_input()
        ref.zero_grad(set_to_none=True)
        mine.zero_grad(set_to_none=True)
        want, got = ref(x), fast(x)
        for j, (w, g) in enumerate(zip(want, got)):
            if isinstance(w, torch.Tensor) or w is None:
                assert (g is None) == (w is None), f"call {i}, output {j}: {g!r} (eager {w!r})"
                if w is not None:
                    torch.testing.assert_close(g, w, equal_nan=True, msg=lambda s: f"call {i}, output {j}: {s}")
            else:
                assert g == w, f"call {i}, output {j}: {g!r} (eager {w!r})"


class _Anomaly(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        with torch.autograd.detect_anomaly(check_nan=True):
            y = torch.sqrt(self.lin(x))
            try:
                y.sum().backward()
                ok = 1
            except RuntimeError:
                ok = 0
        return y.detach(), ok, self.lin.weight.grad


def test_detect_anomaly_inside_compiled_function():
    """detect_anomaly(check_nan=True) around a backward with a NaN gradient, its RuntimeError
    caught: the replayed graphs' backward raised nothing (ok 1, weight.grad set where eager's is
    None); anomaly detection switched on inside now makes the function run eagerly."""
    _compare_train(_Anomaly, lambda: torch.randn(2, 3))


class _NodeHooks(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1, self.l2 = torch.nn.Linear(3, 3), torch.nn.Linear(3, 2)

    def forward(self, x):
        h = torch.tanh(self.l1(x))
        y = torch.sigmoid(self.l2(h))
        a = h.grad_fn.register_hook(lambda gi, go: (gi[0] * 0.5,))
        b = y.grad_fn.register_prehook(lambda go: (go[0] * 3,))
        y.sum().backward()
        a.remove()
        b.remove()
        return self.l1.weight.grad.clone(), self.l2.weight.grad.clone()


def test_autograd_node_hooks_inside_compiled_function():
    """grad_fn.register_hook / register_prehook: at replay grad_fn is the compiled graph's node
    (its grad_inputs the graph's inputs'), and the hook returning one gradient raised."""
    _compare_train(_NodeHooks, lambda: torch.randn(4, 3))


class _MutateSaved(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x):
        with torch.autograd.graph.allow_mutation_on_saved_tensors():
            y = self.lin(x)
            z = y.sin()
            y.mul_(2)
            z.sum().backward()
        return self.lin.weight.grad.clone(), y.detach()


def test_allow_mutation_on_saved_tensors_dispatch_mode():
    """allow_mutation_on_saved_tensors clones a saved tensor before an in-place write through a
    TorchDispatchMode, which sees eager's aten ops only: the replay raised (the saved activation
    modified in place). A TorchDispatchMode pushed inside, or active at the call, runs eagerly."""
    _compare_train(_MutateSaved, lambda: torch.randn(2, 3))


# ------------------------------------------------- nn.TransformerEncoder's nested-tensor fast path
def _encoder():
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.1, batch_first=True)
    return torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True).eval()


def test_transformer_encoder_padding_mask_fast_path_inference():
    """nn.TransformerEncoder in eval under no_grad / inference_mode with a src_key_padding_mask:
    eager converts the batch to a nested tensor (its fast path), so padded positions come out 0.
    The recording answered torch.compiler.is_compiling() True and has_torch_function(...) True
    (its own TorchFunctionMode), took the slow path, and returned the padded positions' values
    (max difference 2.2). Then frozen parameters with grad mode on (eager's fast path too), and
    grad needed (slow path in both), in turn on the same compiled module."""
    ref, mine = _encoder(), _encoder()
    fast = mlircap.compile(mine)
    modes = [torch.no_grad, torch.inference_mode, torch.no_grad, torch.enable_grad]
    for i, mode in enumerate(modes):
        x = torch.randn(3, 6, 16)
        pad = torch.zeros(3, 6, dtype=torch.bool)
        pad[0, 3:] = True
        pad[1, 5:] = True
        with mode():
            want, got = ref(x, src_key_padding_mask=pad), fast(x, src_key_padding_mask=pad)
        torch.testing.assert_close(got, want, msg=lambda s: f"call {i} ({mode.__name__}): {s}")
    for m in (ref, mine):
        m.requires_grad_(False)
    for i in range(2):
        x = torch.randn(2, 5, 16)
        pad = torch.zeros(2, 5, dtype=torch.bool)
        pad[1, 2:] = True
        torch.testing.assert_close(fast(x, src_key_padding_mask=pad), ref(x, src_key_padding_mask=pad),
                                   msg=lambda s: f"frozen call {i}: {s}")


def test_multihead_attention_fully_padded_row_fast_path_inference():
    """nn.MultiheadAttention in eval under no_grad with a key_padding_mask padding a whole
    sequence (need_weights=False): eager's fast path (_native_multi_head_attention) and the slow
    path the recording took (has_torch_function True under its own mode) differ on that row."""
    torch.manual_seed(0)
    ref = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    mine = torch.nn.MultiheadAttention(16, 4, batch_first=True).eval()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(lambda x, p: mine(x, x, x, key_padding_mask=p, need_weights=False)[0])
    for i in range(3):
        x = torch.randn(3, 6, 16)
        pad = torch.zeros(3, 6, dtype=torch.bool)
        pad[0] = True
        pad[1, 4:] = True
        with torch.no_grad():
            want = ref(x, x, x, key_padding_mask=pad, need_weights=False)[0]
            got = fast(x, pad)
        torch.testing.assert_close(got, want, equal_nan=True, msg=lambda s: f"call {i}: {s}")
    assert _graphs_compiled(fast)
