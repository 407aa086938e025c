"""A Python function (lambda, local function) passed to a torch function: the node's target
holds it (FX's code generation cannot name it: capture gave up on the whole function with a
SyntaxError).  Only a function that is pure tensor code of its arguments, the same at every
call, is held so; what it reads of torch's modules is guarded.  Any other runs eagerly."""
import pytest
import torch

from harness import run_program


def _calls(n=4):
    torch.manual_seed(0)
    return [(torch.randn(5, 4), torch.randn(5, 4), torch.randn(5, 4)) for _ in range(n)]


def test_lambda_distance_function_in_one_graph():
    run_program("""
def make():
    def f(a, p, n):
        cos = nn.TripletMarginWithDistanceLoss(distance_function=lambda x, y: 1 - F.cosine_similarity(x, y),
                                               swap=True)
        d = lambda x, y: (x - y).abs().sum(-1)
        return cos(a, p, n), F.triplet_margin_with_distance_loss(a, p, n, distance_function=d, margin=0.3), \
            F.triplet_margin_with_distance_loss(a, p, n, distance_function=dist), \
            F.triplet_margin_with_distance_loss(a, p, n, distance_function=torch.pairwise_distance)
    return f
def dist(x, y):   # a module-level function (FX wrote it as its repr too)
    return 1 - F.cosine_similarity(x, y)
""", _calls(), graphs=1, recompiles=0, breaks=0)


@pytest.fixture
def cosine_similarity_restored():
    """The program below replaces F.cosine_similarity and puts back what it saved, in both copies
    (eager's first): the compiled copy saved the replacement, and left F.cosine_similarity as
    torch.pairwise_distance for the rest of the process (the transformer fast-path tests, which
    check that torch is as defined, then found the slow path refused)."""
    import torch.nn.functional as F
    f = F.cosine_similarity
    yield
    F.cosine_similarity = f


def test_local_function_reading_a_torch_global_is_guarded(cosine_similarity_restored):
    """The lambda reads F.cosine_similarity through the global F; replacing it is seen."""
    run_program("""
def mutate(i, f):
    if i == 2:
        F.cosine_similarity, mutate.saved = torch.pairwise_distance, F.cosine_similarity
    if i == 3:
        F.cosine_similarity = mutate.saved
def make():
    def f(a, p, n):
        return F.triplet_margin_with_distance_loss(a, p, n, distance_function=lambda x, y: F.cosine_similarity(x, y))
    return f
""", _calls(), recompiles=1)


def test_impure_functions_run_eagerly_with_a_reason():
    """A closure over a value that changes between calls, a default computed per call, a global
    number read: not held by the graph (the first call's would be replayed)."""
    for body in ("s = float(a.shape[0]) * K[0]\n        d = lambda x, y: (x - y).abs().sum(-1) * s",
                 "d = lambda x, y, s=K[0]: (x - y).abs().sum(-1) * s",
                 "d = lambda x, y: (x - y).abs().sum(-1) * K[0]",
                 "d = dist"):
        run_program(f"""
K = [1.0]
def dist(x, y):
    return (x - y).abs().sum(-1) * K[0]
def mutate(i, f):
    K[0] = 1.0 + i
def make():
    def f(a, p, n):
        {body}
        return F.triplet_margin_with_distance_loss(a, p, n, distance_function=d)
    return f
""", _calls(), allow_eager=True)
