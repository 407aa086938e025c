"""OpInfo sweep: mlircap against eager on every sample of torch's OpInfo database.

Every OpInfo in ``torch.testing._internal.common_methods_invocations.op_db`` x its sample
inputs (``op.sample_inputs(device, dtype, requires_grad=False)``), in float32 and in the
bfloat16, bool and integer dtypes the op supports, becomes a function of the sample's tensors
(non-tensor arguments stay constants; TensorList inputs become one argument per tensor):

    fn = lambda *tensors: op(sample.input, *sample.args, **sample.kwargs)

compiled with ``mlircap.compile(fn)`` (default options) and called twice on fresh copies of the
inputs (same strides, storage offset and surrounding storage): the first call records (runs
eagerly), the second runs the compiled code. Both calls'
outputs, and the inputs they mutated in place, are compared with eager at the dtype's default
``torch.testing.assert_close`` tolerances (widened by the op's own ``toleranceOverride``s), with
equal_nan=True and exact dtype and shape. Each sample is one of

    ok           compiled and correct: the second call ran mlircap code for the whole sample
                 (at least one graph, each with fallback_reason None and an executable that
                 is not its FX graph, no eager island, no recompile). The one kind of island
                 allowed is a designed library call ("library": CPU log_softmax, convolutions
                 the launch plans do not take, fused attention, FFTs), the same call through
                 torch that a plan's matmul/conv library step makes, and only next to compiled
                 parts: a graph that only runs library calls runs eagerly (a fallback). Such
                 samples are reported as ok with detail "library calls: ..." and counted
                 separately in the report (ok_library). A captured graph with no op (the
                 result is an input or a constant: x.real of a real x), or no graph at all
                 with no graph break (broadcast_shapes: a torch.Size of shapes), runs
                 nothing, eagerly or compiled: ok when its variant replays, detail "nothing
                 to compute", counted separately (ok_empty)
    fallback     correct, but (part of) it ran eagerly; the reason's first line is recorded
                 ("partial:" when some graphs compiled and some ops ran as eager islands;
                 a crash of mlircap's compile worker is contained by mlircap: a fallback,
                 listed separately in the report)
    wrong        a result or an in-place mutated input differs from eager
    error        compiled raised where eager did not (or eager raised and compiled did not /
                 raised another exception type)
    crash        the worker process died (a signal: segfault, LLVM abort, ...)
    timeout      the sample ran past --timeout seconds
    eager-error  eager raised and compiled raised the same exception type (excluded)

Every sample runs in a worker process (a small pool of persistent workers, restarted when one
dies or times out), so a crash is recorded, not fatal. Compiled-and-correct % is over the
samples that eager runs (everything but eager-error).

    .venv/bin/python bench/opinfo.py --jobs 2 --max-samples-per-op 8 --json /tmp/opinfo.json
    .venv/bin/python bench/opinfo.py --ops add,nn.functional.gelu --dtypes float32,int64
    .venv/bin/python bench/opinfo.py --sample 300 --seed 0        # deterministic random subset
    .venv/bin/python bench/opinfo.py --report /tmp/opinfo.json --markdown   # re-print a run
    python bench/opinfo.py --device cuda                            # GPU host
    .venv/bin/python bench/opinfo.py --device simt --sample 300     # the GPU path without a GPU

``--device simt`` compiles each sample for CUDA (opmath's GPU rewrites, the core's GPU codegen
and launch plan, PTX included) and runs the plan on the CPU tensors of the sample: library
steps through the runtime's own calls, kernels in the SIMT interpreter of test/python/simt.py
(their gpu.func form before NVVM; math functions are torch's, not libdevice's). It compares
with eager on the CPU at the CUDA tolerances: it finds codegen failures and wrong kernels
(indexing, reductions, masks, rounding steps), not differences between CUDA's and the CPU's
eager kernels. The rules that choose by device (the partition's islands and library calls,
bounds checks, device-specific decompositions) follow the compile's target, CUDA
(python/mlircap/target.py), so it falls back where a GPU run does; what eager computes is still
the CPU's (an island runs the CPU kernel). To compare with a GPU run sample by sample:

    .venv/bin/python bench/opinfo.py --device simt --like gpu.json --json simt.json
    .venv/bin/python bench/opinfo.py --diff gpu.json simt.json

torch's OpInfo database needs the ``expecttest`` package. Workers run with
MLIRCAP_CACHE_DIR in a temporary directory, one torch thread, and MLIRCAP_LOGS=fallback (its
lines name the eager islands).

``--inputs reference`` sweeps the op's ``reference_inputs`` instead: its samples plus, for
elementwise ops, extremal values (inf, -inf, nan), large and small numbers, noncontiguous and
broadcast operands, which ``sample_inputs`` leaves out.

Ops are named ``op.name`` or ``op.name.variant_test_name`` (``--list-ops`` prints them).
``--max-samples-per-op N`` keeps the first N samples of each (op, dtype). Sample inputs are
generated with torch/numpy/random seeded to 0 for each (op, dtype), so (op, dtype, index)
names the same sample in every run; each call is preceded by ``torch.manual_seed(1234)``.
Samples whose eager output differs between two seeded eager runs, and the ops whose output
is uninitialized memory (``empty*``, ``resize_``), are compared on shape and dtype only.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import io
import json
import math
import os
import random
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DTYPES = ("float32", "bfloat16", "bool", "uint8", "int8", "int16", "int32", "int64")
CATEGORIES = ("ok", "fallback", "wrong", "error", "crash", "timeout", "eager-error")
GEN_SEED = 0        # sample generation: torch/numpy/random seeded per (op, dtype)
INPUTS_ENV = "MLIRCAP_OPINFO_INPUTS"   # "reference": --inputs reference, read by the workers
CALL_SEED = 1234    # torch.manual_seed before every eager and compiled call
# Outputs (or parts) are uninitialized memory: compared on shape and dtype only.
UNINITIALIZED = ("empty", "empty_like", "empty_strided", "empty_permuted", "new_empty",
                 "new_empty_strided", "resize_", "resize_as_")
# Outputs (by position) compared on shape and dtype only: the fused attention kernels'
# philox seed/offset. With dropout_p == 0 nothing writes them (on the H200 three eager calls
# under one seed returned three different values of _flash_attention_forward's out[2] and
# out[3]); with dropout they are the generator state the call drew, which compiled code draws
# from the generator in its own order.
UNINITIALIZED_OUTPUTS = {"torch.ops.aten._flash_attention_forward": (2, 3),
                         "torch.ops.aten._efficient_attention_forward": (2, 3)}


# --------------------------------------------------------------------------- shared helpers

def op_key(op) -> str:
    return op.name + ("." + op.variant_test_name if op.variant_test_name else "")


def load_op_db():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from torch.testing._internal.common_methods_invocations import op_db
    return {op_key(op): op for op in op_db}


def data_device(device: str) -> str:
    """Where the samples' tensors live (`simt`: on the CPU)."""
    return "cpu" if device == "simt" else device


