"""The launch-plan contract (runtime/schema.py): every plan the core builds,
CPU and GPU, passes it and survives a round trip unchanged; plans that break
it are rejected with PlanError naming the problem, before anything runs."""
import copy
import json
import pathlib

import pytest
import torch

from mlircap._core import core
from mlircap.runtime.plan import PlanExecutor
from mlircap.runtime.schema import KernelStep, LibraryStep, Plan, PlanError

ROOT = pathlib.Path(__file__).resolve().parents[2]
IRS = ["mlp", "attention", "convbn", "embedding", "cat", "layernorm", "resnetish", "cross_entropy", "upsample"]


def _norm(o):
    """The wire form with optional keys at their defaults spelled out."""
    o = copy.deepcopy(o)
    o.setdefault("func", "main")
    for v in o["values"]:
        if v["kind"] == "view":
            v.setdefault("offset", 0)
    for s in o["steps"]:
        if s["kind"] == "kernel":
            s.setdefault("smem", 0)
            if s.get("strategy") == "kernel":
                del s["strategy"]
        elif not s.get("attrs"):
            s.pop("attrs", None)
    return o


@pytest.mark.parametrize("name", IRS)
@pytest.mark.parametrize("target", ["cpu", "gpu"])
def test_core_plans_meet_the_contract(name, target):
    ir = (ROOT / "test" / "Pipelines" / f"{name}.mlir").read_text()
    c = core()
    text = c.gpu_compile(ir) if target == "gpu" else c.cpu_plan_compile(ir, 3)[1]
    wire = json.loads(text)
    plan = Plan.from_json(wire)
    assert plan.steps and plan.outputs
    assert bool(plan.ptx) == (target == "gpu")
    assert _norm(plan.to_json()) == _norm(wire)
    assert Plan.from_json(plan.to_json()) == plan
    for s in plan.steps:
        assert isinstance(s, (KernelStep, LibraryStep))


def _tiny():
    return {"values": [{"id": 0, "kind": "input", "index": 0, "shape": [4, 8], "dtype": "f32"},
                       {"id": 1, "kind": "input", "index": 1, "shape": [8, 3], "dtype": "f32"},
                       {"id": 2, "kind": "buffer", "shape": [4, 3], "dtype": "f32"},
                       {"id": 3, "kind": "view", "of": 2, "shape": [12], "strides": [1], "offset": 0, "dtype": "f32"},
                       {"id": 4, "kind": "constant", "shape": [3], "dtype": "f32", "data": [1.5], "splat": True}],
            "steps": [{"kind": "library", "op": "matmul", "ins": [0, 1], "out": 2}],
            "outputs": [3, 4]}


def test_executor_runs_a_valid_plan():
    x, w = torch.randn(4, 8), torch.randn(8, 3)
    ex = PlanExecutor(_tiny(), torch.device("cpu"))
    t = ex._materialize(ex._prepare_inputs([x, w]))
    for st in ex.plan.steps:
        ex._run_library(st, t)
    flat, const = ex._outputs(t)
    torch.testing.assert_close(flat, (x @ w).reshape(-1))
    torch.testing.assert_close(const, torch.full((3,), 1.5))


def _break(path, value):
    def f(p):
        *keys, last = path
        o = p
        for k in keys:
            o = o[k]
        if value is KeyError:
            del o[last]
        else:
            o[last] = value
    return f


