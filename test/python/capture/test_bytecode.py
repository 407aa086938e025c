"""Validate the opcode tracer's value-stack access on the running CPython (3.11 or 3.12):
at every LOAD_ATTR / STORE_ATTR / CALL the statically located stack values must be the
real operands.  Torch-free, so it can also be run directly: `python test_bytecode.py`."""
import collections
import dataclasses
import importlib.util
import json
import os
import sys
import textwrap


def _standalone(name):
    """mlircap/capture/<name>.py (torch-free, no package imports) of the mlircap that
    `import mlircap` would find, loaded without importing mlircap (which imports torch)."""
    pkg = importlib.util.find_spec("mlircap")
    assert pkg is not None, "mlircap is not importable: run ./scripts/setup (or pytest from the repo root)"
    path = os.path.join(pkg.submodule_search_locations[0], "capture", name + ".py")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_bytecode = _standalone("_bytecode")
_ext = _standalone("_ext")


class Obj:
    def __init__(self):
        self.a = 1
        self.child = None

    def meth(self, x, *, k=2):
        return x + self.a + k


@dataclasses.dataclass
class DC:
    x: int
    y: list


def workload():
    o = Obj()
    o.child = Obj()
    total = 0
    for i in range(3):
        total += o.meth(i, k=i) + o.child.a
        o.child.a = i
    try:
        {}["missing"]
    except KeyError as e:
        total += len(str(e))
    finally:
        total += 1
    with open(__file__) as f:
        total += len(f.readline())
    d = DC(1, [1, 2])
    d.y.append(sum(x * x for x in d.y))
    g = (Obj().meth(j) for j in range(2))
    total += sum(g) + len(json.dumps({"a": [1, 2, {"b": None}]}))
    total += len(textwrap.dedent("  a\n  b"))
    c = collections.Counter("abca")
    total += c.most_common(1)[0][1]
    f2 = lambda *a, **k: (a, k)  # noqa: E731
    total += len(f2(*[1, 2], **{"z": 3})[0])
    return total


def check():
    E = _ext.load()
    assert E is not None, _ext.error()
    problems, counts = [], collections.Counter()
    here = os.path.dirname(os.path.abspath(__file__))

    def local(frame, event, arg):
        if event != "opcode":
            return local
        ins = _bytecode._instrs(frame.f_code).get(frame.f_lasti)
        if ins is None:
            return local
        name, oparg, argval, depth = ins
        if depth < 0:
            depth = E.stack_depth(frame)
        elif not _bytecode.PY312:
            if depth != E.stack_depth(frame):
                problems.append(("depth", frame.f_code.co_name, frame.f_lasti, name, depth, E.stack_depth(frame)))
        try:
            if name in ("LOAD_ATTR", "LOAD_METHOD"):
                owner = E.peek_at(frame, depth, 0)
                counts[name] += 1
                if not hasattr(owner, argval):
                    problems.append(("owner", frame.f_code.co_name, name, argval, type(owner).__name__))
            elif name == "STORE_ATTR":
                counts[name] += 1
                owner = E.peek_at(frame, depth, 0)
                if not hasattr(owner, "__dict__") and not hasattr(type(owner), argval):
                    problems.append(("store", frame.f_code.co_name, argval, type(owner).__name__))
            elif name == "CALL":
                counts[name] += 1
                meth = E.peek_at(frame, depth, oparg + 1)
                fn = meth if meth is not E.NULL else E.peek_at(frame, depth, oparg)
                if not callable(fn):
                    problems.append(("call", frame.f_code.co_name, frame.f_lasti, type(fn).__name__))
        except IndexError as e:
            problems.append(("index", frame.f_code.co_name, name, str(e)))
        return local

    def glob(frame, event, arg):
        fn = frame.f_code.co_filename
        if fn.startswith(here) or "json" in fn or "textwrap" in fn or "collections" in fn or fn == "<string>":
            frame.f_trace_lines = False
            frame.f_trace_opcodes = True
            return local
        return None

    sys._getframe().f_trace_opcodes = True  # 3.12.0/1 need this before settrace()
    sys.settrace(glob)
    try:
        expect = None
        got = workload()
    finally:
        sys.settrace(None)
    expect = workload()
    assert got == expect
    return problems, counts


def test_stack_access_matches_operands():
    problems, counts = check()
    assert not problems, problems[:10]
    assert counts["LOAD_ATTR"] + counts["LOAD_METHOD"] > 20 and counts["CALL"] > 20 and counts["STORE_ATTR"] >= 3


if __name__ == "__main__":
    p, c = check()
    print(sys.version.split()[0], dict(c), "problems:", p[:10])
    sys.exit(1 if p else 0)
