"""Held-out trust sweep, batch 10 (issue 10): regressions found by bench/modules9.py (detection
post-processing, segmentation, diffusion, RL, GNNs, point clouds, hand-written optimizers,
quantisation, audio, metrics, ragged batches, in-place views, dtypes and layouts). Each test runs
mlircap.compile against eager over several calls with changing inputs.

PYTEST_DONT_REWRITE"""

import torch

import mlircap


def _compare(fn, calls):
    fast = mlircap.compile(fn)
    for i, args in enumerate(calls):
        want = fn(*[a.clone() for a in args])
        got = fast(*[a.clone() for a in args])
        torch.testing.assert_close(got, want, msg=lambda m: f"call {i}: {m}")
    return fast


# ------------------------------------------------------------- tensor bounds of slices
def _slice_stop(x, offsets):
    n = offsets[-1]
    return x[:n] * 2


def _slice_step_and_start(x, offsets):
    return x[offsets[0]::offsets[1]] + 1


def _setitem_tensor_bounds(x, offsets):
    y = x.clone()
    y[1:offsets[-1], offsets[0]:] = 0
    return y


def _offset_calls():
    x = torch.randn(10, 3)
    return [(x, torch.tensor([0, 3, 7, 9])), (x, torch.tensor([0, 3, 7, 9])),
            (x, torch.tensor([1, 2, 7, 6])), (x, torch.tensor([2, 4, 5, 3]))]


def test_slice_with_tensor_stop():
    """x[:offsets[-1]] (segment_csr-style code): the 0-d tensor bound stayed inside the FX
    graph as a constant that its generated code wrote as `torch.Tensor(size=[], dtype=int64)`,
    so the second call raised NameError: name 'int64' is not defined (and a new bound could
    only have kept the recorded one). Now its value is read by a step before the op."""
    _compare(_slice_stop, _offset_calls())


def test_slice_with_tensor_start_and_step():
    _compare(_slice_step_and_start, _offset_calls())


def test_setitem_slice_with_tensor_bounds():
    _compare(_setitem_tensor_bounds, _offset_calls())


# ------------------------------------------------- split counts given as tensors
def _chunk_by_tensor(x, n):
    return [c + 1 for c in x.chunk(n[1])]


def _split_by_tensor(x, n):
    return [c * 2 for c in torch.split(x, n[2], dim=0)]


def _tensor_split_0d(x, n):
    return [c * 2 for c in torch.tensor_split(x, n[1])]


def _tensor_split_1d_indices(x, n):
    return [c * 2 for c in torch.tensor_split(x, n[1:2])]


def _unbind_tensor_dim(x, n):
    return [c * 2 for c in x.unbind(n[2] % 2)]


def _count_calls():
    x = torch.randn(6, 4)
    return [(x, torch.tensor([3, 2, 1])), (x, torch.tensor([3, 2, 1])), (x, torch.tensor([4, 3, 2])),
            (x, torch.tensor([5, 2, 3]))]


def test_chunk_count_from_a_tensor():
    """x.chunk(n) with a 0-d tensor n: the number of pieces is fixed by the recorded graph
    (the chunk ran as an eager island there, its other pieces dropped), so a new n returned
    the recorded count of pieces (2 where eager gave 3)."""
    _compare(_chunk_by_tensor, _count_calls())


def test_split_size_from_a_tensor():
    """torch.split(x, n) with a 0-d tensor size: a smaller size made more pieces than the
    graph's outputs (IndexError: tuple index out of range at replay)."""
    _compare(_split_by_tensor, _count_calls())


def test_tensor_split_sections_tensor_and_index_tensor():
    _compare(_tensor_split_0d, _count_calls())
    _compare(_tensor_split_1d_indices, _count_calls())   # a 1-d tensor: indices, its count fixed


def test_unbind_dim_from_a_tensor():
    _compare(_unbind_tensor_dim, _count_calls())


# ------------------------------------- shapes set by a tensor, read back as Python values
def _arange_max_length_loop(h, lengths):
    steps = torch.arange(lengths.max())
    return [h[:, t].sum() * 1 for t in steps], len(steps)


def _view_then_shape(h, lengths):
    y = h.reshape(-1).view(lengths[0], -1)
    return torch.ones(y.shape[0]) * y.shape[1]


def _pad_then_size(h, lengths):
    y = torch.nn.functional.pad(h, (0, lengths[1]))
    return y.shape[-1], y


def _topk_then_iterate(h, lengths):
    v = h.flatten().topk(lengths[0]).values
    return [t * 2 for t in v]


def _zeros_then_len(h, lengths):
    z = torch.zeros(lengths[1])
    return len(z), z + 1


def _length_calls():
    h = torch.randn(2, 6, 4)
    return [(h, torch.tensor([3, 2])), (h, torch.tensor([3, 2])), (h, torch.tensor([4, 5])), (h, torch.tensor([6, 1]))]


def test_arange_of_a_tensor_length_iterated():
    """torch.arange(lengths.max()) iterated: its length was read as recorded (a shape the
    guards do not cover, set by tensor data): a longer max returned the recorded number of
    items (len 3 where eager's was 4). Results of ops that read an int from a tensor argument
    (a size, count, k, offset) now have data-dependent shapes (shape_ops._SHAPE_INT_OPS)."""
    _compare(_arange_max_length_loop, _length_calls())


def test_view_size_from_a_tensor_then_shape_read():
    _compare(_view_then_shape, _length_calls())


def test_pad_amount_from_a_tensor_then_size_read():
    _compare(_pad_then_size, _length_calls())


def test_topk_k_from_a_tensor_then_iterated():
    _compare(_topk_then_iterate, _length_calls())