BROKEN = {
    "missing outputs": (_break(["outputs"], KeyError), "lacks ['outputs']"),
    "unknown plan key": (lambda p: p.update(extra=1), "unknown keys ['extra']"),
    "id not its position": (_break(["values", 1, "id"], 7), "has id 7"),
    "unknown dtype": (_break(["values", 0, "dtype"], "f8"), "unknown dtype"),
    "unknown value kind": (_break(["values", 2, "kind"], "scratch"), "unknown kind"),
    "negative dimension": (_break(["values", 2, "shape"], [4, -3]), "negative dimension"),
    "input index gap": (_break(["values", 1, "index"], 2), "input indices"),
    "view outside its base": (_break(["values", 3, "offset"], 1), "reaches outside"),
    "view of a view": (lambda p: p["values"].append(
        {"id": 5, "kind": "view", "of": 3, "shape": [2], "strides": [1], "offset": 0, "dtype": "f32"}), "non-view"),
    "view of a missing value": (_break(["values", 3, "of"], 9), "does not exist"),
    "view strides rank": (_break(["values", 3, "strides"], [1, 1]), "strides"),
    "constant data length": (_break(["values", 4, "splat"], False), "data elements"),
    "constant data type": (_break(["values", 4, "data"], ["one"]), "list of numbers"),
    "step reads a missing value": (_break(["steps", 0, "ins"], [0, 5]), "value 5"),
    "step writes an input": (_break(["steps", 0, "out"], 0), "writes an input"),
    "unknown step kind": (_break(["steps", 0, "kind"], "host"), "unknown kind 'host'"),
    "unknown conv attribute": (_break(["steps", 0, "attrs"], {"groups": [2]}), "unknown keys ['groups']"),
    "output missing": (_break(["outputs"], [3, 11]), "value 11"),
    "kernel grid rank": (lambda p: p["steps"].append(
        {"kind": "kernel", "name": "k", "grid": [1, 1], "block": [1, 1, 1], "args": []}), "grid"),
    "kernel bad argument": (lambda p: p["steps"].append(
        {"kind": "kernel", "name": "k", "grid": [1, 1, 1], "block": [1, 1, 1], "args": [{"f32": 1.0}]}),
        "bad argument"),
    "boolean as integer": (_break(["steps", 0, "out"], True), "integer"),
    "grid_stride not a boolean": (lambda p: p["steps"].append(
        {"kind": "kernel", "name": "k", "grid": [1, 1, 1], "block": [1, 1, 1], "args": [], "grid_stride": 1}),
        "grid_stride must be a boolean"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_broken_plans_are_rejected(case):
    mutate, message = BROKEN[case]
    p = _tiny()
    Plan.from_json(p)
    mutate(p)
    with pytest.raises(PlanError, match=message.replace("[", r"\[").replace("]", r"\]")):
        Plan.from_json(p)
    with pytest.raises(PlanError):   # the executor refuses it too (the graph then runs eagerly)
        PlanExecutor(p, torch.device("cpu"))


def test_nonfinite_constants_decode():
    p = _tiny()
    p["values"][4] = {"id": 4, "kind": "constant", "shape": [3], "dtype": "f32", "data": ["nan", "inf", "-inf"]}
    plan = Plan.from_json(p)
    d = plan.values[4].data
    assert d[0] != d[0] and d[1] == float("inf") and d[2] == float("-inf")
    assert plan.to_json()["values"][4]["data"] == ["nan", "inf", "-inf"]


def test_grid_stride_kernels_are_marked():
    """Pointwise kernels loop by the launched grid (gpu.grid_dim), so the plan says any grid up
    to its own is correct (the CUDA runtime fits it to one wave); a row kernel's grid is its
    rows and is not marked."""
    c = core()
    steps = {}
    for name in ("mlp", "layernorm"):
        plan = Plan.from_json(json.loads(c.gpu_compile((ROOT / "test" / "Pipelines" / f"{name}.mlir").read_text())))
        for s in plan.steps:
            if isinstance(s, KernelStep):
                steps.setdefault(s.strategy.split("_")[0], set()).add(s.grid_stride)
    assert steps.get("pointwise") == {True}, steps
    assert steps.get("row") == {False}, steps
    k = {"kind": "kernel", "name": "k", "grid": [8, 1, 1], "block": [32, 1, 1], "args": [], "grid_stride": True}
    assert KernelStep.from_json(k, 0).to_json()["grid_stride"] is True
