"""Random-program differential test: a seeded subset of bench/fuzz_graphs.py.

SEEDS programs (the seeds whose programs the fuzzer found wrong, now fixed, plus a spread of
others) are generated, run through `mlircap.compile` in a worker process and compared with
eager at two input shapes (bench/fuzz_graphs.py describes how). The test fails on any
wrong result, crash, error or timeout, printing each such program's source (reproduce with
`python bench/fuzz_graphs.py --seed N --show`). Fallbacks (eager execution) are allowed here.
"""
from __future__ import annotations

import importlib.util
import io
from pathlib import Path

import pytest

FOUND = [171, 175, 264, 297, 303, 372, 400, 573, 1052]   # wrong before test_trust_fuzz14's fixes (1290 too)
SEEDS = FOUND + list(range(1000, 1300, 10))        # 39 programs (1290 among them)
BAD = ("wrong", "crash", "error", "timeout")

# Seeds known to fail, seed -> the category observed, with the diagnosis. Each one that
# still fails is reported as a skip (`pytest -rs`), one that passes as a warning asking to
# remove it.
KNOWN: dict[int, str] = {
    # Emptied on 2026-12-05: seed 1290 (an in-place write through a view of an expanded
    # argument) runs eagerly now (capture/overlaps._overlapping_write).
}


# Generator v2 (--grad and the family groups): (mode, seed) -> found or a spread of others.
# Modes: "grad" (generator v1's families under --grad) and the groups of bench/fuzz_graphs.py's
# GROUPS. Seeds 27 (grad), 97 and 131 (modules) were ERROR-DIFFERS before test_trust_fuzz15's
# fix (an unused op that raises in eager).
V2_SEEDS = [("grad", 27), ("grad", 0), ("grad", 50), ("modules", 97), ("modules", 131), ("modules", 10),
            ("dtypes", 5), ("dtypes", 55), ("tensorops", 5), ("tensorops", 55)]
# Known to fail, as KNOWN above.
KNOWN_V2: dict[tuple[str, int], str] = {}


