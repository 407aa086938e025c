"""Launch plans from the binding's gpu_compile (mlircap_gpu_compile).

Run: pytest test/python/test_plan.py  (the binding is found as mlircap._core finds it:
$MLIRCAP_LIB_DIR, <repo>/build/lib, then the package's _lib/)
"""
import json
import pathlib

import pytest
import torch

from mlircap._core import core
from mlircap.runtime.plan import mark_matmul_bias

_mlircap = core()
ROOT = pathlib.Path(__file__).resolve().parents[2]

PIPELINES = ROOT / "test" / "Pipelines"


def compile_plan(ir):
    return json.loads(_mlircap.gpu_compile(ir))


def model(name):
    # marked as the runtime marks a launch plan's IR (runtime/cuda.py's compile_plan)
    return compile_plan(mark_matmul_bias((PIPELINES / f"{name}.mlir").read_text()))


def kinds(plan):
    return [s["kind"] for s in plan["steps"]]


def kernels(plan):
    return [s for s in plan["steps"] if s["kind"] == "kernel"]


def values(plan):
    return {v["id"]: v for v in plan["values"]}


def check_well_formed(plan):
    vals = values(plan)
    assert sorted(vals) == list(range(len(vals)))
    assert plan["func"] == "main"
    entries = {line.split("(")[0].split()[-1] for line in plan["ptx"].splitlines()
               if ".entry" in line}
    for v in plan["values"]:
        assert v["dtype"] in {"f32", "f16", "bf16", "f64", "i64", "i32", "i16", "i8", "i1"}
        if v["kind"] == "view":
            assert vals[v["of"]]["kind"] != "view"
            assert len(v["strides"]) == len(v["shape"])
        if v["kind"] == "constant":
            n = 1
            for d in v["shape"]:
                n *= d
            assert len(v["data"]) == (1 if v.get("splat") else n)
    defined = {v["id"] for v in plan["values"] if v["kind"] in ("input", "constant")}
    defined |= {v["id"] for v in plan["values"] if v["kind"] == "view"
                and vals[v["of"]]["kind"] in ("input", "constant")}
    for s in plan["steps"]:
        if s["kind"] == "kernel":
            assert s["name"] in entries
            assert s["block"][0] in (32, 64, 128, 256, 512, 1024)
            assert s["grid"][0] >= 1 and s["smem"] == 0
            ids = [a["value"] for a in s["args"]]
        else:
            ids = s["ins"] + [s["out"]]
        for i in ids:
            assert i in vals
    for o in plan["outputs"]:
        assert o in vals


def test_mlp():
    plan = model("mlp")
    check_well_formed(plan)
    # Each Linear's bias is its matmul step's third operand (mlircap-matmul-bias: torch.addmm,
    # eager's call): the second Linear needs no kernel after it.
    assert kinds(plan) == ["library", "kernel", "library"]
    mm = plan["steps"][0]
    assert mm["op"] == "matmul"
    vals = values(plan)
    assert len(mm["ins"]) == 3 and vals[mm["ins"][2]]["kind"] == "constant" and vals[mm["ins"][2]]["shape"] == [32]
    assert plan["outputs"] == [plan["steps"][2]["out"]] and len(plan["steps"][2]["ins"]) == 3
    # x @ W^T: the transposed weight is a strided view of the constant.
    w = vals[mm["ins"][1]]
    assert w["kind"] == "view" and w["shape"] == [16, 32] and w["strides"] == [1, 16]
    assert vals[w["of"]]["kind"] == "constant" and len(vals[w["of"]]["data"]) == 512
    assert vals[mm["out"]]["kind"] == "buffer" and vals[mm["out"]]["shape"] == [8, 32]
    # The ReLU kernel reads the matmul result.
    k0 = kernels(plan)[0]
    assert {"value": mm["out"]} in k0["args"]
    out = vals[plan["outputs"][0]]
    assert out["shape"] == [8, 16] and out["dtype"] == "f32"


