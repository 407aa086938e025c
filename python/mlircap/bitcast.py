"""view(dtype) in compiled code: a reinterpretation of bits, as linalg.

torch-mlir imports `x.view(dtype)` as `torch.aten.view.dtype` but has no lowering for
it (the op ran through torch as an eager island: 'aten.view ... torch-mlir cannot lower
it'), and its torch dialect has no bitcast to decompose it into. `lower_view_dtype`
rewrites each such op of the raw torch IR, before torch-mlir's pipelines, into builtin
tensor code between `torch_c.to_builtin_tensor` / `torch_c.from_builtin_tensor` (which
torch-mlir's lowering keeps, as it does its own ops' conversions):

* the same element size (float32 <-> int32, bfloat16 / float16 <-> int16, float64 <->
  int64, bfloat16 <-> float16, int8 <-> uint8 <- bool): one elementwise `arith.bitcast`
  (bool's bytes are 0 / 1: zero-extended);
* a smaller element (float32 -> int16 / bfloat16 / int8, ...): each element's r
  = size / new size parts, little-endian as eager's memory (part k is bits
  [k * w, (k + 1) * w)), the last dim r times longer: a (..., n, r) result collapsed
  into (..., n * r);
* a larger element (int16 -> float32, int8 -> int64, ...): the last dim's groups of r
  (expanded to (..., n, r)) joined, part k shifted left by k * w.

Only static shapes and real dtypes; a result of bool (bytes other than 0 / 1 are no
bool), of a complex dtype or with a dynamic dim is left as it was (still an island).
Eager's own checks (the last dim's stride 1, its size divisible by r, no 0-d input to
another size) ran when the graph was traced: a value of the graph is its logical
elements, and the parts of one element are neighbours in its last dim in any layout
eager accepts.
"""
from __future__ import annotations

import re

# torch-mlir element type -> (builtin element type, bits, float?)
_TYPES = {
    "f64": ("f64", 64, True), "f32": ("f32", 32, True), "bf16": ("bf16", 16, True),
    "f16": ("f16", 16, True), "si64": ("i64", 64, False), "si32": ("i32", 32, False),
    "si16": ("i16", 16, False), "si8": ("i8", 8, False), "ui8": ("i8", 8, False),
    "i1": ("i1", 8, False),
}

_VIEW_DTYPE = re.compile(
    r"^(?P<indent>\s*)(?P<res>%[\w.$-]+) = torch\.aten\.view\.dtype (?P<src>%[\w.$-]+), %[\w.$-]+ : "
    r"!torch\.vtensor<\[(?P<sshape>[\d,]*)\],(?P<stype>\w+)>, !torch\.int -> "
    r"!torch\.vtensor<\[(?P<dshape>[\d,]*)\],(?P<dtype>\w+)>(?P<loc> loc\(.*\))?$")


def _tensor(shape: list[int], elt: str) -> str:
    return f"tensor<{''.join(f'{d}x' for d in shape)}{elt}>"


def _vtensor(shape: list[int], elt: str) -> str:
    return f"!torch.vtensor<[{','.join(str(d) for d in shape)}],{elt}>"


def _map(rank: int, results: list[str]) -> str:
    dims = ", ".join(f"d{i}" for i in range(rank))
    return f"affine_map<({dims}) -> ({', '.join(results)})>"