def _load_fuzz():
    path = Path(__file__).resolve().parents[2] / "bench" / "fuzz_graphs.py"
    spec = importlib.util.spec_from_file_location("mlircap_bench_fuzz_graphs", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def fuzz():
    return _load_fuzz()


@pytest.fixture(scope="module")
def records(fuzz):
    recs = fuzz.run_seeds(SEEDS, jobs=1, timeout=120, progress=False)
    assert len(recs) == len(SEEDS)
    return recs


@pytest.fixture(scope="module")
def records_v2(fuzz):
    progs = [fuzz.generate(s, None if m == "grad" else [m], grad=m == "grad") for m, s in V2_SEEDS]
    recs = fuzz.run_programs(progs, jobs=1, timeout=120, progress=False)
    assert len(recs) == len(V2_SEEDS)
    return [dict(r, mode=m) for r, (m, _) in zip(recs, V2_SEEDS)]


def test_v2_no_wrong_crash_or_error(fuzz, records_v2):
    bad = [r for r in records_v2 if r["category"] in BAD and (r["mode"], r["seed"]) not in KNOWN_V2]
    out = io.StringIO()
    if bad:
        fuzz.report(bad, out)
    assert not bad, f"{len(bad)} of {len(records_v2)} random programs differ from eager:\n{out.getvalue()}"
    assert sum(r["category"] == "compiled" for r in records_v2) >= len(records_v2) // 4


def test_v1_programs_unchanged_by_v2(fuzz):
    # the v2 families are drawn only where selected: a seed's v1 program stays the same
    # (seed 3's source at generator v1)
    p = fuzz.generate(3)
    assert not p.get("v2") and "setup" not in p
    assert fuzz.family_weights(None) == {f: w for f, (_, w) in fuzz.FAMILIES.items()}
    for mode in ("modules", "dtypes", "tensorops"):
        q = fuzz.generate(3, [mode])
        assert q["v2"] and q == fuzz.generate(3, [mode])
        assert set(q["families"]) <= set(fuzz.GROUPS[mode])
    g = fuzz.generate(3, None, grad=True)
    assert g["grad"] and "loss = " in g["source"] and g == fuzz.generate(3, None, grad=True)


def test_fp64_criterion_for_amplified_rounding(fuzz):
    # seed 847: a training-mode batch_norm (its batch statistics summed in another order
    # than eager's vectorized kernel: 1-2 ulps) scaled by 1e4 then sin(): 18 of 286 values
    # 1.7e-3 off eager's. Eager's own float32 result is as far from the float64 one; a value
    # 100x farther from it is not accepted.
    import torch

    import mlircap

    prog = fuzz.generate(847)
    ins = fuzz.make_inputs(prog)
    fn = fuzz.program_namespace(prog)["f"]
    want = fn(*[t.clone() for t in ins])
    fast = mlircap.compile(fn)
    fast(*[t.clone() for t in ins])
    got = fast(*[t.clone() for t in ins])
    ref = fuzz.fp64_reference(prog, ins)[0]
    assert fuzz.within_fp64_error(got, want, ref, prog["tol"])
    bad = [t.clone() for t in got]
    e, r = want[2].double(), ref[2].double()
    fin = e.isfinite() & r.isfinite()
    err = float((e[fin] - r[fin]).pow(2).mean().sqrt())
    bad[2] = torch.where(fin, want[2] + 100 * max(err, 1e-6), want[2])
    assert not fuzz.within_fp64_error(bad, want, ref, prog["tol"])
    # integers: a difference is accepted only where eager's own result differs from the
    # float64 program's (a rank of values one ulp apart), in at most twice as many places
    e = torch.tensor([0, 1, 2, 3])
    assert not fuzz.within_fp64_error((torch.tensor([0, 1, 2, 4]),), (e,), (e.clone(),), 0.0)
    assert fuzz.within_fp64_error((torch.tensor([0, 2, 1, 3]),), (e,), (torch.tensor([0, 2, 2, 3]),), 0.0)
    assert not fuzz.within_fp64_error((torch.tensor([3, 2, 1, 0]),), (e,), (torch.tensor([0, 2, 2, 3]),), 0.0)


def test_eager_layout_dependence_is_not_counted_wrong(fuzz):
    # tensorops seed 371: eager's torch.median along an expanded dim runs nth_element in place
    # on memory the expanded elements share (values and indices garbage); the compiled median
    # is eager's on contiguous copies. Such a difference is eager's, not a wrong result; a
    # compiled result eager gives neither way still is one.
    import torch

    def call(f, tensors):
        return (f(*tensors),), list(tensors), None

    def median(x):
        return torch.median(x, 0)[0]

    torch.manual_seed(0)
    x = torch.rand(1, 6, 16, dtype=torch.float64).expand(16, 6, 16)
    want = call(median, [x])
    right = (median(x.contiguous()),)
    assert not torch.equal(want[0][0], right[0])        # eager's own layout dependence
    assert fuzz._eager_depends_on_layout(call, median, [x], (right, [x]), want, 0.0)
    assert not fuzz._eager_depends_on_layout(call, median, [x], ((right[0] + 1,), [x]), want, 0.0)
    # a layout-independent op: never excused
    y = torch.rand(6, 16).t()
    wsum = call(lambda t: t.sum(0), [y])
    assert not fuzz._eager_depends_on_layout(call, lambda t: t.sum(0), [y], ((wsum[0][0] + 1,), [y]), wsum, 0.0)
    # eager raising on the layout it was given, returning on contiguous copies: excused alike
    # (seed 371 feeds the garbage median to a cholesky, which raises on some runs: CI at 73e55b2)
    def chol(x):
        v = torch.median(x, 0)[0]
        if not torch.equal(v, torch.median(x.contiguous(), 0)[0]):
            raise torch.linalg.LinAlgError("not positive-definite")
        return v
    exc = torch.linalg.LinAlgError("not positive-definite")
    assert fuzz._eager_depends_on_layout(call, chol, [x], (right, [x]), (None, [x], exc), 0.0)
    assert not fuzz._eager_depends_on_layout(call, chol, [x], ((right[0] + 1,), [x]), (None, [x], exc), 0.0)
    # eager whose result on a non-contiguous layout changes from run to run has no reference
    # (the recording call runs eager's median and gets garbage of its own: CI at 241eed2)
    runs = iter(range(1000))

    def drifting(x):
        return x.sum(0) + next(runs) % 3

    wd = call(drifting, [x])
    assert fuzz._eager_irreproducible(call, drifting, [x], wd, 0.0)
    assert not fuzz._eager_irreproducible(call, median, [x.contiguous()], call(median, [x.contiguous()]), 0.0)
    assert not fuzz._eager_irreproducible(call, lambda t: t.sum(0), [y], wsum, 0.0)
    prog = fuzz.generate(371, ["tensorops"])
    assert "torch.median(x0, 0)" in prog["source"]
    # eager's garbage differs from run to run, mostly one value, at times another (about 1 run
    # in 10 the compiled recording call, which runs eager's median, meets a value eager's
    # reference runs then never give again: a 'wrong' that is eager's, CI at 241eed2). The
    # excusals are checked deterministically above; end to end, one of three runs is compiled.
    rs = []
    for _ in range(3):
        rs.append(fuzz.run_program(prog))
        if rs[-1]["category"] == "compiled":
            break
    r = rs[-1]
    assert r["category"] == "compiled", rs
    assert r.get("fp64") is None or "memory layout" in str(r["fp64"]), r


def test_generation_is_deterministic(fuzz):
    for seed in (3, 171):
        a, b = fuzz.generate(seed), fuzz.generate(seed)
        assert a["source"] == b["source"] and a["inputs"] == b["inputs"] and a["sizes"] == b["sizes"]
    assert fuzz.generate(3)["source"] != fuzz.generate(4)["source"]


def test_no_wrong_crash_or_error(fuzz, records):
    bad = [r for r in records if r["category"] in BAD and r["seed"] not in KNOWN]
    out = io.StringIO()
    if bad:
        fuzz.report(bad, out)
    assert not bad, f"{len(bad)} of {len(records)} random programs differ from eager:\n{out.getvalue()}"


@pytest.mark.parametrize("seed", sorted(KNOWN))
def test_known_failure(records, seed):
    import warnings

    r = next(r for r in records if r["seed"] == seed)
    if r["category"] in BAD:
        pytest.skip(f"known {r['category']} seed {seed} (listed as {KNOWN[seed]}): {r['detail']}")
    warnings.warn(f"KNOWN seed {seed} now gives {r['category']!r}: remove it from test_fuzz_graphs.py's "
                  "KNOWN list", UserWarning)


def test_some_programs_compile(records):
    # The programs must exercise compiled code, not only fallbacks.
    assert sum(r["category"] == "compiled" for r in records) >= len(records) // 4


def test_comparison_catches_differences(fuzz):
    import torch

    e = torch.tensor([1.0, float("nan"), 2.0])
    fuzz.compare_values(e.clone(), e, "out")
    for bad in (torch.tensor([1.0, 0.0, 2.0]), torch.tensor([1.0, float("nan"), 2.1]), e.double(), e[:2]):
        with pytest.raises(fuzz.opinfo.Mismatch):
            fuzz.compare_values(bad, e, "out")
    with pytest.raises(fuzz.opinfo.Mismatch):
        fuzz.compare_values(torch.tensor([1, 2]), torch.tensor([1, 3]), "out")
    fuzz.compare_values(torch.tensor([1.0, 2.0], dtype=torch.bfloat16).double(),
                        torch.tensor([1.0, 2.004], dtype=torch.float64), "out", tol=fuzz.TOL["bfloat16"])