def test_softmax_one_row_kernel():
    plan = model("softmax")
    check_well_formed(plan)
    assert kinds(plan) == ["kernel"]
    k = plan["steps"][0]
    assert k["strategy"].startswith("row_")
    vals = values(plan)
    assert [vals[a["value"]]["kind"] for a in k["args"]] == ["input", "buffer"]
    assert plan["outputs"] == [k["args"][-1]["value"]]
    assert "shfl.sync.bfly" in plan["ptx"]


def test_layernorm_and_gelu_mlp():
    plan = model("layernorm")
    check_well_formed(plan)
    assert kinds(plan) == ["kernel"]
    plan = model("gelu_mlp")
    check_well_formed(plan)
    assert kinds(plan) == ["kernel", "library", "kernel", "library", "kernel"]
    assert plan["steps"][0]["strategy"].startswith("row_")


def test_attention_views():
    plan = model("attention")
    check_well_formed(plan)
    assert kinds(plan) == ["library", "kernel", "library"]
    vals = values(plan)
    bmm = plan["steps"][0]
    assert bmm["op"] == "batch_matmul"
    kt = vals[bmm["ins"][1]]
    # k^T with the batch dims collapsed: a view of input 1.
    assert kt["kind"] == "view" and kt["shape"] == [8, 16, 8]
    assert kt["strides"] == [128, 1, 16] and vals[kt["of"]]["index"] == 1
    out = vals[plan["outputs"][0]]
    assert out["kind"] == "view" and out["shape"] == [2, 4, 8, 16]


def test_resblock_conv():
    # NHWC convolutions (mlircap-conv-channels-last, the GPU default)
    plan = model("resblock")
    check_well_formed(plan)
    libs = [s for s in plan["steps"] if s["kind"] == "library"]
    assert [s["op"] for s in libs] == ["conv2d_nhwc_fhwc"] * 2
    assert libs[0]["attrs"] == {"strides": [1, 1], "dilations": [1, 1], "padding": [1, 1]}
    vals = values(plan)
    # the convolutions pad their inputs themselves: the first reads the graph input
    # through a transposed view, the second the bias+relu kernel's NHWC result
    x = vals[libs[0]["ins"][0]]
    assert x["kind"] == "view" and vals[x["of"]]["kind"] == "input" and x["shape"] == [1, 8, 8, 4]
    assert x["strides"] == [256, 8, 1, 64]
    y = vals[libs[1]["ins"][0]]
    assert y["kind"] == "buffer" and y["shape"] == [1, 8, 8, 8]
    assert y["id"] in [a["value"] for a in kernels(plan)[0]["args"]]
    assert len(kernels(plan)) == 2


def test_resblock_conv_nchw():
    from mlircap.runtime.plan import mark_layout

    plan = compile_plan(mark_layout((PIPELINES / "resblock.mlir").read_text(), channels_last=False))
    check_well_formed(plan)
    libs = [s for s in plan["steps"] if s["kind"] == "library"]
    assert [s["op"] for s in libs] == ["conv2d_nchw_fchw"] * 2
    assert libs[0]["attrs"] == {"strides": [1, 1], "dilations": [1, 1], "padding": [1, 1]}
    vals = values(plan)
    assert vals[libs[0]["ins"][0]] == {**vals[libs[0]["ins"][0]], "kind": "input", "shape": [1, 4, 8, 8]}
    assert vals[libs[1]["ins"][0]]["shape"][2:] == [8, 8]
    assert len(kernels(plan)) == 2


def test_meanvar_two_outputs():
    plan = model("meanvar")
    check_well_formed(plan)
    vals = values(plan)
    assert [vals[o]["shape"] for o in plan["outputs"]] == [[32], [8]]
    assert [k["strategy"] for k in kernels(plan)] == ["reduction_naive", "row_subwarp_regs_vec8"]


