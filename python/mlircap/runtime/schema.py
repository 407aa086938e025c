"""The launch-plan contract between the compiler core and the runtime.

The core (lib/CAPI/LaunchPlan.cpp) writes a plan as JSON; `Plan.from_json`
checks every field and cross-reference and returns typed, immutable records,
which the executors (plan.py, cpu.py, cuda.py) read by attribute.  A plan that
breaks the contract (a builder bug, a foreign or damaged cache entry) raises
`PlanError` here, before anything runs, and the graph runs eagerly instead.

Wire format (JSON):

    {"func": "main",
     "ptx": "...",                                   (the kernels' PTX; "" on the CPU)
     "values": [Value, ...],                         value i has "id": i
     "steps": [KernelStep | LibraryStep, ...],       run in order
     "outputs": [value id, ...]}

    Value       {"id", "kind", "shape": [int], "dtype": "f32"|"bf16"|..., ...}
      input     "index": the graph argument it is
      buffer    written by a kernel or library step; allocated per call
      view      "of": a non-view value, "strides": [int], "offset": elements
      constant  "data": [number | "nan" | "inf" | "-inf" | "-0.0"], "splat": true when one
                element fills the shape
    KernelStep  {"kind": "kernel", "name", "grid": [3], "block": [3], "smem",
                 "args": [{"value": id} | {"i64": n}], "strategy"?, "align"?, "grid_stride"?}
                "grid_stride": true when the kernel's loops stride by the launched grid,
                so any grid from 1 to "grid" is correct (the runtime fits it to one wave)
    LibraryStep {"kind": "library", "op", "ins": [id], "out": id, "attrs"?}
      conv2d_nchw_fchw, conv2d_depthwise_nchw_chw (ins [input, weight (C, kh, kw)]),
      conv2d_nhwc_fhwc (ins [input (N, H, W, C), weight (F, kh, kw, C)]; GPU),
      conv2d_depthwise_nhwc_hwc (ins [input (N, H, W, C), weight (kh, kw, C)]; GPU)
      a convolution's ins may end with its 1-D bias (CPU plans), which the library adds
      attrs: "strides", "dilations", "padding" (the input's zero padding,
      applied by the convolution)
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Union

import torch


class PlanError(RuntimeError):
    pass


DTYPES: dict[str, torch.dtype] = {
    "f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8, "i1": torch.bool,
    "ui8": torch.uint8,
}
VALUE_KINDS = ("input", "buffer", "view", "constant")
# numbers JSON cannot write: non-finite values, and -0.0 (a JSON -0 reads as the integer 0)
_NONFINITE = {"nan": math.nan, "inf": math.inf, "-inf": -math.inf, "-0.0": -0.0}


def _int(x: Any, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise PlanError(f"launch plan: {what} must be an integer, got {x!r}")
    return x


def _ints(x: Any, what: str, n: int | None = None) -> tuple[int, ...]:
    if not isinstance(x, list) or (n is not None and len(x) != n):
        raise PlanError(f"launch plan: {what} must be a list of {n or 'any number of'} integers, got {x!r}")
    return tuple(_int(e, what) for e in x)


def _keys(obj: Any, what: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(obj, dict):
        raise PlanError(f"launch plan: {what} must be an object, got {type(obj).__name__}")
    missing = [k for k in required if k not in obj]
    unknown = [k for k in obj if k not in required and k not in optional]
    if missing or unknown:
        raise PlanError(f"launch plan: {what} " + "; ".join(
            p for p in (f"lacks {missing}" if missing else "", f"has unknown keys {unknown}" if unknown else "") if p))
    return obj


@dataclass(frozen=True, slots=True)
class Value:
    id: int
    kind: str
    shape: tuple[int, ...]
    dtype: str
    index: int | None = None                  # input: the graph argument
    of: int | None = None                     # view: the (non-view) value it views
    strides: tuple[int, ...] | None = None    # view
    offset: int = 0                           # view: in elements
    data: tuple[float | int, ...] | None = None   # constant
    splat: bool = False                       # constant: one element fills the shape

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def numel(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.numel * self.torch_dtype.itemsize

    @staticmethod
    def from_json(o: Any, i: int) -> Value:
        what = f"value {i}"
        kind = o.get("kind") if isinstance(o, dict) else None
        extra = {"input": ("index",), "view": ("of", "strides", "offset"),
                 "constant": ("data", "splat")}.get(kind, ())
        _keys(o, what, ("id", "kind", "shape", "dtype"), extra)
        if kind not in VALUE_KINDS:
            raise PlanError(f"launch plan: {what} has unknown kind {kind!r}")
        if o["id"] != i:
            raise PlanError(f"launch plan: {what} has id {o['id']!r} (ids are positions)")
        if o["dtype"] not in DTYPES:
            raise PlanError(f"launch plan: {what} has unknown dtype {o['dtype']!r}")
        shape = _ints(o["shape"], f"{what} shape")
        if any(d < 0 for d in shape):
            raise PlanError(f"launch plan: {what} has a negative dimension {shape}")
        v = Value(id=i, kind=kind, shape=shape, dtype=o["dtype"])
        if kind == "input":
            return Value(i, kind, shape, v.dtype, index=_int(o.get("index"), f"{what} index"))
        if kind == "view":
            strides = _ints(o.get("strides"), f"{what} strides", len(shape))
            return Value(i, kind, shape, v.dtype, of=_int(o.get("of"), f"{what} of"), strides=strides,
                         offset=_int(o.get("offset", 0), f"{what} offset"))
        if kind == "constant":
            data = o.get("data")
            if not isinstance(data, list) or not all(
                    isinstance(x, (int, float)) and not isinstance(x, bool) or x in _NONFINITE for x in data):
                raise PlanError(f"launch plan: {what} data must be a list of numbers")
            splat = o.get("splat", False)
            if splat is not True and splat is not False:
                raise PlanError(f"launch plan: {what} splat must be a boolean")
            n = 1 if splat else v.numel
            if len(data) != n:
                raise PlanError(f"launch plan: {what} has {len(data)} data elements for shape {shape}")
            return Value(i, kind, shape, v.dtype, data=tuple(_NONFINITE.get(x, x) if isinstance(x, str) else x
                                                              for x in data), splat=splat)
        return v

    def to_json(self) -> dict:
        o: dict[str, Any] = {"id": self.id, "kind": self.kind, "shape": list(self.shape), "dtype": self.dtype}
        if self.kind == "input":
            o["index"] = self.index
        elif self.kind == "view":
            o.update(of=self.of, strides=list(self.strides or ()), offset=self.offset)
        elif self.kind == "constant":
            o["data"] = [("nan" if math.isnan(x) else "inf" if x > 0 else "-inf")
                         if isinstance(x, float) and not math.isfinite(x) else x for x in self.data or ()]
            if self.splat:
                o["splat"] = True
        return o


@dataclass(frozen=True, slots=True)
class KernelArg:
    """A kernel argument: a value's buffer (`value`) or an immediate i64."""
    value: int | None = None
    i64: int | None = None