def kernel_device(device: str) -> str:
    """The device the samples are compiled for (`simt`: CUDA's codegen, interpreted)."""
    return "cuda" if device == "simt" else device


def supported(op, device: str, dtypes) -> list[str]:
    import torch

    sd = op.supported_dtypes(kernel_device(device))
    return [d for d in dtypes if getattr(torch, d) in sd]


def generate_samples(op, device: str, dtype: str, limit: int | None = None) -> list:
    """The sample list of (op, dtype), reproducibly: the same seed before every generation.
    ``limit``: only the first samples (sample_inputs is a generator: the first N samples are
    the same whether or not later ones are generated)."""
    import itertools
    import warnings

    import numpy as np
    import torch

    torch.manual_seed(GEN_SEED)
    random.seed(GEN_SEED)
    np.random.seed(GEN_SEED)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gen = op.reference_inputs if os.environ.get(INPUTS_ENV) == "reference" else op.sample_inputs
        return list(itertools.islice(gen(device, getattr(torch, dtype), requires_grad=False), limit))


# --------------------------------------------------------------------------- worker side

class _Slot:
    __slots__ = ("i",)

    def __init__(self, i):
        self.i = i


def _template(x, tensors, memo):
    """Replace each tensor in a nested (list/tuple/dict) structure by a _Slot; the same tensor
    object twice becomes the same slot, so aliasing samples stay aliased."""
    import torch

    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            memo[id(x)] = len(tensors)
            tensors.append(x)
        return _Slot(memo[id(x)])
    if isinstance(x, tuple) and not hasattr(x, "_fields"):
        return tuple(_template(v, tensors, memo) for v in x)
    if isinstance(x, list):
        return [_template(v, tensors, memo) for v in x]
    if isinstance(x, dict):
        return {k: _template(v, tensors, memo) for k, v in x.items()}
    return x


def _fill(t, ts):
    if isinstance(t, _Slot):
        return ts[t.i]
    if isinstance(t, tuple):
        return tuple(_fill(v, ts) for v in t)
    if isinstance(t, list):
        return [_fill(v, ts) for v in t]
    if isinstance(t, dict):
        return {k: _fill(v, ts) for k, v in t.items()}
    return t


def make_fn(op, sample):
    """(fn, tensors): fn(*tensors) == op(sample.input, *sample.args, **sample.kwargs)."""
    tensors = []
    memo = {}
    tmpl = _template((sample.input, tuple(sample.args), dict(sample.kwargs)), tensors, memo)
    f = op.op

    def fn(*ts):
        inp, args, kwargs = _fill(tmpl, ts)
        return f(inp, *args, **kwargs)

    return fn, tensors


def _clone(ts):
    """Fresh copies of the sample's tensors with their exact layout: strides, storage offset
    and the storage around them (views of a larger tensor, expanded inputs, two inputs viewing
    one storage stay so); other tensors (sparse, ...) are cloned."""
    import torch

    storages = {}
    shared = collections.Counter(_storage_key(t) for t in ts)
    out = []
    with torch.no_grad():
        for t in ts:
            out.append(_clone_one(t, storages, shared[_storage_key(t)] > 1))
    return out


def _storage_key(t):
    import torch

    if type(t) is not torch.Tensor or t.layout != torch.strided or t.is_quantized or t.is_nested:
        return None
    try:
        st = t.untyped_storage()
    except (RuntimeError, NotImplementedError):
        return None
    return (st.data_ptr(), st.nbytes(), t.dtype) if st.data_ptr() else None


def _clone_one(t, storages, shared: bool):
    import torch

    key = _storage_key(t)
    if key is None:
        return t.clone()
    st = t.untyped_storage()
    isz = t.element_size()
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.stride())) if t.numel() else 0
    plain = t.storage_offset() == 0 and st.nbytes() == t.numel() * isz and span == t.numel()
    if (plain and not shared) or st.nbytes() % isz:
        return t.clone()         # a tensor that owns its storage: clone() keeps its strides
    if key not in storages:
        storages[key] = torch.empty(0, dtype=t.dtype, device=t.device).set_(st).clone()
    return storages[key].as_strided(t.shape, t.stride(), t.storage_offset())


def _tolerances(op, dtype_name: str, device: str):
    """(rtol, atol) from the op's toleranceOverride decorators for this dtype/device (the
    largest over its tests), or None: then assert_close's per-dtype defaults apply."""
    import torch
    from torch.testing._internal.common_device_type import toleranceOverride
    from torch.testing._internal.opinfo.core import DecorateInfo

    dt = getattr(torch, dtype_name)
    best = None
    for d in getattr(op, "decorators", ()) or ():
        if not isinstance(d, DecorateInfo):
            continue
        if d.device_type is not None and d.device_type != device:
            continue
        if d.dtypes is not None and dt not in d.dtypes:
            continue
        for dd in d.decorators:
            if isinstance(dd, toleranceOverride) and dt in dd.d:
                tol = dd.d[dt]
                best = (max(best[0], tol.rtol), max(best[1], tol.atol)) if best else (tol.rtol, tol.atol)
    return best


class Mismatch(Exception):
    pass