def test_vec4_alignment_and_splat():
    ir = """
    func.func @main(%x: tensor<1024xf32>) -> tensor<1024xf32> {
      %c = arith.constant dense<2.0> : tensor<1024xf32>
      %e = tensor.empty() : tensor<1024xf32>
      %0 = linalg.generic {indexing_maps = [affine_map<(d0) -> (d0)>, affine_map<(d0) -> (d0)>,
                                            affine_map<(d0) -> (d0)>],
                           iterator_types = ["parallel"]}
          ins(%x, %c : tensor<1024xf32>, tensor<1024xf32>) outs(%e : tensor<1024xf32>) {
      ^bb0(%a: f32, %b: f32, %o: f32):
        %r = arith.mulf %a, %b : f32
        linalg.yield %r : f32
      } -> tensor<1024xf32>
      return %0 : tensor<1024xf32>
    }"""
    plan = compile_plan(ir)
    check_well_formed(plan)
    (k,) = kernels(plan)
    assert k["strategy"] == "pointwise_vec4" and k["align"] == 16
    assert k["block"] == [256, 1, 1] and k["grid"] == [1, 1, 1]
    # The splat constant is folded into the kernel: only x and the output.
    assert len(k["args"]) == 2
    assert "ld.global.v4" in plan["ptx"]


def test_returned_constant_and_input():
    ir = """
    func.func @main(%x: tensor<3xi64>) -> (tensor<3xi64>, tensor<2xf32>, tensor<4xi1>) {
      %c = arith.constant dense<[1.5, -2.0]> : tensor<2xf32>
      %b = arith.constant dense<true> : tensor<4xi1>
      return %x, %c, %b : tensor<3xi64>, tensor<2xf32>, tensor<4xi1>
    }"""
    plan = compile_plan(ir)
    check_well_formed(plan)
    vals = values(plan)
    assert plan["steps"] == []
    a, c, b = (vals[o] for o in plan["outputs"])
    assert a["kind"] == "input" and a["dtype"] == "i64"
    assert c["kind"] == "constant" and c["data"] == [1.5, -2.0]
    assert b["dtype"] == "i1" and b["splat"] is True and b["data"] == [1]


def test_slice_view_into_library():
    ir = """
    func.func @main(%x: tensor<8x16xf32>, %w: tensor<4x8xf32>) -> tensor<4x8xf32> {
      %z = arith.constant 0.0 : f32
      %s = tensor.extract_slice %x[2, 4] [4, 4] [1, 2] : tensor<8x16xf32> to tensor<4x4xf32>
      %w2 = tensor.extract_slice %w[0, 0] [4, 8] [1, 1] : tensor<4x8xf32> to tensor<4x8xf32>
      %e = tensor.empty() : tensor<4x8xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x8xf32>) -> tensor<4x8xf32>
      %m = linalg.matmul ins(%s, %w2 : tensor<4x4xf32>, tensor<4x8xf32>) outs(%f : tensor<4x8xf32>) -> tensor<4x8xf32>
      return %m : tensor<4x8xf32>
    }"""
    plan = compile_plan(ir)
    check_well_formed(plan)
    vals = values(plan)
    (mm,) = plan["steps"]
    a = vals[mm["ins"][0]]
    assert a["kind"] == "view" and a["offset"] == 2 * 16 + 4 and a["strides"] == [16, 2]


def test_non_zero_init_becomes_kernel():
    ir = """
    func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x16xf32>, %c: tensor<4x16xf32>) -> tensor<4x16xf32> {
      %0 = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x16xf32>) outs(%c : tensor<4x16xf32>) -> tensor<4x16xf32>
      return %0 : tensor<4x16xf32>
    }"""
    plan = compile_plan(ir)
    check_well_formed(plan)
    assert kinds(plan) == ["library", "kernel"]
    k = plan["steps"][1]
    assert [a["value"] for a in k["args"]][:2] == [plan["steps"][0]["out"], 2]