@dataclass(frozen=True, slots=True)
class KernelStep:
    name: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    args: tuple[KernelArg, ...]
    smem: int = 0
    strategy: str = "kernel"
    align: int | None = None
    grid_stride: bool = False
    kind: str = field(default="kernel", init=False)

    @property
    def value_args(self) -> tuple[int, ...]:
        return tuple(a.value for a in self.args if a.value is not None)

    @staticmethod
    def from_json(o: dict, i: int) -> KernelStep:
        what = f"step {i} (kernel)"
        _keys(o, what, ("kind", "name", "grid", "block", "args"), ("smem", "strategy", "align", "grid_stride"))
        if not isinstance(o["name"], str) or not o["name"]:
            raise PlanError(f"launch plan: {what} has no kernel name")
        args = []
        if not isinstance(o["args"], list):
            raise PlanError(f"launch plan: {what} args must be a list")
        for a in o["args"]:
            if isinstance(a, dict) and set(a) == {"value"}:
                args.append(KernelArg(value=_int(a["value"], f"{what} argument")))
            elif isinstance(a, dict) and set(a) == {"i64"}:
                args.append(KernelArg(i64=_int(a["i64"], f"{what} argument")))
            else:
                raise PlanError(f"launch plan: {what} has a bad argument {a!r}")
        strategy = o.get("strategy", "kernel")
        if not isinstance(strategy, str):
            raise PlanError(f"launch plan: {what} strategy must be a string")
        align = o.get("align")
        grid_stride = o.get("grid_stride", False)
        if not isinstance(grid_stride, bool):
            raise PlanError(f"launch plan: {what} grid_stride must be a boolean")
        return KernelStep(name=o["name"], grid=_ints(o["grid"], f"{what} grid", 3),
                          block=_ints(o["block"], f"{what} block", 3), args=tuple(args),
                          smem=_int(o.get("smem", 0), f"{what} smem"), strategy=strategy,
                          align=None if align is None else _int(align, f"{what} align"), grid_stride=grid_stride)

    def to_json(self) -> dict:
        o: dict[str, Any] = {"kind": "kernel", "name": self.name, "grid": list(self.grid),
                             "block": list(self.block), "smem": self.smem,
                             "args": [{"value": a.value} if a.value is not None else {"i64": a.i64}
                                      for a in self.args]}
        if self.strategy != "kernel":
            o["strategy"] = self.strategy
        if self.align is not None:
            o["align"] = self.align
        if self.grid_stride:
            o["grid_stride"] = True
        return o


