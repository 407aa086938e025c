"""Ints that change from call to call (an argument, a module or object attribute, a global, a
closure variable, an item of a global list: a step counter, a schedule) are guarded by value
on the first recording (a constant of the graph).  Once a recording has read two different
values at one source (flow_roots._varies, as Dynamo's automatic dynamic) the int is
followed like a float: a tensor operator taking it as a scalar (`x * n`) takes a 0-d int64
graph input, so new values do not recompile; a branch on it is guarded by the branch taken;
anywhere else (a shape, an index, a loop count, a call, the return value) it keeps its value
guard.  Every call is compared with eager (outputs, module state, globals), with values
changing back and forth."""
import torch

from harness import run_program

VALS = [3, 5, 7, 3, 9, 5, 11, 3]


def _x(i):
    torch.manual_seed(i)
    return torch.randn(3, 4)


def _calls(vals=VALS):
    return [(_x(i), v) for i, v in enumerate(vals)]


def test_int_argument_in_arithmetic_is_an_input_after_two_values():
    c = run_program("""
def make():
    def f(x, n):
        return x * n + x.sum() / n - (x.long() * n) + (x > 0) * n
    return f
""", _calls(), recompiles=1)
    assert c.stats.recompile_reasons == ["n == 3"]


def test_int_argument_rebound_or_needed_by_value_keeps_its_guard():
    distinct = len(set(VALS))
    for body, recompiles in (
            ("return x[:, :n % 4] * n", distinct - 1),               # a shape: guarded
            ("return x.view(-1)[n], x * n", distinct - 1),           # an index: guarded
            ("return torch.zeros(n), x * n", distinct - 1),          # a torch call's size: guarded
            ("return x.sum(dim=n % 2) * n", distinct - 1),           # a dim of a graph op: guarded
            ("return x * n, n", 1),                                  # returned: as its expression
            ("return [x * k for k in range(n)]", distinct - 1),      # a loop count
            ("n = 5\n        return x * n", 1),                      # rebound to the small int 5
            ("del n\n        n = 5\n        return x * n", 1),
            ("m = n\n        n = 3\n        return x * m + n", 1),   # copied first: the copy is an input
            ("return x * helper(n)", 1),                             # followed into a traced helper
            ("return helper2(x, n) * n", distinct - 1),              # ... which slices with it: guarded
            ("return x * (n if n > 4 else -n)", 1),                  # a branch: by the branch taken
    ):
        run_program(f"""
def helper(k):
    return k + 1
def helper2(x, k):
    return x[:, :k % 4]
def make():
    def f(x, n):
        {body}
    return f
""", _calls(), recompiles=recompiles)


def test_int_argument_recursive_frame_holding_the_same_int():
    """A frame of the same code called from the captured one, holding the very small int
    object the argument is (5, the second recording's): not the argument (its value comes from the outer frame's
    arithmetic or a constant)."""
    run_program("""
def make():
    def f(x, n, depth=0):
        if depth == 1:
            return x * n
        return f(x, 5, depth + 1) + x * n
    return f
""", _calls(), recompiles=1)


def test_int_module_attribute_set_between_calls():
    c = run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.k = 1
    def forward(self, x):
        y = self.fc(x) * self.k
        if self.k > 4:
            y = y.relu()
        return y - self.k
def make():
    return M()
VALS = {VALS!r}
def mutate(i, m):
    m.k = VALS[i]
""", [(_x(i),) for i in range(len(VALS))], recompiles=1)
    assert c.stats.recompile_reasons == ["self.k == 3"]


def test_int_module_attribute_as_a_shape_keeps_its_guard():
    run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.k = 1
    def forward(self, x):
        return x[:, :self.k] * self.k
def make():
    return M()
VALS = {[1, 2, 3, 1, 2, 3]!r}
def mutate(i, m):
    m.k = VALS[i]
""", [(_x(i),) for i in range(6)], recompiles=2)


