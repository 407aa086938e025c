"""frontend._kept_off_cpu: embedding_dense_backward stays whole off the CPU (an index island
running eager's kernel) and is decomposed on the CPU (where the compiled backward computes it).
On CUDA the decomposition's index_put(accumulate=True) ran indexing_backward_kernel: 0.49 ms of a
RoBERTa training step on an H100 where eager's kernel takes 0.11 ms. The meta device stands in for
the GPU here (this host has none)."""
import torch

import mlircap
from mlircap.frontend import decomposition_table

aten = torch.ops.aten


def _args(device):
    grad = torch.arange(24.0, device=device).view(6, 4)
    idx = torch.tensor([0, 2, 2, 5, 1, 0], device=device)
    return grad, idx, 7, -1, False


def test_kept_whole_off_the_cpu_decomposed_on_it():
    dec = decomposition_table()[aten.embedding_dense_backward.default]
    assert dec(*_args("meta")) is NotImplemented
    got = dec(*_args("cpu"))
    torch.testing.assert_close(got, aten.embedding_dense_backward(*_args("cpu")))


def test_embedding_training_on_cpu_matches_eager():
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 3))
    idx = torch.randint(0, 50, (4, 9))
    fast = mlircap.compile(m)
    for _ in range(3):
        m.zero_grad()
        fast(idx).pow(2).mean().backward()
        got = [p.grad.clone() for p in m.parameters()]
    m.zero_grad()
    m(idx).pow(2).mean().backward()
    for g, p in zip(got, m.parameters()):
        torch.testing.assert_close(g, p.grad)
