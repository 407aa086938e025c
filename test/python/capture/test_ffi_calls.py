"""ctypes reached while recording.  On CUDA, transformers' MoE experts ask
`torch.cuda.get_device_capability()`, whose device count may load NVML through
`ctypes.CDLL("libnvidia-ml.so.1")`; ctypes' code was traced (standard library), and CDLL's
__init__ defines a class whose body closes over the library object (`class _FuncPtr(...)`),
which no replay can rebuild: capture gave up on the whole forward ("__build_class__ at
ctypes/__init__.py").  ctypes is untraced now, as torch's own code is (library code reaching
it runs as it is), and a ctypes callable called from traced code is an uncapturable call
replayed between graphs, its results opaque values (a library's functions) or guarded data.
On the CPU, `torch.ops.load_library` reaches the same `ctypes.CDLL(path)` from untraced torch
code."""
import array
import ctypes
import os

import torch

from harness import run_program

X = [torch.randn(4, 8) for _ in range(4)]
X3 = [torch.randn(2, 3) for _ in range(4)]
LIB = os.path.join(os.path.dirname(torch.__file__), "lib", "libc10.so")   # loaded already: dlopen is a no-op


def test_library_code_that_loads_a_shared_library_through_ctypes():
    """Untraced torch code (torch.ops.load_library) constructs a ctypes.CDLL inside forward:
    one graph, no break, no give-up."""
    c = run_program(f"""
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        torch.ops.load_library({LIB!r})
        return torch.relu(h) + 1
def make():
    return M()
""", [(x,) for x in X], graphs=1, breaks=0)
    assert c.stats.replays == len(X) - 1


def test_ctypes_class_body_is_never_traced():
    """A function that defines a class closing over a local (as CDLL.__init__ does) is what
    made the recording give up; ctypes' own code is not traced at all now."""
    from mlircap.capture.classify import _classify
    assert _classify(ctypes.CDLL.__init__.__code__) == "opaque"
    assert _classify(ctypes.CDLL.__getattr__.__code__) == "opaque"


def test_user_code_calling_a_foreign_function():
    """forward calls a C function through ctypes itself, its argument from a global the
    program changes: the calls are one graph break, replayed with the replay's values; the
    int it returns is guarded where it decides the graph."""
    c = run_program("""
import array
import ctypes
N = 3
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
    def forward(self, x):
        h = self.fc(x)
        n = ctypes.CDLL(None).abs(-N)
        return torch.relu(h) * n
def make():
    return M()
def mutate(i, m):
    global N
    if i == 2:
        N = 5
""", [(x,) for x in X])
    assert all(not v.eager for v in c.variants) and c.stats.replays >= 1


def test_ctypes_data_value_read_back():
    """A C data value made in forward and read back (`c_int(k).value`): the value is read
    again at replay and guarded by value, so a changed attribute is not taken from the
    recording."""
    run_program("""
import array
import ctypes
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.k = 2
    def forward(self, x):
        v = ctypes.c_int(self.k).value
        y = self.fc(x)
        return y * 2 if v > 2 else y - 1
def make():
    return M()
def mutate(i, m):
    if i == 2:
        m.k = 7
""", [(x,) for x in X])


def test_c_buffers_are_guarded_by_contents():
    """array.array, bytearray and ctypes arrays / numbers held in globals and changed in place
    between calls: C code reads their items (subscripts, len, `.value`) out of the tracer's
    sight.  They were not guarded: a changed item kept the branch recorded for the old one
    (silent wrong results).  Guarded byte for byte now; a write into one runs the call
    eagerly (it was not replayed)."""
    run_program("""
import array, ctypes
GA = array.array("d", [1.0, 2.0])
GB = bytearray(b"ab")
GC = (ctypes.c_float * 2)(1.0, 2.0)
CV = ctypes.c_double(2.0)
def make():
    lin = nn.Linear(3, 3)
    def f(x):
        y = lin(x)
        if GC[0] > 1:
            y = y + 1
        if GA[0] > 1:
            y = y * 2
        return y * CV.value + len(GC) + len(GA) + GB[1]
    return f
def mutate(i, f):
    if i in (2, 5):
        GA[0] = 5.0 - GA[0]
    if i in (3, 6):
        GC[0] = 5.0 - GC[0]
    if i == 4:
        GA.append(1.0)
    if i == 7:
        GB[1] = 7
        CV.value = 3.0
""", [(x,) for x in X3 * 3])


def test_writes_into_c_buffers_run_eagerly():
    c = run_program("""
import array, ctypes
def make():
    lin = nn.Linear(3, 3)
    def f(x, arr, cv):
        arr[1] = 7.0
        cv.value = 3
        return lin(x) * arr[0]
    return f
""", [(x, array.array("d", [1.0, 2.0]), ctypes.c_int(1)) for x in X3], allow_eager=True)
    assert all(v.eager for v in c.variants)