def _rewrite(m: re.Match, uid: str) -> list[str] | None:
    """The builtin code of one view.dtype, or None to leave it."""
    stype, dtype = m["stype"], m["dtype"]
    if stype not in _TYPES or dtype not in _TYPES or dtype == "i1":
        return None
    sshape = [int(d) for d in m["sshape"].split(",")] if m["sshape"] else []
    dshape = [int(d) for d in m["dshape"].split(",")] if m["dshape"] else []
    (selt, sbits, sfloat), (delt, dbits, dfloat) = _TYPES[stype], _TYPES[dtype]
    ind, loc = m["indent"], m["loc"] or ""
    v = f"%mlircap_bc{uid}"
    lines = [f"{ind}{v}_in = torch_c.to_builtin_tensor {m['src']} : {_vtensor(sshape, stype)} -> "
             f"{_tensor(sshape, selt)}{loc}"]
    src = f"{v}_in"

    def as_int(val: str, elt: str, bits: int, is_float: bool, body: list[str], name: str) -> str:
        """`val` of builtin type `elt` as an integer of `bits` bits."""
        if elt == "i1":
            body.append(f"{name} = arith.extui {val} : i1 to i8")
            return name
        if is_float:
            body.append(f"{name} = arith.bitcast {val} : {elt} to i{bits}")
            return name
        return val

    def from_int(val: str, body: list[str]) -> str:
        if dfloat:
            body.append(f"%r = arith.bitcast {val} : i{dbits} to {delt}")
            return "%r"
        return val

    par = '"parallel"'
    if sbits == dbits:
        if sshape != dshape:
            return None
        rank = len(dshape)
        body: list[str] = []
        res = from_int(as_int("%a", selt, sbits, sfloat, body, "%i"), body)
        ident = _map(rank, [f"d{i}" for i in range(rank)])
        lines += [
            f"{ind}{v}_e = tensor.empty() : {_tensor(dshape, delt)}{loc}",
            f"{ind}{v}_g = linalg.generic {{indexing_maps = [{ident}, {ident}], iterator_types = "
            f"[{', '.join([par] * rank)}]}} ins({src} : {_tensor(sshape, selt)}) outs({v}_e : "
            f"{_tensor(dshape, delt)}) {{",
            f"{ind}^bb0(%a: {selt}, %o: {delt}):",
            *(f"{ind}  {b}" for b in body),
            f"{ind}  linalg.yield {res} : {delt}",
            f"{ind}}} -> {_tensor(dshape, delt)}{loc}",
        ]
        out = f"{v}_g"
    elif sbits > dbits:
        r = sbits // dbits
        if not sshape or dshape != sshape[:-1] + [sshape[-1] * r]:
            return None
        rank = len(sshape) + 1
        wide = sshape + [r]
        body = []
        i = as_int("%a", selt, sbits, sfloat, body, "%i")
        body += [f"%k = linalg.index {rank - 1} : index",
                 f"%k64 = arith.index_cast %k : index to i{sbits}",
                 f"%w = arith.constant {dbits} : i{sbits}",
                 f"%sh = arith.muli %k64, %w : i{sbits}",
                 f"%s = arith.shrui {i}, %sh : i{sbits}",
                 f"%t = arith.trunci %s : i{sbits} to i{dbits}"]
        res = from_int("%t", body)
        lines += [
            f"{ind}{v}_e = tensor.empty() : {_tensor(wide, delt)}{loc}",
            f"{ind}{v}_g = linalg.generic {{indexing_maps = [{_map(rank, [f'd{j}' for j in range(rank - 1)])}, "
            f"{_map(rank, [f'd{j}' for j in range(rank)])}], iterator_types = [{', '.join([par] * rank)}]}} "
            f"ins({src} : {_tensor(sshape, selt)}) outs({v}_e : {_tensor(wide, delt)}) {{",
            f"{ind}^bb0(%a: {selt}, %o: {delt}):",
            *(f"{ind}  {b}" for b in body),
            f"{ind}  linalg.yield {res} : {delt}",
            f"{ind}}} -> {_tensor(wide, delt)}{loc}",
        ]
        groups = [[j] for j in range(rank - 2)] + [[rank - 2, rank - 1]]
        lines.append(f"{ind}{v}_c = tensor.collapse_shape {v}_g {groups} : {_tensor(wide, delt)} into "
                     f"{_tensor(dshape, delt)}{loc}")
        out = f"{v}_c"
    else:
        r = dbits // sbits
        if not sshape or not dshape or sshape != dshape[:-1] + [dshape[-1] * r]:
            return None
        rank = len(dshape)
        grouped = dshape + [r]
        groups = [[j] for j in range(rank - 1)] + [[rank - 1, rank]]
        lines.append(f"{ind}{v}_x = tensor.expand_shape {src} {groups} output_shape "
                     f"[{', '.join(str(d) for d in grouped)}] : {_tensor(sshape, selt)} into "
                     f"{_tensor(grouped, selt)}{loc}")
        body = []
        acc = None
        for k in range(r):
            i = as_int(f"%a{k}", selt, sbits, sfloat, body, f"%i{k}")
            body.append(f"%z{k} = arith.extui {i} : i{sbits} to i{dbits}")
            part = f"%z{k}"
            if k:
                body += [f"%c{k} = arith.constant {k * sbits} : i{dbits}",
                         f"%p{k} = arith.shli %z{k}, %c{k} : i{dbits}"]
                part = f"%p{k}"
            if acc is None:
                acc = part
            else:
                body.append(f"%o{k} = arith.ori {acc}, {part} : i{dbits}")
                acc = f"%o{k}"
        res = from_int(acc, body)
        ins_maps = [_map(rank, [f"d{j}" for j in range(rank)] + [str(k)]) for k in range(r)]
        ident = _map(rank, [f"d{j}" for j in range(rank)])
        lines += [
            f"{ind}{v}_e = tensor.empty() : {_tensor(dshape, delt)}{loc}",
            f"{ind}{v}_g = linalg.generic {{indexing_maps = [{', '.join(ins_maps)}, {ident}], iterator_types = "
            f"[{', '.join([par] * rank)}]}} ins({', '.join([f'{v}_x'] * r)} : "
            f"{', '.join([_tensor(grouped, selt)] * r)}) outs({v}_e : {_tensor(dshape, delt)}) {{",
            f"{ind}^bb0({', '.join(f'%a{k}: {selt}' for k in range(r))}, %o: {delt}):",
            *(f"{ind}  {b}" for b in body),
            f"{ind}  linalg.yield {res} : {delt}",
            f"{ind}}} -> {_tensor(dshape, delt)}{loc}",
        ]
        out = f"{v}_g"
    lines.append(f"{ind}{m['res']} = torch_c.from_builtin_tensor {out} : {_tensor(dshape, delt)} -> "
                 f"{_vtensor(dshape, dtype)}{loc}")
    return lines


def lower_view_dtype(raw_ir: str) -> str:
    """`raw_ir` (torch-mlir's FX import, as text) with each torch.aten.view.dtype it can
    express rewritten as builtin tensor code (module docstring)."""
    if "torch.aten.view.dtype" not in raw_ir:
        return raw_ir
    out = []
    for n, line in enumerate(raw_ir.split("\n")):
        m = _VIEW_DTYPE.match(line) if "torch.aten.view.dtype" in line else None
        new = _rewrite(m, str(n)) if m else None
        out.extend(new if new is not None else [line])
    return "\n".join(out)


def parse(text: str, ctx):
    """`text` (lower_view_dtype's) parsed in `ctx`: where it has builtin code, the
    dialects of that code (torch_c, linalg, tensor, arith) are loaded first, as a pass
    pipeline's run loads the dialects its passes make (convert-torch-to-linalg's, run
    on an empty module)."""
    from torch_mlir import ir
    from torch_mlir.passmanager import PassManager

    if "%mlircap_bc" in text:
        with ctx:
            PassManager.parse("builtin.module(func.func(convert-torch-to-linalg))").run(
                ir.Module.parse("module {}").operation)
    return ir.Module.parse(text, ctx)
