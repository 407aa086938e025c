"""Shared harness: every program is exec'd twice (eager copy, captured copy) so the two
runs have fully independent program state (globals, modules, objects)."""
import copy
import enum
import functools
import math
import textwrap

import torch

from mlircap.capture import capture

EAGER = lambda gm, ex: gm.forward  # noqa: E731


def same(a, b, path="out"):
    ta, tb = type(a), type(b)
    assert ta is tb or (ta.__qualname__ == tb.__qualname__ and {ta.__module__, tb.__module__} == {"prog_e", "prog_c"}), \
        f"{path}: type {ta} != {tb}"
    if isinstance(a, enum.Enum):   # (each copy of the program has its own enum classes)
        assert a.name == b.name and a.value == b.value, f"{path}: {a!r} != {b!r}"
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and a.shape == b.shape and a.device == b.device, f"{path}: meta"
        assert a.requires_grad == b.requires_grad, f"{path}: requires_grad"
        assert torch.equal(torch.nan_to_num(a.detach()), torch.nan_to_num(b.detach())), f"{path}: values differ"
    elif type(a).__module__ == "numpy" and hasattr(a, "dtype"):   # arrays and NumPy scalars
        assert a.dtype == b.dtype and a.shape == b.shape, f"{path}: numpy meta {a.dtype}{a.shape} != {b.dtype}{b.shape}"
        import numpy as np
        assert np.array_equal(a, b, equal_nan=a.dtype.kind in "fc"), f"{path}: values differ"
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), f"{path}: len"
        for i, (x, y) in enumerate(zip(a, b)):
            same(x, y, f"{path}[{i}]")
    elif isinstance(a, dict):
        assert list(a.keys()) == list(b.keys()), f"{path}: keys {list(a)} != {list(b)}"
        for k in a:
            same(a[k], b[k], f"{path}[{k!r}]")
    elif isinstance(a, set):
        assert a == b, f"{path}"
    elif isinstance(a, float) and math.isnan(a):
        assert math.isnan(b)
    elif isinstance(a, functools.partial):
        assert a.func is b.func, path
        same(a.args, b.args, path + ".args")
        same(a.keywords, b.keywords, path + ".keywords")
    elif isinstance(a, torch.nn.Module):
        same(state_of(a), state_of(b), path + ".state")
    elif hasattr(a, "__dict__") and not callable(a):
        same(dict(vars(a)), dict(vars(b)), path + ".__dict__")
    else:
        assert a == b, f"{path}: {a!r} != {b!r}"


def state_of(obj):
    if isinstance(obj, torch.nn.Module):
        d = {}
        for name, m in obj.named_modules():
            d[name + ".training"] = m.training
            for k, v in vars(m).items():
                if not k.startswith("_") and k != "training" and isinstance(v, (int, float, str, bool, list, dict, tuple, type(None), torch.Tensor)):
                    d[name + "." + k] = v
        for k, v in obj.state_dict(keep_vars=True).items():
            d["sd." + k] = v
        return d
    return obj


def _globals_state(ns):
    out = {}
    for k, v in ns.items():
        if k.startswith("__") or k in ("make", "args", "mutate", "torch", "nn", "F"):
            continue
        if isinstance(v, (int, float, str, bool, list, dict, tuple, set, torch.Tensor, type(None))):
            out[k] = v
    return out


def clone_args(a):
    if isinstance(a, torch.Tensor):
        c = a.detach().clone()
        c.requires_grad_(a.requires_grad)
        return c
    if isinstance(a, (list, tuple)):
        return type(a)(clone_args(x) for x in a)
    if isinstance(a, dict):
        return {k: clone_args(v) for k, v in a.items()}
    return copy.deepcopy(a)


