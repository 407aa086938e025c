"""Modules the function makes (module_factories.py): `self.head = nn.Linear(h.shape[-1], 3)`
on the first call, `nn.Softmax(dim=-1)(x)` made and called in place, a user module class
with submodules made in forward.  The constructor is a replayed call (run before the open
graph where that graph has not drawn from torch's RNG), so a replay makes its own module,
with its own initial weights drawn from torch's RNG as eager draws them.  Before, the first
call of a lazily created head ran eagerly (capture gave up: tensors of unknown origin).
Every call is compared with eager: outputs, module state, torch's RNG state."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(6)]


LAZY = """
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
    def forward(self, x):
        h = self.body(x)
        if not hasattr(self, "head"):
            self.head = nn.Linear(h.shape[-1], 3)
        return self.head(h)
def make():
    return M()
"""


def test_lazy_head_first_call_is_one_graph():
    c = run_program(LAZY, [(x,) for x in X], breaks=0)
    first = c.variants[0]
    assert not first.eager and len(first.graphs) == 1 and not first.breaks
    assert len(c.variants) == 2


def test_lazy_head_deleted_between_calls_is_made_again_by_the_replay():
    """The program deletes the head after calls 1 and 3: the first variant replays, its
    constructor draws the new head's weights from torch's RNG as eager does."""
    c = run_program(LAZY + """
def mutate(i, m):
    if i in (2, 4) and hasattr(m, "head"):
        del m.head
""", [(x,) for x in X], breaks=0)
    assert c.variants[0].hits >= 1


def test_head_made_when_none_with_a_dropout_before():
    """`if self.head is None` in training with a dropout before the head: the graph drew
    from torch's RNG, so the constructor is not hoisted (a break), still right.  (A
    Sequential of made modules with a parameterless one among them there runs eagerly: the
    ReLU is traced as a plain object, which a replayed constructor cannot take.)"""
    run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.5)
        self.head = None
    def forward(self, x):
        h = self.drop(self.body(x))
        if self.head is None:
            self.head = nn.Linear(h.shape[-1], 2)
        return self.head(h)
def make():
    return M().train()
def mutate(i, m):
    if i == 3:
        m.head = None
""", [(x,) for x in X])


def test_module_made_and_called_in_place():
    """`nn.Softmax(dim=-1)(s)` and `nn.Dropout(p=0.0)(x)` made on every call: one graph."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        s = self.fc(x) @ x.t()
        return nn.Softmax(dim=-1)(s) @ nn.Dropout(p=0.0)(x)
def make():
    return M()
""", [(x,) for x in X], breaks=0, recompiles=0)
    assert len(c.variants[0].graphs) == 1


def test_user_module_class_with_state_made_in_forward():
    """A user module class whose constructor makes submodules and a buffer, stored into a
    dict attribute keyed by the feature size, mutated after it is made (its buffer filled
    in place by the call)."""
    run_program("""
class Adapter(nn.Module):
    def __init__(self, d, r=2):
        super().__init__()
        self.down = nn.Linear(d, r, bias=False)
        self.up = nn.Linear(r, d, bias=False)
        self.register_buffer("calls", torch.zeros(()))
        self.scale = 0.5
    def forward(self, x):
        self.calls.add_(1)
        return x + self.up(self.down(x)) * self.scale
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.adapters = nn.ModuleDict()
    def forward(self, x):
        h = self.fc(x)
        key = str(h.shape[-1])
        if key not in self.adapters:
            self.adapters[key] = Adapter(h.shape[-1])
        return self.adapters[key](h)
def make():
    return M()
def mutate(i, m):
    if i == 3:
        m.adapters = nn.ModuleDict()
""", [(x,) for x in X])


def test_ema_teacher_deepcopied_on_the_first_call():
    """`self.teacher = copy.deepcopy(self.student)` when None (BYOL / DINO / mean teacher),
    its parameters frozen and moved towards the student's every call: the copy is a
    replayed call where it stands, the teacher read through its result (before, the first
    call ran eagerly: a module created during the call).  The program resets the teacher
    after call 3: a replay copies the student as it is then."""
    c = run_program("""
import copy
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 4))
        self.teacher = None
        self.m = 0.9
    def forward(self, x):
        if self.teacher is None:
            self.teacher = copy.deepcopy(self.student)
            for p in self.teacher.parameters():
                p.requires_grad_(False)
        with torch.no_grad():
            for pt, ps in zip(self.teacher.parameters(), self.student.parameters()):
                pt.mul_(self.m).add_(ps.detach(), alpha=1 - self.m)
            t = self.teacher(x)
        return ((self.student(x) - t) ** 2).mean()
def make():
    return M()
def mutate(i, m):
    if i == 3:
        del m.teacher      # (as __init__ left it: None in the instance dict, not in _modules)
        m.teacher = None
""", [(x,) for x in X])
    first = c.variants[0]
    assert not first.eager and len(first.graphs) == 1 and first.hits >= 1


def test_deepcopied_module_attribute_missing_then_present():
    """`hasattr(teacher, "temp")` of a deep copy made in the call: the copy has what the
    student has at the replay; the program gives the student the attribute after call 2
    and resets the teacher, so the replay's copy has it (guarded missing: a new variant)."""
    run_program("""
import copy
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.student = nn.Linear(8, 8)
        self.teacher = None
    def forward(self, x):
        if self.teacher is None:
            self.teacher = copy.deepcopy(self.student)
        t = self.teacher(x)
        if hasattr(self.teacher, "temp"):
            t = t / self.teacher.temp
        return t + self.student(x)
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.student.temp = 4.0
        del m.teacher
        m.teacher = None
""", [(x,) for x in X])


def test_tensorless_module_made_after_a_dropout_does_not_split():
    """`nn.ReLU()(h)` after a dropout in training (transformers' DistilBERT classification
    head): a module with no parameters or buffers (_makes_tensors: made once on the meta
    device) is traced as a plain object of the call, not a replayed constructor, which could
    not run before a graph that drew from torch's RNG (a split)."""
    c = run_program("""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.pre = nn.Linear(8, 8)
        self.drop = nn.Dropout(0.3)
        self.cls = nn.Linear(8, 3)
    def forward(self, x):
        h = self.drop(self.pre(x))
        h = nn.ReLU()(h)
        return self.cls(nn.Dropout(0.1)(h))
def make():
    return M().train()
""", [(x,) for x in X], breaks=0, recompiles=0)
    assert len(c.variants[0].graphs) == 1
