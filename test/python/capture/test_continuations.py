"""Continuations (resume_code.py) of closures: a replay whose guard after an uncapturable call
fails runs the rest of the frame through a continuation whose extra arguments (the value
stack) are variables placed before the function's free variables in the frame's locals, so
the free-variable instructions' indexes must move past them.  Before, LOAD_DEREF of a free
variable after the call read a stack argument instead (UnboundLocalError '__stack0', or a
crash of the interpreter for other layouts)."""
import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(5)]

_SINK = """
class Sink:
    def __init__(self):
        self.n = 0
    def write(self, s):
        self.n += 1
SINK = Sink()
VALS = [1, 2, 3, 4, 5, 6]
"""


def test_closure_reads_its_free_variable_after_a_failed_guard():
    """`box` is a free variable of f, read after print() to a user object (which may write
    any state): the int read there differs on every call, so each replay's guard fails and
    the continuation runs."""
    run_program(_SINK + """
def make():
    box = [0]
    def f(x):
        print("step", file=SINK)
        k = VALS[box[0]]
        box[0] += 1
        return x * 2, k
    return f
""", [(x,) for x in X])


def test_closure_writes_a_nonlocal_after_a_failed_guard():
    """A nonlocal counter (STORE_DEREF of a free variable) written after the call, with a
    value on the stack at the break (the call is an argument of a tensor op)."""
    run_program(_SINK + """
def make():
    n = 0
    def f(x):
        nonlocal n
        y = x + float(print("s", file=SINK) is None)
        n += VALS[SINK.n % 6]
        return y * n
    return f
""", [(x,) for x in X])
