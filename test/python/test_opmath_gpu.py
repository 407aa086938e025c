"""Which low-precision ops the GPU path computes in float32 (opmath.gpu_computes_in_float32),
checked on the CPU: torch-mlir's lowering of each op kept in bfloat16 has at most one rounding
step (a census of the lowered IR), and erf-GELU in bfloat16, run through the GPU launch plan in
the SIMT interpreter (simt.py), matches eager only once rewritten (OpInfo on an H100: 22 of 100
elements were up to 0.31 off relative to eager's)."""
import json
import re

import pytest
import simt  # test/python/simt.py
import torch
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

from mlircap import frontend, opmath
from mlircap._core import core, tool_path

aten = torch.ops.aten

# one call of every op in opmath._ROUNDS_ONCE (a: any values, b: positive)
CALLS = {
    "add": lambda a, b: a + b, "sub": lambda a, b: a - b, "rsub": lambda a, b: 1 - a, "mul": lambda a, b: a * b,
    "div": lambda a, b: a / b, "neg": lambda a, b: -a, "abs": lambda a, b: a.abs(), "relu": lambda a, b: a.relu(),
    "maximum": lambda a, b: torch.maximum(a, b), "minimum": lambda a, b: torch.minimum(a, b),
    "fmax": lambda a, b: torch.fmax(a, b), "fmin": lambda a, b: torch.fmin(a, b), "clamp": lambda a, b: a.clamp(-1, 1),
    "clamp_min": lambda a, b: a.clamp_min(0.5), "clamp_max": lambda a, b: a.clamp_max(0.5),
    "hardtanh": lambda a, b: F.hardtanh(a), "relu6": lambda a, b: F.relu6(a),
    "threshold": lambda a, b: F.threshold(a, 0.1, 2.0),
    "where": lambda a, b: torch.where(a > 0, a, b), "sign": lambda a, b: a.sign(), "floor": lambda a, b: a.floor(),
    "ceil": lambda a, b: a.ceil(), "round": lambda a, b: a.round(), "trunc": lambda a, b: a.trunc(),
    "exp": lambda a, b: a.exp(), "exp2": lambda a, b: a.exp2(), "expm1": lambda a, b: a.expm1(),
    "log": lambda a, b: b.log(), "log2": lambda a, b: b.log2(), "log1p": lambda a, b: b.log1p(),
    "sqrt": lambda a, b: b.sqrt(), "rsqrt": lambda a, b: b.rsqrt(), "reciprocal": lambda a, b: b.reciprocal(),
    "sin": lambda a, b: a.sin(), "cos": lambda a, b: a.cos(), "tan": lambda a, b: a.tan(),
    "tanh": lambda a, b: a.tanh(), "sinh": lambda a, b: a.sinh(), "atan": lambda a, b: a.atan(),
    "erf": lambda a, b: a.erf(), "pow": lambda a, b: b.pow(a), "square": lambda a, b: a.square(),
}
# ops lowered in several rounding steps: computed in float32 on the GPU
COMPOSITE = {
    "gelu": lambda a, b: F.gelu(a), "gelu_tanh": lambda a, b: F.gelu(a, approximate="tanh"),
    "sigmoid": lambda a, b: a.sigmoid(), "silu": lambda a, b: F.silu(a), "softplus": lambda a, b: F.softplus(a),
    "mish": lambda a, b: F.mish(a), "elu": lambda a, b: F.elu(a), "hardswish": lambda a, b: F.hardswish(a),
    "leaky_relu": lambda a, b: F.leaky_relu(a, 0.1), "lerp": lambda a, b: torch.lerp(a, b, 0.3), "add_alpha": lambda a, b: torch.add(a, b, alpha=3),
    "addcmul": lambda a, b: torch.addcmul(a, a, b), "logaddexp": lambda a, b: torch.logaddexp(a, b),
}

_ROUNDING = re.compile(r"= (arith\.(addf|subf|mulf|divf|remf|truncf|sitofp|uitofp)|math\.(?!absf\b|copysign\b|floor\b|"
                       r"ceil\b|roundeven\b|round\b|trunc\b)\w+) (?!%cst)")


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(4, 8, generator=g).to(torch.bfloat16)
    return a, a.abs() + 0.5


def _roundings(fn) -> int:
    """Arithmetic steps of the lowered IR that round to bfloat16 (not of a constant)."""
    ir = frontend.import_graph(make_fx(fn)(*_inputs())).linalg_ir
    return sum(1 for line in ir.splitlines()
               if _ROUNDING.search(line) and re.search(r"(: bf16|to bf16)\s*$", line.strip()))


def _nodes(fn):
    return [n for n in make_fx(fn)(*_inputs()).graph.nodes if n.op == "call_function"]


def test_every_op_kept_in_bfloat16_has_a_census_call():
    assert {opmath.op_name(n.target) for fn in CALLS.values() for n in _nodes(fn)
            if opmath._low(n.meta.get("val"))} <= opmath._ROUNDS_ONCE
    assert {f"aten::{k}" for k in CALLS} == opmath._ROUNDS_ONCE


@pytest.mark.parametrize("name", sorted(CALLS))
def test_ops_kept_in_bfloat16_round_once(name):
    assert _roundings(CALLS[name]) <= 1
    assert not any(opmath.gpu_computes_in_float32(n) for n in _nodes(CALLS[name]))


@pytest.mark.parametrize("name", sorted(COMPOSITE))
def test_composite_ops_compute_in_float32(name):
    assert _roundings(COMPOSITE[name]) > 1   # why: rounded at each step when left in bfloat16
    assert any(opmath.gpu_computes_in_float32(n) for n in _nodes(COMPOSITE[name]))


def _gelu_plan_output(gm, x):
    ir = frontend.import_graph(gm).linalg_ir
    plan = json.loads(core().gpu_compile(ir))
    _, _, kernels = simt.load_kernels(str(tool_path("mlircap-opt")), ir)
    return simt.run_plan(plan, kernels, [x])[0]


def test_erf_gelu_in_bfloat16_matches_eager_through_the_gpu_plan():
    x = torch.linspace(-9, 9, 200).to(torch.bfloat16)
    want = F.gelu(x)   # float32, rounded once
    gm = make_fx(lambda x: F.gelu(x))(x)   # aten.gelu kept whole in bfloat16
    before = _gelu_plan_output(gm, x)
    close = lambda got: torch.isclose(got.double(), want.double(), rtol=1.6e-2, atol=1e-5)  # noqa: E731
    assert not close(before).all()   # each step rounded to bfloat16
    new = opmath.compute_in_float32(gm, only=opmath.gpu_computes_in_float32, rounded_numbers=False)
    assert new is not None
    after = _gelu_plan_output(new, x)
    assert close(after).all()
    assert (after.double() - want.double()).abs().max() <= (want.double().abs() * 2 ** -8).max()