def test_zeros_size_from_a_tensor_then_len():
    _compare(_zeros_then_len, _length_calls())


def _sum_dim_tensor(h, lengths):
    y = h.sum(dim=lengths[1] % 3)
    return y.shape[0], y


def _avg_pool_kernel_tensor(h, lengths):
    y = torch.nn.functional.avg_pool1d(h, lengths[1] % 3 + 1)
    return y.shape[-1], y


def _cat_dim_tensor(h, lengths):
    y = torch.cat([h, h], dim=lengths[1] % 3)
    return list(y.shape), y


def test_dim_and_kernel_size_from_a_tensor_then_shape_read():
    """Where an aten op reads an int (a dim, a kernel size: its schema's type there is int or
    int[] in every overload, never Tensor or Scalar), a tensor given there set the result's
    shape, read back as recorded (sum over dim n: 3 rows where eager had 6)."""
    for f in (_sum_dim_tensor, _avg_pool_kernel_tensor, _cat_dim_tensor):
        _compare(f, _length_calls())


def _arange_float_tensor_end(h, lengths):
    a = torch.arange(0, lengths[0] * 0.75, 0.5)
    return len(a), a


def _arange_float_tensor_step(h, lengths):
    a = torch.arange(0.0, 4.0, lengths[1] / 4)
    return a.shape[0], a


def test_arange_with_float_tensor_bounds_then_shape_read():
    """torch.arange(0, t, 0.5) with a float 0-d tensor t (a duration in seconds, a step size
    as a tensor): the length is ceil((end - start) / step), read back as recorded (3 for 5)."""
    _compare(_arange_float_tensor_end, _length_calls())
    _compare(_arange_float_tensor_step, _length_calls())


def _size_of_tensor_dim(h, lengths):
    d = lengths[1] % 3
    return h.size(d), torch.ones(h.size(d)), h.stride(d)


def test_size_and_stride_of_a_tensor_dim():
    """x.size(d) / x.stride(d) with a 0-d tensor d: metadata guarded by x's shape but not by
    d, so a new d returned the recorded dim's size (6 where eager's was 4)."""
    _compare(_size_of_tensor_dim, _length_calls())


# ------------------------------------------ hand-written optimizer steps resetting .grad
class _HandSGD(torch.nn.Module):
    """An optimizer step written by hand, as RL and research code writes it: backward, then
    under no_grad a momentum buffer per parameter, the update, and `p.grad = None`. The second
    layer takes part only when `use_b` (its .grad stays None otherwise)."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(4, 4)
        self.b = torch.nn.Linear(4, 2)
        self.buf = {}

    def forward(self, x, use_b: bool = True):
        h = torch.tanh(self.a(x))
        loss = (self.b(h) if use_b else h).pow(2).mean()
        loss.backward()
        with torch.no_grad():
            for n, p in self.named_parameters():
                g = p.grad
                if g is None:
                    continue
                if n not in self.buf:
                    self.buf[n] = g.clone()
                else:
                    self.buf[n].mul_(0.9).add_(g)
                p.add_(self.buf[n], alpha=-0.1)
                p.grad = None
        return loss.detach()


def test_hand_written_step_resetting_grad_compiles():
    """The step's graph reads p.grad of its inputs, which the function sets to None before the
    graph is compiled (after the call): aot_autograd traced that read as None, the graph
    failed to compile ('graph output None is not a tensor') and ran eagerly on every call
    (bench/modules9.py radam / lars / sophia / sgd_flags). The reads are graph inputs now even
    then, with a gradient of the parameter's layout as the example; a call whose .grad is None
    (or laid out otherwise) runs the captured graph."""
    torch.manual_seed(0)
    ref = _HandSGD()
    mine = _HandSGD()
    mine.load_state_dict(ref.state_dict())
    fast = mlircap.compile(mine)
    for i in range(5):
        x = torch.randn(3, 4)
        use_b = i != 3
        want = ref(x, use_b)
        got = fast(x, use_b)
        torch.testing.assert_close(got, want, msg=lambda m: f"call {i}: {m}")
        for (k, p), q in zip(ref.named_parameters(), mine.parameters()):
            torch.testing.assert_close(q, p, msg=lambda m: f"call {i}, {k}: {m}")
            assert q.grad is None and p.grad is None
    failed = [g.fallback_reason for g in fast.graphs if g.fallback_reason]
    assert not failed, failed


def _one_hot_inferred_classes(h, lengths):
    o = torch.nn.functional.one_hot(lengths)
    return o.shape[1], o.float().sum(0)


def test_one_hot_without_num_classes_then_shape_read():
    """F.one_hot(labels) without num_classes has labels.max() + 1 columns: a shape set by
    tensor data, read back as recorded (3 columns where eager had 6)."""
    _compare(_one_hot_inferred_classes, _length_calls())


def _tensor_split_at_tensor_indices(h, lengths):
    parts = torch.tensor_split(h, lengths.sort().values, dim=1)
    return [p.shape[1] for p in parts], [p.sum() for p in parts]


def _packed_data_length(h, lengths):
    p = torch.nn.utils.rnn.pack_padded_sequence(h, lengths.clamp(min=1), batch_first=True, enforce_sorted=False)
    return p.data.shape[0], p.batch_sizes


def test_tensor_split_at_index_tensor_then_shapes():
    """torch.tensor_split(x, idx) with a 1-d index tensor: the pieces' sizes follow idx's
    values, read back as recorded (2 rows where eager's piece had 3)."""
    _compare(_tensor_split_at_tensor_indices, _length_calls())


def test_pack_padded_sequence_data_length():
    """pack_padded_sequence's data has sum(lengths) rows: its shape read back as recorded
    (9 where eager's was 11)."""
    _compare(_packed_data_length, _length_calls())
