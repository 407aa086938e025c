"""Defects bench/modules11.py found (session 26), each minimised: the program compiled and compared
with eager (outputs, gradients, state), and what used to run eagerly checked to compile."""
import warnings

import torch

import mlircap


class _ClampWithArgmax(torch.autograd.Function):
    """Two outputs, the second marked non-differentiable; needs_input_grad branches; a
    once_differentiable backward; a non-tensor argument kept on ctx."""

    @staticmethod
    def forward(ctx, x, w, k):
        y = x * w
        idx = y.argmax(-1)
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(x, w)
        ctx.k = k
        return y.clamp(-k, k), idx

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, gy, gidx):
        x, w = ctx.saved_tensors
        gx = gw = None
        if ctx.needs_input_grad[0]:
            gx = gy * w
        if ctx.needs_input_grad[1]:
            gw = (gy * x * 3).sum(0)
        return gx, gw, None


def _two_outputs(x, w):
    y, idx = _ClampWithArgmax.apply(x, w, 0.7)
    return (y * 2).sum(), idx + 1


def test_autograd_function_returning_a_tuple_of_tensors_is_one_graph_node():
    """bench/modules11.py autograd_fn_mark_non_differentiable_once_differentiable: a custom
    Function returning (values, indices) made capture give up on the whole forward ('apply
    returned no tensor'): only single-tensor results were held as a node. Now the tuple is the
    node's result (each element a getitem), one graph; outputs and both gradients as eager's."""
    for x_grad in (False, True):
        torch.manual_seed(0)
        x = torch.randn(4, 5, requires_grad=x_grad)
        w = torch.randn(5, requires_grad=True)
        x2, w2 = x.detach().clone().requires_grad_(x_grad), w.detach().clone().requires_grad_()
        fast = mlircap.compile(_two_outputs)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                ref, got = _two_outputs(x, w), fast(x2, w2)
                ref[0].backward()
                got[0].backward()
                torch.testing.assert_close(got[0], ref[0])
                assert torch.equal(got[1], ref[1])
                torch.testing.assert_close(w2.grad, w.grad)
                if x_grad:
                    torch.testing.assert_close(x2.grad, x.grad)
        assert not [str(w.message) for w in caught if "mlircap" in str(w.message)]
        info = fast.explain()
        assert info.graph_count == 1 and info.break_count == 0, info


def _scores(x):
    # (a buffer made and filled in a helper, returned as a view of another shape: the helper's
    # buffer is not the caller's, so a compiled graph returns the view as a tensor of its own)
    buf = x.new_zeros(2, 8, 2, 5)
    buf[:, :, :, 1:] = x[..., 1:]
    return buf.view(2, 1, 16, 5).transpose(2, 1)


def _mask_invalid_locations(x):
    t = _scores(x)
    print("", end="")   # a step between graphs
    m = x.new_ones(2, 3).tril()[None, :, None, :]
    a = t[:, :2, :, :3]
    print("", end="")
    t[:, :2, :, :3] = torch.full_like(a, -1.0).where(m.expand(a.size()).bool(), a)
    return t[:, -2:, :, -3:] * 2, t.sum()


def test_inputs_sharing_memory_aliased_otherwise_at_a_replay_run_the_captured_graph():
    """bench/modules11.py hf_longformer_local_global_attention (transformers' Longformer,
    _mask_invalid_locations: `t[:, :w, :, :w + 1] = ...where(mask, t[:, :w, :, :w + 1])` across
    graph breaks) raised from the second call on ('The size of tensor a (8) must match the size
    of tensor b (16)'): the graph writing t was compiled with t and its slice both views of the
    helper's [2, 8, 2, 5] buffer, which aot_autograd takes as their one base; at a replay the
    graph before returned t as a tensor of its own, the slice's base, and aot_autograd's wrapper
    passed t for the [2, 8, 2, 5] base (its eager rerun too). Such a call now runs the captured
    graph; outputs as eager's at every call."""
    torch.manual_seed(0)
    fast = mlircap.compile(_mask_invalid_locations)
    for i in range(4):
        x = torch.randn(2, 8, 2, 5)
        ref, got = _mask_invalid_locations(x), fast(x)
        for r, g in zip(ref, got):
            torch.testing.assert_close(g, r, msg=f"call {i}")


def _lm_and_choice_losses(h, w, ids):
    logits = torch.nn.functional.linear(h, w)   # (2, 2, 6, 50)
    mc = torch.nn.functional.dropout(h[:, :, 0], 0.1, training=True)
    shift = logits[..., :-1, :].contiguous()
    loss = torch.nn.functional.cross_entropy(shift.view(-1, 50), ids[..., 1:].contiguous().view(-1))
    return loss, mc


def test_eager_island_gets_contiguous_inputs_where_eager_has_them():
    """bench/modules11.py hf_gpt2_double_heads_train_loss (transformers' GPT2DoubleHeadsModel in
    training): the compiled part returned `lm_logits[..., :-1, :].contiguous()` as a view of its
    own buffer (strides (600, 300, 50, 1)), and the eager island beside the dropout took it as it
    was: only non-contiguous eager layouts were restored, and its aten.view(-1, 50) raised 'view
    size is not compatible with input tensor's size and stride' on the first run (the graph then
    ran eagerly, with a warning). Islands now get eager's layout for contiguous inputs too."""
    torch.manual_seed(0)
    w = torch.randn(50, 16, requires_grad=True)
    fast = mlircap.compile(_lm_and_choice_losses)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            h, ids = torch.randn(2, 2, 6, 16), torch.randint(0, 50, (2, 2, 6))
            torch.manual_seed(i)
            ref = _lm_and_choice_losses(h, w, ids)
            torch.manual_seed(i)
            got = fast(h, w, ids)
            for r, g in zip(ref, got):
                torch.testing.assert_close(g, r, msg=f"call {i}")
    assert not [str(w.message) for w in caught if "mlircap" in str(w.message)]


def _chunked(x, w):
    n = torch.div(x.size(1), 4, rounding_mode="trunc")
    y = (x * w).view(x.size(0), n, 4, x.size(2))
    size = list(y.size())
    size[1] = size[1] * 2 - 1
    stride = list(y.stride())
    stride[1] = stride[1] // 2
    return y.sum(2), y.as_strided(size=size, stride=stride).sum(), n + 1


def test_sizes_computed_by_torch_div_of_numbers_compile():
    """bench/modules11.py hf_longformer_local_global_attention: transformers' Longformer chunks by
    `view(b, torch.div(n, 2 * w, rounding_mode="trunc"), 2 * w, d)` (n a size): aot_autograd read
    the 0-d tensor handed as a size as data ('DataDependentOutputException:
    aten._local_scalar_dense') and the whole graph ran eagerly, with a warning. Such a tensor,
    computed from numbers alone, is its value where it is a size; elsewhere (`n + 1` returned) it
    stays the tensor eager has."""
    torch.manual_seed(0)
    w = torch.randn(16, 3, requires_grad=True)
    fast = mlircap.compile(_chunked)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(3):
            x = torch.randn(2, 16, 3)
            ref, got = _chunked(x, w), fast(x, w)
            for r, g in zip(ref, got):
                assert type(g) is type(r) and g.dtype == r.dtype
                torch.testing.assert_close(g, r, msg=f"call {i}")
    assert not [str(w.message) for w in caught if "mlircap" in str(w.message)]
