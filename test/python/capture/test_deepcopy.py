"""copy.deepcopy of tensors inside the captured function (capture gave up on every form:
'parameter reached through an untracked path', 'unsupported argument of type
UntypedStorage').  A tensor that needs no autograd leaf of its own is cloned in the graph;
a parameter, or a tensor that requires grad, is copied by a replayed step between graphs
(a new leaf whose gradient the program may read).  Outputs, gradients, module state equal
eager's over calls with new inputs and parameters."""
import torch

from harness import run_program

_PRE = """
import copy
def mutate(i, m):
    with torch.no_grad():
        for p in m.parameters():
            p.mul_(0.9).add_(0.01 * i)
"""


def _calls(*shape, n=4, grad=False):
    torch.manual_seed(3)
    return [(torch.randn(*shape, requires_grad=grad),) for _ in range(n)]


def test_deepcopy_buffer_input_and_list_in_graph():
    run_program(_PRE + """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.randn(4))
        self.lin = nn.Linear(4, 4)
    def forward(self, x):
        b = copy.deepcopy(self.b)
        b.mul_(2)                      # the copy, not the buffer
        y = copy.deepcopy(x)
        y.add_(1)                      # not the caller's tensor
        a, c = copy.deepcopy([self.b, x * 3])
        return self.lin(x) + b + y + a + c, self.b
def make():
    return M()
""", _calls(2, 4), graphs=1, recompiles=0, breaks=0)


def test_deepcopy_parameter_new_leaf_with_grad():
    """The copy is a Parameter, a leaf that requires grad: backward fills its .grad, which
    the program returns, and not the original's."""
    run_program(_PRE + """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 3)
    def forward(self, x):
        w = copy.deepcopy(self.lin.weight)
        y = x @ w.t() + self.lin(x)
        y.square().sum().backward()
        return y.detach(), w, w.grad, self.lin.weight.grad
def make():
    return M()
""", _calls(2, 4), recompiles=0)


def test_deepcopy_of_input_requiring_grad():
    run_program("""
import copy
def make():
    def f(x):
        y = copy.deepcopy(x)
        (y * x).sum().backward()
        return y.grad, x.grad, y.requires_grad, y.is_leaf
    return f
""", _calls(3, grad=True), recompiles=0)


def test_deepcopy_module_in_forward():
    """A frozen copy of a submodule made inside forward (a target network, an EMA start)."""
    run_program(_PRE + """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    def forward(self, x):
        target = copy.deepcopy(self.net)
        with torch.no_grad():
            for p in target.parameters():
                p.mul_(0.5)
        return self.net(x) - target(x)
def make():
    return M()
""", _calls(3, 4), recompiles=0)


def test_deepcopy_of_views_sharing_storage():
    """deepcopy([t, t[:2]]): eager's copies share one storage (the view's copy is a view
    of the first's copy), which a later in-place write shows; the copies are made by the
    traced copy.deepcopy there, not as separate clones (capture may give up)."""
    run_program("""
import copy
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("b", torch.arange(4.0))
    def forward(self, x):
        a, v = copy.deepcopy([self.b, self.b[:2]])
        v.add_(x[:2])
        return a * 2
def make():
    return M()
""", _calls(4), allow_eager=True)