def run_program(src, calls, graphs=None, recompiles=None, breaks=None, name="prog", kwcalls=None,
                expect_warning=False, cache_limit=8, allow_eager=False):
    """calls: list of (args tuple) or (args, kwargs). Returns the capture object."""
    src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" + textwrap.dedent(src)
    code = compile(src, f"<prog {name}>", "exec")
    ns_e, ns_c = {"__name__": "prog_e"}, {"__name__": "prog_c"}
    torch.manual_seed(0)
    exec(code, ns_e)
    torch.manual_seed(0)
    exec(code, ns_c)
    torch.manual_seed(0)
    fe = ns_e["make"]()
    torch.manual_seed(0)
    fc_obj = ns_c["make"]()
    fc = capture(fc_obj, EAGER, cache_limit=cache_limit)
    import warnings
    with warnings.catch_warnings(record=True) as wl:
        warnings.simplefilter("always")
        for i, call in enumerate(calls):
            if isinstance(call, tuple) and len(call) == 2 and isinstance(call[1], dict) and isinstance(call[0], tuple):
                a, kw = call
            else:
                a, kw = call, {}
            if "mutate" in ns_e:
                # torch's default dtype is one for both copies: the captured copy's mutations
                # start from the one the eager copy's started from (a mutation that sets it,
                # then one that makes a tensor, would make a tensor of another dtype there)
                dt0 = torch.get_default_dtype()
                ns_e["mutate"](i, fe)
                dt_e = torch.get_default_dtype()
                torch.set_default_dtype(dt0)
                ns_c["mutate"](i, fc_obj)
                assert torch.get_default_dtype() == dt_e, "the copies' mutations set different default dtypes"
            ae, ke = clone_args(a), clone_args(kw)
            ac, kc = clone_args(a), clone_args(kw)
            torch.manual_seed(1000 + i)
            exc_e = exc_c = None
            try:
                re = fe(*ae, **ke)
            except Exception as e:  # user exceptions must propagate identically
                exc_e = e
            rng_e = torch.get_rng_state()
            torch.manual_seed(1000 + i)
            try:
                rc = fc(*ac, **kc)
            except Exception as e:
                exc_c = e
            assert torch.equal(rng_e, torch.get_rng_state()), f"call {i}: RNG state differs"

            if exc_e is not None or exc_c is not None:
                assert type(exc_e) is type(exc_c) and str(exc_e) == str(exc_c), f"call {i}: {exc_e!r} vs {exc_c!r}"
            else:
                same(re, rc, f"call {i} result")
            same(ae, ac, f"call {i} args")
            same(ke, kc, f"call {i} kwargs")
            if isinstance(fe, torch.nn.Module):
                same(state_of(fe), state_of(fc_obj), f"call {i} module state")
            same(_globals_state(ns_e), _globals_state(ns_c), f"call {i} globals")
            if "state" in ns_e:
                same(ns_e["state"](fe), ns_c["state"](fc_obj), f"call {i} state()")
    c = fc._mlircap_capture
    warns = [w for w in wl if "mlircap.capture" in str(w.message)]
    # capture giving up warns, naming the cause and the user's file:line (and explain() shows it)
    gave_up = [w for w in warns if "capture gave up on" in str(w.message)]
    for v in c.variants:
        if v.eager:
            assert v.reason and " at " in v.reason, f"an eager variant without a reason: {v.reason!r}"
    if allow_eager:
        warns = [w for w in warns if w not in gave_up]
    if expect_warning:
        assert len(warns) == 1, [str(w.message) for w in warns]
    else:
        assert not warns, [str(w.message) for w in warns]
    if graphs is not None:
        assert c.graph_count == graphs, f"graphs {c.graph_count} != {graphs}; eager: {[v.reason for v in c.variants if v.eager]}"
    if recompiles is not None:
        assert c.recompiles == recompiles, f"recompiles {c.recompiles} != {recompiles}: {c.stats.recompile_reasons}"
    if breaks is not None:
        nb = sum(len(v.breaks) for v in c.variants)
        assert nb == breaks, f"breaks {nb} != {breaks}: {[v.breaks for v in c.variants]}"
    # captured variants were really used (not silently eager)
    if not allow_eager:
        assert not any(v.eager for v in c.variants), [v.reason for v in c.variants if v.eager]
        assert c.stats.replays >= 1 or len(calls) == c.stats.records, "no replay happened"
    return c