def _first_lines(msg: str, n: int = 3) -> str:
    lines = [ln.strip() for ln in str(msg).strip().splitlines() if ln.strip()]
    return " | ".join(lines[:n])


def compare(actual, expected, path: str, tol, meta_only: bool = False):
    """Raises Mismatch naming the first differing leaf of two nested results."""
    import torch
    from torch.testing._comparison import default_tolerances

    if isinstance(expected, torch.Tensor):
        if not isinstance(actual, torch.Tensor):
            raise Mismatch(f"{path}: expected a tensor, got {type(actual).__name__}")
        if actual.shape != expected.shape or actual.dtype != expected.dtype:
            raise Mismatch(f"{path}: shape/dtype {tuple(actual.shape)} {actual.dtype} "
                           f"!= eager {tuple(expected.shape)} {expected.dtype}")
        if actual.device != expected.device or actual.layout != expected.layout:
            raise Mismatch(f"{path}: device/layout {actual.device} {actual.layout} "
                           f"!= eager {expected.device} {expected.layout}")
        if meta_only:
            return
        rtol = atol = None
        if tol is not None and not (expected.dtype == torch.bool or not (
                expected.is_floating_point() or expected.is_complex())):
            r0, a0 = default_tolerances(expected)
            rtol, atol = max(r0, tol[0]), max(a0, tol[1])
        try:
            torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=True,
                                       check_dtype=True, check_device=True, check_layout=True,
                                       check_stride=False)
        except AssertionError as e:
            raise Mismatch(f"{path}: {_summarize_mismatch(actual, expected, e)}") from None
        return
    if isinstance(expected, (list, tuple)):
        if not isinstance(actual, (list, tuple)) or len(actual) != len(expected):
            raise Mismatch(f"{path}: expected {type(expected).__name__} of {len(expected)}, "
                           f"got {type(actual).__name__}"
                           + (f" of {len(actual)}" if isinstance(actual, (list, tuple)) else ""))
        for i, (a, e) in enumerate(zip(actual, expected)):
            compare(a, e, f"{path}[{i}]", tol, meta_only)
        return
    if isinstance(expected, dict):
        if not isinstance(actual, dict) or set(actual) != set(expected):
            raise Mismatch(f"{path}: dict keys differ")
        for k in expected:
            compare(actual[k], expected[k], f"{path}[{k!r}]", tol, meta_only)
        return
    if isinstance(expected, (bool, int, float, complex)):
        if type(actual) is not type(expected):
            raise Mismatch(f"{path}: expected {type(expected).__name__}, got {type(actual).__name__}")
        if meta_only:
            return
        if isinstance(expected, (float, complex)):
            if (math.isnan(abs(expected)) and math.isnan(abs(actual))) or actual == expected:
                return
            if tol is None:
                ok = abs(actual - expected) <= 1e-5 + 1.3e-6 * abs(expected)
            else:
                ok = abs(actual - expected) <= tol[1] + tol[0] * abs(expected)
            if ok:
                return
        elif actual == expected:
            return
        raise Mismatch(f"{path}: {actual!r} != eager {expected!r}")
    if expected is None:
        if actual is not None:
            raise Mismatch(f"{path}: expected None, got {type(actual).__name__}")
        return
    try:
        same = bool(actual == expected)
    except Exception:  # noqa: BLE001
        same = repr(actual) == repr(expected)
    if not same:
        raise Mismatch(f"{path}: {actual!r:.80} != eager {expected!r:.80}")


def _summarize_mismatch(actual, expected, err) -> str:
    """Mismatched elements, worst absolute/relative difference and where, from assert_close."""
    msg = str(err)
    m = re.search(r"Mismatched elements: ([0-9]+ / [0-9]+ \([^)]*\))", msg)
    parts = []
    if m:
        parts.append("mismatched " + m.group(1))
    for what in ("absolute", "relative"):
        m = re.search(rf"Greatest {what} difference: ([^\n]+)", msg)
        if m:
            parts.append(f"max {what[:3]} diff {m.group(1).strip()}")
    if not parts:
        parts.append(_first_lines(msg, 2))
    try:
        import torch

        a, e = actual.detach().cpu(), expected.detach().cpu()
        if a.is_floating_point() and a.layout == torch.strided:
            an, en = a.isnan(), e.isnan()
            if not torch.equal(an, en):
                parts.append(f"NaN where eager has none: {int((an & ~en).sum())}, "
                             f"eager NaN not reproduced: {int((en & ~an).sum())}")
            ai, ei = a.isinf(), e.isinf()
            if not torch.equal(ai, ei):
                parts.append("inf pattern differs")
    except Exception:  # noqa: BLE001
        pass
    return "; ".join(parts)


_WARN_FALLBACK = ("eagerly", "without it", "run through torch")


def _islands(log_text: str) -> list[str]:
    """Eager islands from mlircap's 'fallback' log ('... eager islands: gather: index, ...'),
    as 'op (reason)' with node-name suffixes (_1, _2) dropped."""
    out = []
    for m in re.finditer(r"split into (\d+) parts; eager islands: ([^\n]*)", log_text):
        if not m.group(2).strip():
            if m.group(1) == "0":
                out.append("<empty>")
            continue
        for item in m.group(2).split(", "):
            name, _, why = item.partition(": ")
            name = re.sub(r"_\d+$", "", name.strip())
            out.append(f"{name} ({why.strip()})" if why else name)
    return list(dict.fromkeys(out))


# The island reason of a designed library call through torch (partition.py's "library":
# CPU log_softmax, convolutions the launch plans do not take, fused attention): the same
# torch call as a plan's matmul/conv library step, made between compiled parts.
LIBRARY = "library"
# The note of an ok sample whose captured graph has no op (its result is an input or a
# constant): nothing runs, eagerly or compiled; counted separately (ok_empty).
NOTHING_TO_COMPUTE = "nothing to compute (empty graph)"


def _library_islands(islands: list[str]) -> list[str] | None:
    """The op names when every island is a designed library call, else None."""
    names = []
    for i in islands:
        m = re.fullmatch(r"(\S+) \((\w+)\)", i)
        if m is None or m.group(2) != LIBRARY:
            return None
        names.append(m.group(1))
    return names


