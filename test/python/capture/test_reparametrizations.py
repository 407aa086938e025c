"""Modules whose weight is computed from other parameters at every forward: torch's
`parametrize` properties (weight_norm, spectral_norm, orthogonal, user parametrizations)
and the old forward pre-hooks (`torch.nn.utils.weight_norm` / `spectral_norm`).  Their code
is traced like nn/modules, so the parameters it reads are tracked graph inputs: one graph,
outputs, gradients and buffers (spectral_norm's power iteration) equal to eager's over
calls with new inputs and after the parameters change."""
import pytest
import torch

from harness import run_program
from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731

_STEP = """
def state(m):
    return {k: v.grad for k, v in m.named_parameters()}

def mutate(i, m):
    # the optimizer's step between calls: new parameter values, same objects
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.9).add_(0.01 * i)
            p.grad = None
"""


def _calls(*shape, n=4):
    torch.manual_seed(7)
    return [(torch.randn(*shape),) for _ in range(n)]


@pytest.mark.parametrize("wrap", [
    "torch.nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, padding=1), dim=2)",
    "torch.nn.utils.parametrizations.weight_norm(nn.Conv1d(4, 6, 3, padding=1))",
    "torch.nn.utils.weight_norm(nn.Conv1d(4, 6, 3, padding=1), dim=2)",
])
def test_weight_norm_train_step_one_graph(wrap):
    """Wav2Vec2's positional convolution (weight_norm(conv, dim=2)): capture gave up on
    'parameter reached through an untracked path (in torch._weight_norm)'."""
    run_program(_STEP + f"""
import warnings
warnings.simplefilter("ignore", FutureWarning)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = {wrap}
    def forward(self, x):
        y = F.gelu(self.conv(x))
        y.square().mean().backward()
        return y.detach()
def make():
    return M()
""", _calls(2, 4, 10), recompiles=0)   # the backward call is a step between graphs


@pytest.mark.parametrize("train", [True, False])
@pytest.mark.parametrize("wrap", [
    "torch.nn.utils.parametrizations.spectral_norm(nn.Linear(5, 4))",
    "torch.nn.utils.spectral_norm(nn.Linear(5, 4))",
])
def test_spectral_norm_power_iteration_buffers(wrap, train):
    """spectral_norm in training mode updates its u/v buffers in place at every forward
    (under no_grad, inside the reparametrization's code): the buffers equal eager's."""
    run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = {wrap}
    def forward(self, x):
        return torch.tanh(self.fc(x))
def make():
    return M().train({train})
""", _calls(3, 5), graphs=1, recompiles=0)


def test_orthogonal_and_user_parametrization():
    run_program("""
import torch.nn.utils.parametrize as P
class Symmetric(nn.Module):
    def forward(self, X):
        return X.triu() + X.triu(1).transpose(0, 1)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.utils.parametrizations.orthogonal(nn.Linear(5, 5))
        self.b = nn.Linear(5, 5)
        P.register_parametrization(self.b, "weight", Symmetric())
    def forward(self, x):
        return self.b(self.a(x))
def make():
    return M()
""", _calls(3, 5), graphs=1, recompiles=0)


def test_parametrization_cache_context():
    """parametrize.cached(): the parametrized weight is computed once per context; the
    cache flag (a module global of parametrize.py) is read by traced code, so guarded."""
    run_program("""
import torch.nn.utils.parametrize as P
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.utils.parametrizations.weight_norm(nn.Linear(5, 5))
    def forward(self, x):
        with P.cached():
            return self.fc(self.fc(x))
def make():
    return M()
""", _calls(3, 5), recompiles=0)


def test_generator_star_args_read_attributes_traced():
    """f(*(getattr(self, f"w{i}") for i in ...)) (ParametrizationList.forward): the generator
    ran inside the tracer's handler, untraced, so the parameters it read had no source."""
    run_program("""
def combine(*ts):
    return sum(ts)
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.w0 = nn.Parameter(torch.randn(3))
        self.w1 = nn.Parameter(torch.randn(3))
        self.lin = nn.Linear(3, 3)
        self.n = 2
    def forward(self, x):
        a = torch.stack(tuple(getattr(self, f"w{i}") for i in range(self.n)))
        b = combine(*(getattr(self, f"w{i}") * x for i in range(self.n)))
        c = torch.add(*(getattr(self, f"w{i}") for i in range(self.n)))
        d = self.lin(*(t for t in (x,)))
        return a.sum(0) + b + c + d
def make():
    return M()
def mutate(i, m):
    with torch.no_grad():
        m.w0.add_(1.0)
""", _calls(3), graphs=1, recompiles=0)


def test_wav2vec2_compiles_whole():
    """transformers' Wav2Vec2Model (weight-normed positional convolution): one graph, no
    give-up, outputs equal eager's over calls with new inputs, in eval and in train mode
    (dropout and LayerDrop draw from torch's RNG: same seed, same values; gradients too).
    In train mode the feature encoder is frozen (it otherwise sets `requires_grad = True` on
    a view of the input) and SpecAugment is off (its mask is NumPy code on a list of
    arrays): both still run eagerly."""
    T = pytest.importorskip("transformers")
    np = pytest.importorskip("numpy")
    cfg = T.Wav2Vec2Config(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64,
                           conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16,
                           num_conv_pos_embedding_groups=4, vocab_size=20)
    for train in (False, True):
        cfg.mask_time_prob = 0.0 if train else cfg.mask_time_prob
        torch.manual_seed(0)
        ref = T.Wav2Vec2Model(cfg).train(train)
        m = T.Wav2Vec2Model(cfg).train(train)
        m.load_state_dict(ref.state_dict())
        if train:
            ref.freeze_feature_encoder()
            m.freeze_feature_encoder()
        fast = capture(m, EAGER)
        for i in range(3):
            x = torch.randn(2, 320 + 80 * (i == 2))
            torch.manual_seed(10 + i)
            np.random.seed(10 + i)
            e = ref(x).last_hidden_state
            torch.manual_seed(10 + i)
            np.random.seed(10 + i)
            c = fast(x).last_hidden_state
            assert torch.equal(e, c), (train, i)
            if train:
                e.sum().backward()
                c.sum().backward()
                for (k, p), q in zip(ref.named_parameters(), m.parameters()):
                    assert (p.grad is None) == (q.grad is None) and \
                        (p.grad is None or torch.allclose(p.grad, q.grad, atol=1e-6)), k
        cap = fast._mlircap_capture
        assert not any(v.eager for v in cap.variants), [v.reason for v in cap.variants]
        if not train:
            assert all(len(v.graphs) == 1 and not v.breaks for v in cap.variants)
            assert len(cap.variants) == 2   # two input shapes
