"""Exceptions used for control flow inside the captured function: a custom exception class
whose __init__ calls `super().__init__(...)`, raised by a layer loop to exit early with the
hidden state and caught by the caller (bench/capture6.py c6_exception_early_exit_and_
keyerror_default).  BaseException.__init__ was an uncapturable call whose receiver (a
method-wrapper) the replay cannot make, so capture gave up on the whole function (Dynamo
gives up there too).  It only sets the new exception's args: it runs during the recording as
Python code does.  Each program is compared with eager over calls that change the exit depth,
raise out of the function, or keep the exception object."""
import torch

from harness import run_program

EARLY_EXIT = """
class EarlyExit(Exception):
    def __init__(self, value, depth):
        super().__init__(f"exit at {depth}")
        self.value, self.depth = value, depth
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(6, 6) for _ in range(4))
        self.exit_at = 2
    def run(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.relu(layer(x))
            if i + 1 == self.exit_at:
                raise EarlyExit(x, i + 1)
        return x
    def forward(self, x):
        try:
            h, depth = self.run(x), len(self.layers)
        except EarlyExit as e:
            h, depth = e.value, e.depth
            RESULT
        return h * 2, depth
def make():
    return Net()
"""


def _calls(n=4):
    return [(torch.randn(3, 6),) for _ in range(n)]


def test_custom_exception_early_exit_is_one_graph():
    run_program(EARLY_EXIT.replace("RESULT", "pass"), _calls(), graphs=1, breaks=0, recompiles=0)


def test_exit_depth_changed_between_calls():
    src = EARLY_EXIT.replace("RESULT", "pass") + """
def mutate(i, m):
    m.exit_at = [2, 3, 9, 2, 1][i]
"""
    run_program(src, _calls(5), name="depths")


def test_exception_message_and_args_read_after_the_catch():
    src = EARLY_EXIT.replace("RESULT", "h = h + len(str(e)) + len(e.args)")
    run_program(src, _calls(), name="msg", recompiles=0)


def test_exception_escaping_the_call_or_kept():
    # raised out of the function (as a builtin exception: each program copy has its own
    # EarlyExit class): each call raises as eager does
    src = EARLY_EXIT.replace("RESULT", "raise ValueError(str(e)) from e")
    run_program(src, _calls(3), name="reraise", allow_eager=True)
    # kept on the module: the call leaves a new exception object in external state
    src = EARLY_EXIT.replace("RESULT", "self.last = e")
    run_program(src, _calls(3), name="kept", allow_eager=True)