def compiled_status(c, warn_msgs, log_text: str = "", notes: list | None = None) -> str | None:
    """None when the second call ran mlircap-compiled code for all of the sample (at least one
    graph, every graph compiled, no eager island but library calls next to compiled parts,
    no recompile), else why not. `notes` receives "library calls: ..." when the sample ran
    such calls (see LIBRARY)."""
    graphs = list(c.graphs)
    cap = getattr(getattr(c, "_compiled", None), "_mlircap_capture", None)
    partial = "partial: " if graphs and all(
        g.fallback_reason is None and g.executable is not g.gm for g in graphs) else ""
    for g in graphs:
        if g.fallback_reason is not None:
            return _reason_line(g.fallback_reason)
    for w in warn_msgs:
        if w.startswith("mlircap") and any(k in w for k in _WARN_FALLBACK):
            return partial + _reason_line(re.sub(r"^mlircap[^:]*: ", "", w))
    islands = _islands(log_text)
    if islands == ["<empty>"] and not graphs:
        # nothing to compute (x.real of a real x, conj of a real x, atleast_3d of a 3-D
        # tensor): no part ran eagerly; still the variant must replay, not record again
        why = _replay_status(cap)
        if why is None and notes is not None:
            notes.append(NOTHING_TO_COMPUTE)
        return why
    islands = [i for i in islands if i != "<empty>"]
    library = _library_islands(islands) if islands and partial else None
    if islands and library is None:
        return partial + "eager islands: " + ", ".join(islands)
    if library and notes is not None:
        notes.append("library calls: " + ", ".join(library))
    if not graphs and not islands and _nothing_captured(c, cap):
        # no tensor op at all (broadcast_shapes: a torch.Size from shapes): the variant
        # replays its recorded result; no uncapturable call, nothing ran eagerly
        why = _replay_status(cap)
        if why is None and notes is not None:
            notes.append(NOTHING_TO_COMPUTE)
        return why
    if not graphs:
        why = None
        if cap is not None:
            for v in cap.variants:
                if getattr(v, "eager", False) and getattr(v, "reason", None):
                    why = v.reason
        return "no graph captured" + (f": {_reason_line(why)}" if why else "")
    for g in graphs:
        if g.executable is g.gm:
            return "graph runs eagerly (executable is the FX graph)"
    return _replay_status(cap)


def _nothing_captured(c, cap) -> bool:
    """The capture recorded a variant without any graph, graph break (an uncapturable call
    made between graphs) or eager part: the function computes nothing with tensors."""
    if cap is None or any(getattr(v, "eager", False) for v in cap.variants):
        return False
    try:
        ex = c.explain()
    except Exception:  # noqa: BLE001
        return False
    return ex.graph_count == 0 and ex.break_count == 0 and not ex.eager_reasons


def _replay_status(cap) -> str | None:
    """None when the second call replayed the variant the first one recorded, else why not."""
    if cap is not None:
        st = cap.stats
        if st.records > 1:
            rr = st.recompile_reasons[-1] if st.recompile_reasons else "?"
            return f"recompiled on the second call (guard failed: {_reason_line(rr)})"
        if st.replays < 1:
            return "second call did not replay the compiled variant"
    return None


def _reason_line(reason: str) -> str:
    """First line of a fallback reason, plus the op names listed under it (torch-mlir's
    unsupported ops, ops run through torch), without source locations."""
    lines = [ln for ln in str(reason).strip().splitlines() if ln.strip()]
    if not lines:
        return "(no reason given)"
    first = re.sub(r"\bgraph\d+\b", "graphN", lines[0].strip())
    first = re.sub(r" at \S+:\d+", "", first)
    first = re.sub(r" \(the graph runs eagerly[^)]*\)", "", first)
    first = first.replace("these ops are not supported by the compiler and run through torch inside the "
                          "compiled graph:", "ops run through torch (unsupported):")
    listed = [re.sub(r" at (\S+:\d+|<unknown location>)", "", ln.strip()) for ln in lines[1:]
              if ln.startswith("  ")]
    if listed:
        first += " " + ", ".join(dict.fromkeys(listed))
    return first[:300]


def _exc_line(e: BaseException) -> str:
    return f"{type(e).__name__}: {_first_lines(str(e), 1)[:200]}"


def compare_outputs(op, actual, expected, tol, meta_only: bool = False):
    """`compare` of an op's outputs, with UNINITIALIZED_OUTPUTS compared on shape and dtype."""
    meta = UNINITIALIZED_OUTPUTS.get(op.name, ())
    if not meta or not isinstance(expected, (list, tuple)) or not isinstance(actual, (list, tuple)) \
            or len(actual) != len(expected):
        return compare(actual, expected, "out", tol, meta_only)
    for i, (a, e) in enumerate(zip(actual, expected)):
        compare(a, e, f"out[{i}]", tol, meta_only or i in meta)