def test_error_names_op_and_location():
    ir = """
    func.func @main(%x: tensor<8xf32>, %i: tensor<4x1xi64>) -> tensor<4xf32> {
      %g = tensor.gather %x[%i] gather_dims([0]) unique : (tensor<8xf32>, tensor<4x1xi64>) -> tensor<4xf32>
      return %g : tensor<4xf32>
    }"""
    with pytest.raises(RuntimeError) as err:
        _mlircap.gpu_compile(ir)
    msg = str(err.value)
    assert "tensor.gather" in msg
    assert ":3:" in msg  # line of the op


def test_chip_option():
    plan = json.loads(_mlircap.gpu_compile((PIPELINES / "softmax.mlir").read_text(), "sm_80", "+ptx75"))
    assert ".target sm_80" in plan["ptx"]


def test_fill_shared_by_library_init_and_result():
    ir = """
    func.func @main(%a: tensor<4x8xf32>, %b: tensor<8x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
      %z = arith.constant 0.0 : f32
      %e = tensor.empty() : tensor<4x4xf32>
      %f = linalg.fill ins(%z : f32) outs(%e : tensor<4x4xf32>) -> tensor<4x4xf32>
      %m = linalg.matmul ins(%a, %b : tensor<4x8xf32>, tensor<8x4xf32>) outs(%f : tensor<4x4xf32>) -> tensor<4x4xf32>
      return %m, %f : tensor<4x4xf32>, tensor<4x4xf32>
    }"""
    plan = compile_plan(ir)
    check_well_formed(plan)
    assert sorted(kinds(plan)) == ["kernel", "library"]


def test_library_matmuls_write_into_their_buffer():
    # Every matmul variant runs through its out= form into the plan's buffer
    # (no result tensor copied in); values as torch's.
    import torch

    from mlircap.runtime.plan import PlanExecutor

    a, b, c = torch.randn(5, 7), torch.randn(3, 7), torch.randn(7, 3)
    ba, bb = torch.randn(2, 5, 7), torch.randn(2, 3, 7)
    cases = {"matmul": ((a, c), a @ c), "matmul_transpose_b": ((a, b), a @ b.t()),
             "matmul_transpose_a": ((a.t().contiguous(), c), a @ c),
             "batch_matmul": ((ba, bb.transpose(1, 2).contiguous()), ba @ bb.transpose(1, 2)),
             "batch_matmul_transpose_b": ((ba, bb), ba @ bb.transpose(1, 2))}
    for op, ((x, y), ref) in cases.items():
        plan = {"values": [{"id": 0, "kind": "input", "index": 0, "shape": list(x.shape), "dtype": "f32"},
                           {"id": 1, "kind": "input", "index": 1, "shape": list(y.shape), "dtype": "f32"},
                           {"id": 2, "kind": "buffer", "shape": list(ref.shape), "dtype": "f32"}],
                "steps": [{"kind": "library", "op": op, "ins": [0, 1], "out": 2}], "outputs": [2]}
        ex = PlanExecutor(plan, torch.device("cpu"))
        t = ex._materialize(ex._prepare_inputs([x, y]))
        buf = t[2]
        ex._run_library(ex.plan.steps[0], t)
        assert t[2] is buf
        torch.testing.assert_close(buf, ref, rtol=1e-5, atol=1e-5)


def test_nan_and_infinite_constants():
    """NaN/inf constants travel as strings in the plan's JSON (no JSON literal for
    them); before, the plan failed to parse and the graph ran eagerly."""
    import mlircap

    def f(x):
        c = torch.tensor([float("nan"), float("inf"), -float("inf"), 1.5])
        return x * c, torch.full((3,), float("inf")), x + 1

    x = torch.randn(4)
    fast = mlircap.compile(f)
    for got, want in zip(fast(x), f(x)):
        torch.testing.assert_close(got, want, equal_nan=True)
    (g,) = fast.graphs
    assert g.fallback_reason is None and hasattr(g.executable, "plan")
    wire = g.executable.plan.to_json()
    consts = [v["data"] for v in wire["values"] if v["kind"] == "constant"]
    assert ["nan", "inf", "-inf", 1.5] in consts
