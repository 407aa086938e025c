"""An uncapturable call handed an object the function wrote before the call (`cfg["a"] = s;
json.dumps(cfg)`, `m["loss"] = v; print(m)`): a replay applies the function's writes at its
end, so its call read the values from before them (a wrong printout; a wrong result where the
function returns what the call built). The function runs eagerly instead (external_calls.
_written_before); a call handed other values stays a replayed step."""
import contextlib
import io
import json
import logging
import warnings

import torch

import mlircap


def _calls(make, values=(1.0, 2.0, 3.0, 3.0, 4.0, 3.0)):
    outs = []
    for compiled in (False, True):
        state, f = make()
        g = mlircap.compile(f) if compiled else f
        got, buf = [], io.StringIO()
        with warnings.catch_warnings(), contextlib.redirect_stdout(buf):
            warnings.simplefilter("ignore")
            for s in values:
                state["a"] = 0.0   # (the program resets it between calls)
                r = g(torch.ones(2), s)
                got.append((r[1] if isinstance(r, tuple) else None, dict(state)))
        outs.append((got, buf.getvalue()))
    return outs, g


def test_json_of_a_dict_written_before_the_call():
    def make():
        cfg = {"a": 0.0}

        def f(x, s):
            cfg["a"] = s
            return x + 1, json.dumps(cfg)
        return cfg, f
    (want, got), _ = _calls(make)
    assert want == got


def test_print_of_a_dict_written_before_the_call():
    def make():
        m = {"a": 0.0}

        def f(x, s):
            m["a"] = s
            print(m)
            return x * 2
        return m, f
    (want, got), _ = _calls(make)
    assert want == got


def test_logger_handed_an_object_whose_attribute_was_written():
    records = []

    class H(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())
    log = logging.getLogger("mlircap.test.writes_before")
    log.addHandler(H())
    log.setLevel(logging.INFO)
    log.propagate = False

    class Stats:
        def __init__(self):
            self.a = 0.0

        def __repr__(self):
            return f"Stats(a={self.a})"

    seen = []
    for compiled in (False, True):
        st = Stats()

        def f(x, s):
            st.a = s
            log.info("%r", st)
            return x + s
        g = mlircap.compile(f) if compiled else f
        records.clear()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            for s in (1.0, 2.0, 2.0, 3.0, 2.0):
                st.a = 0.0
                g(torch.ones(2), s)
        seen.append(list(records))
    assert seen[0] == seen[1]


def test_a_call_handed_other_values_stays_replayed():
    lines = io.StringIO()

    def make():
        m = {"a": 0.0}

        def f(x, s):
            m["a"] = s
            print("step", file=lines)
            return x * 2
        return m, f
    (want, got), g = _calls(make)
    assert want == got
    assert not g.explain().eager_reasons