def run_sample(op, sample, dtype: str, device: str) -> dict:
    """Runs one sample eagerly and through mlircap (two calls); returns {category, detail}."""
    import warnings

    import torch

    import mlircap

    fn, tensors = make_fn(op, sample)
    tol = _tolerances(op, dtype, kernel_device(device))

    def call(f):
        ins = _clone(tensors)
        torch.manual_seed(CALL_SEED)
        try:
            return f(*ins), ins, None
        except Exception as e:  # noqa: BLE001
            return None, ins, e

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out_e, ins_e, exc_e = call(fn)
        meta_only = op.name in UNINITIALIZED
        if exc_e is None and not meta_only:
            out_e2, ins_e2, exc_e2 = call(fn)
            try:
                if exc_e2 is not None:
                    raise Mismatch("second eager run raised")
                compare_outputs(op, out_e2, out_e, tol)
                compare(ins_e2, ins_e, "input", tol)
            except Mismatch:
                meta_only = True     # eager is not deterministic under a fixed seed (empty*)
            del out_e2, ins_e2

    c = mlircap.compile(fn) if device != "simt" else mlircap.compile(fn, device="cuda")
    results = []
    log = io.StringIO()      # MLIRCAP_LOGS=fallback (set for workers) names eager islands
    with warnings.catch_warnings(record=True) as wlist, contextlib.redirect_stderr(log):
        warnings.simplefilter("always")
        for _ in range(2):
            results.append(call(c))
    warn_msgs = [str(w.message) for w in wlist]
    sys.stderr.write(log.getvalue()[-2000:])

    exc_c = [e for _, _, e in results if e is not None]
    if exc_e is not None:
        if len(exc_c) == 2 and all(type(e) is type(exc_e) for e in exc_c):
            return {"category": "eager-error", "detail": _exc_line(exc_e)}
        if not exc_c:
            return {"category": "error", "detail": f"eager raised {_exc_line(exc_e)}; compiled returned"}
        bad = next(e for e in exc_c if type(e) is not type(exc_e)) if any(
            type(e) is not type(exc_e) for e in exc_c) else exc_c[0]
        return {"category": "error",
                "detail": f"eager raised {type(exc_e).__name__}, compiled raised {_exc_line(bad)}"}
    for i, (out, ins, e) in enumerate(results, 1):
        if e is not None:
            return {"category": "error", "detail": f"call {i} raised {_exc_line(e)}"}
    notes: list[str] = []
    status = compiled_status(c, warn_msgs, log.getvalue(), notes)
    for i, (out, ins, _) in enumerate(results, 1):
        try:
            compare_outputs(op, out, out_e, tol, meta_only)
            compare(ins, ins_e, "input", tol, meta_only)
        except Mismatch as m:
            where = "recorded (eager) call" if i == 1 else (
                "compiled call" if status is None else "second call (fallback)")
            return {"category": "wrong", "detail": f"{where}: {m}"}
    if status is None:
        if meta_only:
            notes.append("shape/dtype only (nondeterministic eager)")
        return {"category": "ok", "detail": "; ".join(notes) or None}
    return {"category": "fallback", "detail": status}


def worker_main(device: str) -> None:
    """Reads JSON tasks from stdin, writes one JSON result line per task to the protocol fd
    (the original stdout; the process's own stdout goes to stderr)."""
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    import torch

    torch.set_num_threads(1)
    import mlircap  # noqa: F401

    if device == "simt":
        sys.path.insert(0, os.path.join(ROOT, "test", "python"))
        import simt

        simt.install_simt_gpu()
    ops = load_op_db()
    cache = {}
    proto.write(json.dumps({"ready": True}) + "\n")
    for line in sys.stdin:
        task = json.loads(line)
        t0 = time.time()
        if task.get("kind") == "count":
            res = {"counts": {}}
            for dt in task["dtypes"]:
                try:
                    res["counts"][dt] = len(generate_samples(ops[task["op"]], data_device(device), dt,
                                                              task.get("limit")))
                except Exception as e:  # noqa: BLE001
                    res["detail"] = f"{dt}: {_exc_line(e)}"
            proto.write(json.dumps(res) + "\n")
            continue
        key = (task["op"], task["dtype"], task.get("limit"))
        try:
            if key not in cache:
                cache.clear()
                cache[key] = generate_samples(ops[task["op"]], data_device(device), task["dtype"], task.get("limit"))
            sample = cache[key][task["index"]]
            print(f"[opinfo] {task['op']} {task['dtype']} #{task['index']}", file=sys.stderr, flush=True)
            res = run_sample(ops[task["op"]], sample, task["dtype"], device)
        except Exception as e:  # noqa: BLE001 - the harness itself failed on this sample
            res = {"category": "error", "detail": f"harness: {_exc_line(e)}"}
        res["time"] = round(time.time() - t0, 3)
        proto.write(json.dumps(res) + "\n")


# --------------------------------------------------------------------------- parent side

