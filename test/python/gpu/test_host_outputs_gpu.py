"""A CUDA graph with CPU outputs compiles around them (partition._host_outputs): BEiT-style
relative position bias, whose index is built with torch.arange on the CPU and indexes a CUDA
table. Before, the whole graph ran eagerly ('graph output ... is on cpu, the graph is compiled
for cuda'); in training the forward returns the CPU index for the backward."""
import pytest
import torch
import torch.nn as nn

import mlircap

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (run on the GPU host)")


class RelBias(nn.Module):
    def __init__(self, w=4, heads=2):
        super().__init__()
        self.w = w
        self.table = nn.Parameter(torch.randn((2 * w - 1) ** 2, heads))
        self.proj = nn.Linear(16, 16)

    def forward(self, x):
        coords = torch.stack(torch.meshgrid(torch.arange(self.w), torch.arange(self.w), indexing="ij")).flatten(1)
        rel = (coords[:, :, None] - coords[:, None, :]).permute(1, 2, 0) + (self.w - 1)
        idx = rel[..., 0] * (2 * self.w - 1) + rel[..., 1]          # CPU, (w*w, w*w)
        bias = self.table[idx.view(-1)].view(self.w ** 2, self.w ** 2, -1).permute(2, 0, 1)
        att = (self.proj(x) @ x.transpose(-1, -2)).unsqueeze(1) + bias
        return att.softmax(-1).sum(1)


@pytest.mark.parametrize("train", [False, True])
def test_cpu_index_in_a_cuda_graph_stays_compiled(train):
    torch.manual_seed(0)
    m = RelBias().cuda()
    x = torch.randn(3, 16, 16, device="cuda")
    fast = mlircap.compile(m)
    for _ in range(3):
        for p in m.parameters():
            p.grad = None
        with torch.set_grad_enabled(train):
            out = fast(x)
            if train:
                out.pow(2).mean().backward()
                grads = [p.grad.clone() for p in m.parameters()]
    with torch.set_grad_enabled(train):
        for p in m.parameters():
            p.grad = None
        ref = m(x)
        if train:
            ref.pow(2).mean().backward()
            for p, g in zip(m.parameters(), grads):
                torch.testing.assert_close(g, p.grad, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    assert fast.graphs and all(g.fallback_reason is None for g in fast.graphs), \
        [(g.name, g.fallback_reason) for g in fast.graphs]
    assert any(g.device == "cuda" for g in fast.graphs)