def test_int_global_and_global_list_counter():
    """`STEP` rebound and `N[0] = N[0] + 1` by the training loop, read by the function."""
    run_program(f"""
STEP = 0
VALS = {VALS!r}
def make():
    def f(x):
        return x * STEP - 1
    return f
def mutate(i, m):
    global STEP
    STEP = VALS[i]
""", [(_x(i),) for i in range(len(VALS))], recompiles=1)
    run_program("""
N = [0, 7]
def make():
    def f(x):
        return x + N[0] * 2, x * N[1]
    return f
def mutate(i, m):
    N[0] = N[0] + 1
""", [(_x(i),) for i in range(6)], recompiles=1)


def test_int_closure_variable():
    run_program(f"""
VALS = {VALS!r}
def make():
    box = [0]
    n = 0
    def f(x):
        return x * n
    def set_n(v):
        nonlocal n
        n = v
    f.set_n = set_n
    return f
def mutate(i, f):
    f.set_n(VALS[i])
""", [(_x(i),) for i in range(len(VALS))], recompiles=1)


def test_int_source_written_by_the_function_keeps_its_value():
    """The function writes the global list item it reads: the write is replayed, the new
    value read back is this call's (guarded where it is read)."""
    run_program("""
N = [0]
def make():
    def f(x):
        y = x * N[0]
        N[0] = N[0] + 1
        return y
    return f
""", [(_x(i),) for i in range(5)])


def test_list_item_counter_written_by_the_function():
    """`N[0] = N[0] + 1` / `N[0] += 1` in the function (a step counter in a global list): from
    the second value on the write is replayed as that expression of the item at the call
    (flow_writes._flow_store_item) and the item read back is followed: one recompile over the
    calls.  A float item decayed in place (`W[0] = W[0] * 0.9`) is followed from the start."""
    for body, recompiles in (
            ("y = x * N[0]\n        N[0] = N[0] + 1\n        return y", 1),
            ("N[0] += 1\n        return x * N[0]", 1),
            ("N[-1] += 1\n        return x * N[-1]", 5),                # (a negative index: guarded)
            ("W[0] = W[0] * 0.9\n        return x * W[0]", 0),
            # the item rebound to a constant (the small int object the sum may be): the constant
            # (N[0] is 3 at every later call: one recompile)
            ("N[0] = N[0] + 1\n        N[0] = 3\n        return x * N[0]", 1),
            # stored twice in one call: the second store, over the call's own followed store, replaces
            # it (3351909: a counter stored again in a loop), so followed as well
            ("N[0] = N[0] + 1\n        N[0] = N[0] - 1 + 1\n        return x * N[0]", 1),
            ("N[0] += 1\n        return x * sum(N)", 5),                 # the list read otherwise
            ("N[0] += 1\n        N.append(0)\n        return x * N[0]", 5),  # the list written otherwise
            ("N[0] += 1\n        print(N[0], file=SINK)\n        return x * N[0]", 5),   # an uncapturable call
    ):
        run_program(f"""
import io
SINK = io.StringIO()
N = [0]
W = [1.0]
def make():
    def f(x):
        {body}
    return f
""", [(_x(i),) for i in range(6)], recompiles=recompiles, cache_limit=20)


def test_negative_index_counter_follows_the_list_as_it_grows():
    """`N[-1] += 1` on a global list that grows and is rebound between calls: each call's item -1,
    as eager (results and the list after every call)."""
    import torch

    import mlircap

    n = [0]

    def f(x):
        n[-1] += 1
        return x * n[-1]

    def run(fn):
        n[:] = [0]
        got = []
        for i in range(8):
            if i in (3, 5):
                n.append(100 * i)
            if i == 6:
                n[-1] = -7
            got.append((fn(torch.ones(2)).tolist(), list(n)))
        return got

    want = run(f)
    assert run(mlircap.compile(f)) == want