class Worker:
    def __init__(self, device: str, env: dict, logdir: str, n: int):
        self.log_path = os.path.join(logdir, f"worker{n}.log")
        self.log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-u", os.path.abspath(__file__), "--worker", "--device", device],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, env=env, cwd=ROOT,
            start_new_session=True)   # its own process group: mlircap's compile worker goes with it
        self.buf = b""
        self.ready = False
        self.task = None
        self.deadline = None
        self.log_offset = 0
        self.done = 0
        self.started = time.time()

    def fileno(self):
        return self.proc.stdout.fileno()

    def send(self, task, timeout):
        self.task = task
        self.log.flush()
        self.log_offset = os.path.getsize(self.log_path)
        self.deadline = time.time() + timeout
        self.proc.stdin.write((json.dumps(task) + "\n").encode())
        self.proc.stdin.flush()

    def read_lines(self):
        """New complete lines, or None at EOF."""
        data = os.read(self.fileno(), 1 << 16)
        if not data:
            return None
        self.buf += data
        *lines, self.buf = self.buf.split(b"\n")
        return [json.loads(ln) for ln in lines if ln.strip()]

    def log_tail(self, n=6) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(self.log_offset)
                text = f.read().decode(errors="replace")
        except OSError:
            return ""
        lines = [ln for ln in text.splitlines() if ln.strip() and not ln.startswith("[opinfo]")]
        # LLVM/MLIR fatal errors and assertions first: they name the cause.
        key = [ln for ln in lines if re.search(r"LLVM ERROR|Assertion|error:|Fatal|fatal|Segmentation", ln)]
        return " | ".join((key or lines)[-n:])[:600]

    def kill(self):
        try:    # this worker's process group: the worker and the compile worker it started
            os.killpg(self.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        self.proc.wait()
        self.close()

    def close(self):
        for f in (self.proc.stdin, self.proc.stdout, self.log):
            try:
                f.close()
            except OSError:
                pass


def _signal_name(rc: int) -> str:
    if rc < 0:
        try:
            return signal.Signals(-rc).name
        except ValueError:
            return f"signal {-rc}"
    return f"exit code {rc}"


class Pool:
    """Persistent worker processes; a worker that dies or runs past the timeout is replaced
    and its task recorded as crash / timeout."""

    def __init__(self, device="cpu", jobs=2, recycle=400):
        self.device, self.jobs, self.recycle = device, max(1, jobs), recycle
        self.tmp = tempfile.mkdtemp(prefix="mlircap-opinfo-")
        env = dict(os.environ)
        env["MLIRCAP_CACHE_DIR"] = os.path.join(self.tmp, "cache")
        env.setdefault("OMP_NUM_THREADS", "1")
        env["PYTHONWARNINGS"] = "ignore"
        env["MLIRCAP_LOGS"] = "fallback"
        # the workers import the same mlircap as this process (e.g. pytest's pythonpath)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
        env.pop("MLIRCAP_DUMP_DIR", None)
        self.env = env
        self.nstarted = 0
        self.workers = [self._spawn() for _ in range(self.jobs)]

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        for w in self.workers:
            w.kill()
        self.workers = []
        shutil.rmtree(self.tmp, ignore_errors=True)

    def _spawn(self):
        self.nstarted += 1
        return Worker(self.device, self.env, self.tmp, self.nstarted)

    def run(self, tasks, timeout=60.0, progress=True):
        """Runs tasks on the workers; returns one record per task, in task order: the task's
        fields plus the worker's result (category, detail, time)."""
        records = [None] * len(tasks)
        pending = collections.deque(range(len(tasks)))
        workers = self.workers
        t_start = time.time()
        finished = 0
        counts = collections.Counter()
        last_print = 0.0

        def finish(w, rec):
            nonlocal finished, last_print
            i = w.task["_i"]
            records[i] = {**{k: v for k, v in w.task.items() if k not in ("_i", "limit")}, **rec}
            counts[rec.get("category")] += 1
            finished += 1
            w.task = None
            w.done += 1
            if progress and (time.time() - last_print > 15 or finished == len(tasks)):
                last_print = time.time()
                print(f"[opinfo] {finished}/{len(tasks)} in {time.time() - t_start:.0f}s  "
                      + " ".join(f"{k}={counts[k]}" for k in CATEGORIES if counts[k]), flush=True)

        while finished < len(tasks):
            for idx, w in enumerate(workers):
                if w.ready and w.task is None and pending:
                    if w.done >= self.recycle:      # bound the memory of long-lived JITs
                        w.kill()
                        workers[idx] = self._spawn()
                        continue
                    i = pending.popleft()
                    w.send({**tasks[i], "_i": i}, timeout)
            now = time.time()
            waits = [w.deadline - now for w in workers if w.task is not None]
            wait = max(0.05, min(waits)) if waits else 1.0
            rl, _, _ = select.select(workers, [], [], wait)
            for w in rl:
                try:
                    lines = w.read_lines()
                except (OSError, ValueError):
                    lines = None
                if lines is None:    # EOF: the worker died
                    rc = w.proc.wait()
                    w.kill()         # and anything it left in its process group
                    if w.task is not None:
                        finish(w, {"category": "crash",
                                   "detail": f"{_signal_name(rc)}: {w.log_tail()}".strip(": "),
                                   "time": round(time.time() - (w.deadline - timeout), 3)})
                    elif not w.ready:
                        raise RuntimeError(f"opinfo worker failed to start ({_signal_name(rc)}); "
                                           f"see {w.log_path}:\n" + w.log_tail(20))
                    workers[workers.index(w)] = self._spawn()
                    continue
                for msg in lines:
                    if msg.get("ready"):
                        w.ready = True
                    elif w.task is not None:
                        finish(w, msg)
            now = time.time()
            for idx, w in enumerate(workers):
                if w.task is not None and now > w.deadline:
                    w.kill()
                    finish(w, {"category": "timeout", "detail": f"over {timeout:g} s", "time": timeout})
                    workers[idx] = self._spawn()
        return records


def enumerate_tasks(pool, ops, names=None, dtypes=DEFAULT_DTYPES, max_per_op=None):
    """Every (op, dtype, index) in op_db order (names: only these ops). The workers generate
    the sample lists to count them (reproducible: see generate_samples)."""
    unknown = [n for n in (names or []) if n not in ops]
    if unknown:
        raise SystemExit(f"unknown ops: {', '.join(unknown)} (see --list-ops)")
    count_tasks = []
    for key, op in ops.items():
        if names and key not in names:
            continue
        dts = supported(op, pool.device, dtypes)
        if dts:
            count_tasks.append({"kind": "count", "op": key, "dtypes": dts, "limit": max_per_op})
    tasks = []
    for rec in pool.run(count_tasks, timeout=300, progress=False):
        if "counts" not in rec:
            print(f"[opinfo] {rec['op']}: sample generation failed: {rec.get('detail')}", file=sys.stderr)
            continue
        for dt in rec["dtypes"]:
            n = rec["counts"].get(dt, 0)
            tasks += [{"op": rec["op"], "dtype": dt, "index": i, "limit": max_per_op} for i in range(n)]
    return tasks


def select_sample(tasks, k: int, seed: int):
    """A deterministic random subset of k tasks, kept in op_db order."""
    if k >= len(tasks):
        return list(tasks)
    keep = set(random.Random(seed).sample(range(len(tasks)), k))
    return [t for i, t in enumerate(tasks) if i in keep]


def like_tasks(saved: str, ops) -> list[dict]:
    """The samples (op, dtype, index) of a saved --json run, in its order: the same samples
    run here (another device, another commit). Ops this torch's op_db lacks are left out."""
    with open(saved) as f:
        records = json.load(f)["records"]
    missing = sorted({r["op"] for r in records if r["op"] not in ops})
    if missing:
        print(f"[opinfo] --like: {len(missing)} ops not in this op_db, left out: {', '.join(missing)}",
              file=sys.stderr)
    return [{"op": r["op"], "dtype": r["dtype"], "index": r["index"], "limit": None}
            for r in records if r["op"] in ops]


def sweep(names=None, dtypes=DEFAULT_DTYPES, max_per_op=None, sample=None, seed=0, jobs=2,
          device="cpu", timeout=60.0, recycle=400, progress=True, like=None):
    """Enumerate, select and run: returns (records, number of samples before --sample).
    `like`: a saved --json run whose samples are run instead."""
    ops = load_op_db()
    with Pool(device, jobs, recycle) as pool:
        tasks = like_tasks(like, ops) if like else enumerate_tasks(pool, ops, names, dtypes, max_per_op)
        n_all = len(tasks)
        if sample is not None:
            tasks = select_sample(tasks, sample, seed)
        if progress:
            print(f"[opinfo] {len(tasks)} samples (of {n_all}) from {len({t['op'] for t in tasks})} ops; "
                  f"{jobs} workers", flush=True)
        return pool.run(tasks, timeout=timeout, progress=progress), n_all


# --------------------------------------------------------------------------- report

def family(op: str) -> str:
    """An op family for grouping: the namespace (nn.functional, linalg, special, fft, masked,
    sparse, ...) or 'core'."""
    parts = op.split(".")
    if parts[0] == "nn" and len(parts) > 2:
        return "nn.functional"
    if parts[0] in ("linalg", "special", "fft", "masked", "sparse", "signal", "nn", "_refs"):
        return parts[0]
    return "core"


def summarize(records) -> dict:
    cnt = collections.Counter(r["category"] for r in records)
    denom = len(records) - cnt["eager-error"]
    fb = [r for r in records if r["category"] == "fallback"]
    reasons = collections.Counter(_reason_key(r["detail"]) for r in fb)
    pct = (lambda n: 100.0 * n / denom if denom else 0.0)
    ok_library = sum(1 for r in records if r["category"] == "ok" and "library calls: " in str(r.get("detail")))
    ok_empty = sum(1 for r in records if r["category"] == "ok" and NOTHING_TO_COMPUTE in str(r.get("detail")))
    return {"total": len(records), "eager_runs": denom, "counts": {c: cnt[c] for c in CATEGORIES},
            "ok_pct": round(pct(cnt["ok"]), 2), "fallback_pct": round(pct(cnt["fallback"]), 2),
            "ok_library": ok_library, "ok_empty": ok_empty,
            "fallback_partial": sum(1 for r in fb if str(r["detail"]).startswith("partial: ")),
            "fallback_compile_crash": sum(1 for r in fb if _is_compile_crash(r)),
            "top_fallback_reasons": reasons.most_common(25)}


def _reason_key(detail) -> str:
    """A fallback reason with shapes and types elided, for counting."""
    d = re.sub(r"(tensor|memref|vector)<[^>]*>", r"\1<...>", str(detail))
    return re.sub(r"%[\w#]+", "%v", d)


def _is_compile_crash(r) -> bool:
    """A fallback because mlircap's compile worker died or timed out (a compiler crash that
    mlircap contained)."""
    d = str(r.get("detail") or "")
    return r["category"] == "fallback" and "compile worker" in d and ("died" in d or "timed out" in d)


def report(records, out=sys.stdout, top=25, markdown=False) -> None:
    s = summarize(records)
    c = s["counts"]
    p = (lambda line: print(line, file=out))
    if markdown:
        p("| total | eager runs | compiled-and-correct | fallback | wrong | error | crash | timeout | eager-error |")
        p("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        p(f"| {s['total']} | {s['eager_runs']} | {c['ok']} ({s['ok_pct']:.1f}%) | {c['fallback']} "
          f"({s['fallback_pct']:.1f}%) | {c['wrong']} | {c['error']} | {c['crash']} | {c['timeout']} "
          f"| {c['eager-error']} |")
        p(f"\n{s['ok_library']} of the compiled-and-correct samples call a library op through torch "
          "between compiled parts (log_softmax, convolutions the plans do not take, FFTs; see LIBRARY); "
          f"{s['ok_empty']} have nothing to compute (empty graph: the result is an input or a constant).")
    else:
        p("")
        p(f"{'total':>8} {'ok%':>7} {'fallback%':>9} {'wrong':>6} {'error':>6} {'crash':>6} {'timeout':>7}")
        p(f"{s['total']:>8} {s['ok_pct']:>6.1f}% {s['fallback_pct']:>8.1f}% {c['wrong']:>6} {c['error']:>6} "
          f"{c['crash']:>6} {c['timeout']:>7}")
        p("counts: " + ", ".join(f"{k}={c[k]}" for k in CATEGORIES)
          + f"  (percentages over the {s['eager_runs']} samples eager runs)")
        p(f"ok with library calls through torch between compiled parts: {s['ok_library']}")
        p(f"ok with nothing to compute (empty graph: the result is an input or a constant): {s['ok_empty']}")
    by_dtype = collections.defaultdict(collections.Counter)
    for r in records:
        by_dtype[r["dtype"]][r["category"]] += 1
    p("")
    if markdown:
        p("Per dtype:\n")
        p("| dtype | " + " | ".join(CATEGORIES) + " |")
        p("|---|" + "---:|" * len(CATEGORIES))
        for dt in sorted(by_dtype):
            p(f"| {dt} | " + " | ".join(str(by_dtype[dt][k]) for k in CATEGORIES) + " |")
    else:
        p("per dtype: " + "; ".join(f"{dt}: " + " ".join(f"{k}={by_dtype[dt][k]}" for k in CATEGORIES
                                                          if by_dtype[dt][k]) for dt in sorted(by_dtype)))
    p("")
    p(f"Top fallback reasons ({c['fallback']} samples; {s['fallback_partial']} of them partly compiled "
      f"('partial:'), {s['fallback_compile_crash']} compiler crashes contained by mlircap's compile "
      f"worker):" + ("\n" if markdown else ""))
    for reason, n in s["top_fallback_reasons"][:top]:
        p(f"- {n}: {reason}" if markdown else f"  {n:>5}  {reason}")
    groups = [(cat, f"{cat}", [r for r in records if r["category"] == cat])
              for cat in ("wrong", "crash", "timeout", "error")]
    groups.insert(2, ("compile-crash", "compiler crashes contained by the compile worker (fallback)",
                      [r for r in records if _is_compile_crash(r)]))
    for cat, title, rs in groups:
        if not rs:
            continue
        p("")
        p(f"{title} ({len(rs)}), by op family:" + ("\n" if markdown else ""))
        fam = collections.defaultdict(list)
        for r in rs:
            fam[family(r["op"])].append(r)
        for f in sorted(fam):
            p(f"* {f}" if markdown else f"  [{f}]")
            # samples of one op with the same detail on one line
            lines = collections.OrderedDict()
            for r in fam[f]:
                lines.setdefault((r["op"], r["detail"]), []).append(f"{r['dtype']} #{r['index']}")
            for (op, detail), which in lines.items():
                if markdown:
                    p(f"  - `{op}` {', '.join(which)}: {detail}")
                else:
                    p(f"    {op} {', '.join(which)}: {detail}")


def diff(a_path: str, b_path: str, out=sys.stdout) -> dict:
    """The samples two saved runs share (op, dtype, index), compared: how many have the same
    category, and each one that differs, with both details (a GPU run and its --device simt
    rerun: which fallbacks the interpreter reproduces). Returns the counts."""
    runs = []
    for path in (a_path, b_path):
        with open(path) as f:
            saved = json.load(f)
        runs.append((saved, {(r["op"], r["dtype"], r["index"]): r for r in saved["records"]}))
    (sa, ra), (sb, rb) = runs
    shared = [k for k in ra if k in rb]
    same = [k for k in shared if ra[k]["category"] == rb[k]["category"]]
    p = (lambda line: print(line, file=out))
    p(f"A: {a_path} ({sa.get('device')}, {sa.get('commit')}); B: {b_path} ({sb.get('device')}, {sb.get('commit')})")
    p(f"{len(shared)} shared samples ({len(ra) - len(shared)} only in A, {len(rb) - len(shared)} only in B); "
      f"same category: {len(same)}; different: {len(shared) - len(same)}")
    pairs = collections.Counter((ra[k]["category"], rb[k]["category"]) for k in shared)
    p("category A -> B: " + ", ".join(f"{x} -> {y}: {n}" for (x, y), n in sorted(pairs.items())))
    for k in shared:
        if ra[k]["category"] != rb[k]["category"]:
            p(f"  {k[0]} {k[1]} #{k[2]}: A {ra[k]['category']}: {str(ra[k]['detail'])[:150]}")
            p(f"  {' ' * len(f'{k[0]} {k[1]} #{k[2]}')}  B {rb[k]['category']}: {str(rb[k]['detail'])[:150]}")
    fb = [k for k in same if ra[k]["category"] == "fallback"]
    reason = sum(_reason_key(ra[k]["detail"]) == _reason_key(rb[k]["detail"]) for k in fb)
    p(f"fallback in both: {len(fb)}, with the same reason: {reason}")
    return {"shared": len(shared), "same": len(same), "fallback_both": len(fb), "same_reason": reason}


# --------------------------------------------------------------------------- main

def _git_commit() -> str:
    """HEAD, with '+dirty' when tracked files differ from it (the compiler under test is the
    working tree); '' outside a git checkout."""
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True)
        if head.returncode != 0:
            return ""
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head.stdout.strip() + ("+dirty" if dirty else "")
    except OSError:
        return ""


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ops", help="comma-separated op names (op.name or op.name.variant)")
    ap.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES),
                    help="comma-separated dtypes, kept where the op supports them (default: %(default)s)")
    ap.add_argument("--max-samples-per-op", type=int, help="first N samples of each (op, dtype)")
    ap.add_argument("--sample", type=int, help="deterministic random subset of K samples over all ops")
    ap.add_argument("--seed", type=int, default=0, help="seed of --sample")
    ap.add_argument("--jobs", type=int, default=2, help="worker processes")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds per sample")
    ap.add_argument("--recycle", type=int, default=400, help="restart a worker after N samples")
    ap.add_argument("--json", help="write every sample's record and the summary here")
    ap.add_argument("--markdown", action="store_true", help="print the report as markdown")
    ap.add_argument("--report", metavar="JSON", help="print the report of a saved --json run, run nothing")
    ap.add_argument("--inputs", choices=("sample", "reference"), default="sample",
                    help="the op's sample_inputs, or its reference_inputs (the samples plus extremal "
                         "values: inf, nan, large and tiny numbers, noncontiguous and broadcast operands)")
    ap.add_argument("--like", metavar="JSON", help="run the samples (op, dtype, index) of a saved --json run "
                    "(another device's: compare them with --diff)")
    ap.add_argument("--diff", nargs=2, metavar=("A", "B"), help="compare two saved --json runs sample by sample")
    ap.add_argument("--list-ops", action="store_true")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)
    if a.worker:
        worker_main(a.device)
        return 0

    if a.list_ops:
        print("\n".join(load_op_db()))
        return 0
    if a.diff:
        diff(*a.diff)
        return 0
    if a.report:
        with open(a.report) as f:
            saved = json.load(f)
        if a.markdown:
            print(f"Command: `{saved.get('command')}`, commit {saved.get('commit') or '?'}, "
                  f"torch {saved.get('torch')}, device {saved.get('device')}, "
                  f"{saved.get('wall_s')} s wall.\n")
        report(saved["records"], markdown=a.markdown)
        return 0
    os.environ[INPUTS_ENV] = a.inputs   # the workers inherit it
    names = [n.strip() for n in a.ops.split(",") if n.strip()] if a.ops else None
    dtypes = [d.strip() for d in a.dtypes.split(",") if d.strip()]
    t1 = time.time()
    records, _ = sweep(names, dtypes, a.max_samples_per_op, a.sample, a.seed, a.jobs, a.device,
                       a.timeout, a.recycle, like=a.like)
    wall = time.time() - t1
    report(records, markdown=a.markdown)
    print(f"\n[opinfo] {len(records)} samples in {wall:.0f}s ({a.jobs} workers)")
    if a.json:
        import torch

        commit = _git_commit()
        with open(a.json, "w") as f:
            json.dump({"command": " ".join([os.path.relpath(sys.argv[0], ROOT)] + (argv or sys.argv[1:])),
                       "commit": commit, "torch": torch.__version__, "device": a.device,
                       "wall_s": round(wall, 1), "summary": summarize(records), "records": records}, f, indent=0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