@dataclass(frozen=True, slots=True)
class LibraryStep:
    op: str
    ins: tuple[int, ...]
    out: int
    strides: tuple[int, ...] | None = None     # convolutions
    dilations: tuple[int, ...] | None = None
    padding: tuple[int, ...] | None = None
    kind: str = field(default="library", init=False)

    @staticmethod
    def from_json(o: dict, i: int) -> LibraryStep:
        what = f"step {i} (library)"
        _keys(o, what, ("kind", "op", "ins", "out"), ("attrs",))
        if not isinstance(o["op"], str):
            raise PlanError(f"launch plan: {what} op must be a string")
        attrs = _keys(o.get("attrs", {}), f"{what} attrs", (), ("strides", "dilations", "padding"))
        get = {k: _ints(attrs[k], f"{what} {k}") if k in attrs else None for k in ("strides", "dilations", "padding")}
        return LibraryStep(op=o["op"], ins=_ints(o["ins"], f"{what} ins"), out=_int(o["out"], f"{what} out"), **get)

    def to_json(self) -> dict:
        attrs = {k: list(getattr(self, k)) for k in ("strides", "dilations", "padding") if getattr(self, k) is not None}
        o: dict[str, Any] = {"kind": "library", "op": self.op, "ins": list(self.ins), "out": self.out}
        if attrs:
            o["attrs"] = attrs
        return o


Step = Union[KernelStep, LibraryStep]


@dataclass(frozen=True, slots=True)
class Plan:
    values: tuple[Value, ...]         # values[i].id == i
    steps: tuple[Step, ...]
    outputs: tuple[int, ...]
    func: str = "main"
    ptx: str | None = None

    @property
    def kernels(self) -> tuple[KernelStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, KernelStep))

    @property
    def library_steps(self) -> tuple[LibraryStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, LibraryStep))

    def of_kind(self, kind: str) -> list[Value]:
        return [v for v in self.values if v.kind == kind]

    def base_of(self, vid: int) -> int:
        """The non-view value that `vid` is a view of (`vid` itself if not a view)."""
        v = self.values[vid]
        return v.of if v.kind == "view" else vid

    @staticmethod
    def from_json(o: Any) -> Plan:
        """Checks the whole contract; raises PlanError naming the first violation."""
        _keys(o, "plan", ("values", "steps", "outputs"), ("func", "ptx"))
        if not isinstance(o["values"], list) or not isinstance(o["steps"], list):
            raise PlanError("launch plan: values and steps must be lists")
        values = tuple(Value.from_json(v, i) for i, v in enumerate(o["values"]))
        steps: list[Step] = []
        for i, s in enumerate(o["steps"]):
            kind = s.get("kind") if isinstance(s, dict) else None
            if kind == "kernel":
                steps.append(KernelStep.from_json(s, i))
            elif kind == "library":
                steps.append(LibraryStep.from_json(s, i))
            else:
                raise PlanError(f"launch plan: step {i} has unknown kind {kind!r}")
        ptx = o.get("ptx")
        if ptx is not None and not isinstance(ptx, str):
            raise PlanError("launch plan: ptx must be a string")
        func = o.get("func", "main")
        if not isinstance(func, str):
            raise PlanError("launch plan: func must be a string")
        plan = Plan(values=values, steps=tuple(steps), outputs=_ints(o["outputs"], "outputs"), func=func, ptx=ptx)
        plan._check_references()
        return plan

    def _check_references(self) -> None:
        n = len(self.values)

        def ref(vid: int, what: str) -> Value:
            if not 0 <= vid < n:
                raise PlanError(f"launch plan: {what} refers to value {vid}, which does not exist")
            return self.values[vid]

        indices = sorted(v.index for v in self.values if v.kind == "input")
        if indices != list(range(len(indices))):
            raise PlanError(f"launch plan: input indices {indices} are not 0..{len(indices) - 1}")
        for v in self.values:
            if v.kind == "view":
                base = ref(v.of, f"view {v.id}")
                if base.kind == "view" or base.id == v.id:
                    raise PlanError(f"launch plan: view {v.id} must view a non-view value, not {base.id}")
                if base.dtype != v.dtype:
                    raise PlanError(f"launch plan: view {v.id} is {v.dtype}, its base {base.id} {base.dtype}")
                if v.numel and (v.offset < 0 or any(s < 0 for s in v.strides or ()) or
                                v.offset + sum((d - 1) * s for d, s in zip(v.shape, v.strides or ())) >= base.numel):
                    raise PlanError(f"launch plan: view {v.id} reaches outside value {base.id}")
        for i, s in enumerate(self.steps):
            if isinstance(s, KernelStep):
                for vid in s.value_args:
                    ref(vid, f"step {i} ({s.name})")
            else:
                for vid in s.ins:
                    ref(vid, f"step {i} ({s.op})")
                if ref(s.out, f"step {i} ({s.op}) out").kind == "input":
                    raise PlanError(f"launch plan: step {i} ({s.op}) writes an input")
        for o in self.outputs:
            ref(o, "outputs")

    def to_json(self) -> dict:
        o: dict[str, Any] = {"func": self.func, "values": [v.to_json() for v in self.values],
                             "steps": [s.to_json() for s in self.steps], "outputs": list(self.outputs)}
        if self.ptx is not None:
            o["ptx"] = self.ptx
        return o
