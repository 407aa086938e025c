"""A small SIMT interpreter for mlircap's generated gpu.func kernels, and an
executor for launch plans built on it, so plans can be checked numerically on
a machine without a GPU.

The kernels are read from `mlircap-opt --mlircap-gpu-fuse --mlircap-gpu-codegen`
output in generic form (parsed with torch_mlir's MLIR bindings). A block runs
in lockstep: every SSA value is a torch tensor with one element per thread,
control flow is masked, so gpu.shuffle and gpu.barrier behave as on the GPU
(every lane takes part in shuffles in mlircap's kernels).
"""
import subprocess

import torch
from torch_mlir import ir

DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16,
          "f64": torch.float64, "i64": torch.int64, "i32": torch.int32,
          "i16": torch.int16, "i8": torch.int8, "i1": torch.bool}


def torch_dtype(t):
    s = str(t)
    if s.startswith("vector<"):
        s = s[:-1].split("x")[-1]
    if s == "index":
        return torch.int64
    if s == "i1":
        return torch.bool
    return DTYPES[s]


def int_bits(t):
    return {torch.int64: 64, torch.int32: 32, torch.int16: 16, torch.int8: 8,
            torch.bool: 1}[t]


def unsigned(x):
    """Nonnegative int64 view for unsigned compares of narrow ints/index."""
    if x.dtype == torch.bool:
        return x.to(torch.int64)
    if x.dtype == torch.int64:
        # Order-preserving map of unsigned 64-bit values onto signed ones.
        return x ^ torch.tensor(-(1 << 63), dtype=torch.int64)
    return x.to(torch.int64) & ((1 << int_bits(x.dtype)) - 1)


CMPI = {0: "eq", 1: "ne", 2: "slt", 3: "sle", 4: "sgt", 5: "sge", 6: "ult",
        7: "ule", 8: "ugt", 9: "uge"}
CMPF = {0: "false", 1: "oeq", 2: "ogt", 3: "oge", 4: "olt", 5: "ole", 6: "one",
        7: "ord", 8: "ueq", 9: "ugt", 10: "uge", 11: "ult", 12: "ule", 13: "une",
        14: "uno", 15: "true"}


def attr_int(a):
    return ir.IntegerAttr(a).value


class Block:
    """Executes one thread block of a gpu.func."""

    def __init__(self, func, args, bid, grid, block):
        self.func = func
        self.bid, self.grid, self.block = bid, grid, block
        self.env = {}
        entry = func.regions[0].blocks[0]
        params = list(entry.arguments)
        nargs = len(args)
        for p, a in zip(params[:nargs], args):
            self.env[p] = a
        # Workgroup attributions follow the parameters.
        for p in params[nargs:]:
            t = ir.MemRefType(p.type)
            self.env[p] = torch.zeros(t.shape, dtype=torch_dtype(t.element_type))

    def v(self, value):
        return self.env[value]

    def full(self, x, dtype):
        return torch.full((self.block,), x, dtype=dtype)

    def run(self):
        entry = self.func.regions[0].blocks[0]
        self.region(entry, torch.ones(self.block, dtype=torch.bool))

    def region(self, blk, mask):
        for op in blk.operations:
            name = op.operation.name
            if name in ("scf.yield", "gpu.return"):
                return [self.v(x) for x in op.operands]
            self.op(op, name, mask)
        return []

    def op(self, op, name, mask):
        o = [self.v(x) for x in op.operands]
        res = list(op.results)
        out = None
        d = name.split(".", 1)[1]
        attrs = {n: op.attributes[n] for n in op.attributes}
        if name == "arith.constant":
            t = res[0].type
            a = attrs["value"]
            dt = torch_dtype(t)
            if str(t).startswith("vector"):
                raise NotImplementedError("vector constant")
            if dt.is_floating_point:
                out = self.full(ir.FloatAttr(a).value, dt)
            else:
                val = ir.IntegerAttr(a).value
                out = self.full(bool(val) if dt == torch.bool else val, dt)
        elif name == "gpu.thread_id":
            out = torch.arange(self.block, dtype=torch.int64)
        elif name == "gpu.block_id":
            out = self.full(self.bid, torch.int64)
        elif name == "gpu.block_dim":
            out = self.full(self.block, torch.int64)
        elif name == "gpu.grid_dim":
            out = self.full(self.grid, torch.int64)
        elif name == "gpu.barrier":
            return
        elif name == "gpu.shuffle":
            val, off, width = o
            mode = str(attrs["mode"])
            assert "xor" in mode, mode
            lanes = torch.arange(self.block)
            src = lanes ^ off.to(torch.int64)
            out = val[src]
            self.env[res[0]] = out
            self.env[res[1]] = torch.ones(self.block, dtype=torch.bool)
            return
        elif d in ("addi", "addf"):
            out = o[0] + o[1]
        elif d in ("subi", "subf"):
            out = o[0] - o[1]
        elif d in ("muli", "mulf"):
            out = o[0] * o[1]
        elif d == "divf":
            out = o[0] / o[1]
        elif d == "remf":   # C's fmod: the sign of the dividend
            out = torch.fmod(o[0], o[1])
        elif d in ("divui", "divsi", "remui", "remsi"):
            den = torch.where(mask, o[1], torch.ones_like(o[1]))
            den = torch.where(den == 0, torch.ones_like(den), den)
            a = o[0]
            if d.startswith("div"):
                out = torch.div(a, den, rounding_mode="trunc").to(o[0].dtype)
            else:
                out = torch.fmod(a, den).to(o[0].dtype)
        elif d in ("floordivsi", "ceildivsi"):
            den = torch.where(mask & (o[1] != 0), o[1], torch.ones_like(o[1]))
            out = (floor_div if d == "floordivsi" else ceil_div)(o[0], den).to(o[0].dtype)
        elif d in ("maxui", "maxsi", "maximumf", "maxnumf"):
            out = torch.maximum(o[0], o[1])
        elif d in ("minui", "minsi", "minimumf", "minnumf"):
            out = torch.minimum(o[0], o[1])
        elif d == "andi":
            out = o[0] & o[1]
        elif d == "ori":
            out = o[0] | o[1]
        elif d == "xori":
            out = o[0] ^ o[1]
        elif d == "shli":
            out = o[0] << o[1]
        elif d == "shrui":
            x = o[0].to(torch.int64)
            if o[0].dtype != torch.int64:
                x = x & ((1 << int_bits(o[0].dtype)) - 1)
            out = (x >> o[1].to(torch.int64)).to(o[0].dtype)
        elif d == "shrsi":
            out = o[0] >> o[1]
        elif d == "negf":
            out = -o[0]
        elif name == "arith.cmpi":
            p = CMPI[attr_int(attrs["predicate"])]
            a, b = o
            if p[0] == "u":
                a, b = unsigned(a), unsigned(b)
                p = "s" + p[1:]
            out = {"eq": a == b, "ne": a != b, "slt": a < b, "sle": a <= b,
                   "sgt": a > b, "sge": a >= b}[p]
        elif name == "arith.cmpf":
            p = CMPF[attr_int(attrs["predicate"])]
            a, b = o
            unord = torch.isnan(a) | torch.isnan(b)
            base = {"eq": a == b, "gt": a > b, "ge": a >= b, "lt": a < b,
                    "le": a <= b, "ne": a != b, "rd": ~unord, "no": unord}
            if p in ("false", "true"):
                out = self.full(p == "true", torch.bool)
            elif p in ("ord", "uno"):
                out = ~unord if p == "ord" else unord
            elif p[0] == "o":
                out = base[p[1:]] & ~unord
            else:
                out = base[p[1:]] | unord
        elif name == "arith.select":
            c, a, b = o
            if a.dim() > c.dim():
                c = c.unsqueeze(-1)
            out = torch.where(c, a, b)
        elif d in ("extf", "truncf", "index_cast", "sitofp", "fptosi", "extsi",
                   "index_castui"):
            out = o[0].to(torch_dtype(res[0].type))
        elif d in ("uitofp", "extui"):
            x = o[0].to(torch.int64)
            if o[0].dtype not in (torch.int64, torch.bool):
                x = x & ((1 << int_bits(o[0].dtype)) - 1)
            out = x.to(torch_dtype(res[0].type))
        elif d == "trunci":
            dt = torch_dtype(res[0].type)
            x = o[0].to(torch.int64)
            if dt == torch.bool:
                out = (x & 1).to(torch.bool)
            else:
                bits = int_bits(dt)
                x = x & ((1 << bits) - 1)
                x = torch.where(x >= (1 << (bits - 1)), x - (1 << bits), x)
                out = x.to(dt)
        elif d == "bitcast":
            out = o[0].view(torch_dtype(res[0].type))
        elif name == "affine.apply":
            amap = ir.AffineMapAttr(attrs["map"]).value
            assert len(amap.results) == 1, amap
            out = affine_eval(amap.results[0], o[:amap.n_dims], o[amap.n_dims:])
        elif name.startswith("math."):
            fn = {"exp": torch.exp, "log": torch.log, "tanh": torch.tanh,
                  "erf": torch.erf, "rsqrt": torch.rsqrt, "sqrt": torch.sqrt,
                  "absf": torch.abs, "exp2": torch.exp2, "log1p": torch.log1p,
                  "sin": torch.sin, "cos": torch.cos, "floor": torch.floor,
                  "ceil": torch.ceil, "log2": torch.log2, "expm1": torch.expm1,
                  "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
                  "sinh": torch.sinh, "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh,
                  "atanh": torch.atanh, "log10": torch.log10, "erfc": torch.erfc, "trunc": torch.trunc,
                  "cbrt": lambda x: torch.sign(x) * x.abs().pow(1 / 3),
                  "roundeven": torch.round,   # (torch.round rounds half to even)
                  "round": round_half_away}
            if d in ("powf", "fpowi", "ipowi"):
                out = torch.pow(o[0], o[1])
            elif d == "fma":
                out = o[0] * o[1] + o[2]
            elif d == "atan2":
                out = torch.atan2(o[0], o[1])
            elif d == "copysign":
                out = torch.copysign(o[0], o[1])
            elif d == "absi":
                out = torch.abs(o[0])
            else:
                out = fn[d](o[0].double() if o[0].dtype in (torch.float16, torch.bfloat16) else o[0]).to(o[0].dtype)
        elif name == "memref.extract_aligned_pointer_as_index":
            out = self.full(o[0].data_ptr(), torch.int64)
        elif name == "memref.load":
            mem, idx = o[0], o[1]
            idx = torch.where(mask, idx, torch.zeros_like(idx))
            out = mem[idx]
        elif name == "memref.store":
            val, mem, idx = o[0], o[1], o[2]
            m = mask
            mem[idx[m]] = val[m].to(mem.dtype)
            return
        elif name == "vector.load":
            mem, idx = o[0], o[1]
            n = ir.VectorType(res[0].type).shape[0]
            idx = torch.where(mask, idx, torch.zeros_like(idx))
            out = mem[idx.unsqueeze(1) + torch.arange(n)]
        elif name == "vector.store":
            val, mem, idx = o[0], o[1], o[2]
            n = val.shape[1]
            m = mask
            mem[(idx[m].unsqueeze(1) + torch.arange(n))] = val[m].to(mem.dtype)
            return
        elif name == "vector.extract":
            pos = list(ir.DenseI64ArrayAttr(attrs["static_position"]))
            out = o[0][:, pos[0]]
        elif name == "vector.insert":
            pos = list(ir.DenseI64ArrayAttr(attrs["static_position"]))
            out = o[1].clone()
            out[:, pos[0]] = o[0]
        elif name == "vector.broadcast":
            n = ir.VectorType(res[0].type).shape[0]
            out = o[0].unsqueeze(1).repeat(1, n)
        elif name == "scf.for":
            lb, ub, step = o[0], o[1], o[2]
            carried = list(o[3:])
            body = op.regions[0].blocks[0]
            iv = lb.clone()
            while True:
                active = mask & (iv < ub)
                if not bool(active.any()):
                    break
                self.env[body.arguments[0]] = iv
                for a, c in zip(list(body.arguments)[1:], carried):
                    self.env[a] = c
                ys = self.region(body, active)
                carried = [torch.where(active.unsqueeze(-1) if y.dim() > 1 else active, y, c)
                           for y, c in zip(ys, carried)]
                iv = iv + step
            for r, c in zip(res, carried):
                self.env[r] = c
            return
        elif name == "scf.if":
            cond = o[0]
            self.region(op.regions[0].blocks[0], mask & cond)
            if len(op.regions) > 1 and op.regions[1].blocks:
                self.region(op.regions[1].blocks[0], mask & ~cond)
            assert not res, "scf.if with results"
            return
        else:
            raise NotImplementedError(name)
        self.env[res[0]] = out


def affine_eval(e, dims, syms):
    """An affine expression of index tensors (affine.apply before lower-affine)."""
    if isinstance(e, ir.AffineDimExpr):
        return dims[e.position]
    if isinstance(e, ir.AffineSymbolExpr):
        return syms[e.position]
    if isinstance(e, ir.AffineConstantExpr):
        return torch.tensor(e.value, dtype=torch.int64)
    a, b = affine_eval(e.lhs, dims, syms), affine_eval(e.rhs, dims, syms)
    if isinstance(e, ir.AffineAddExpr):
        return a + b
    if isinstance(e, ir.AffineMulExpr):
        return a * b
    if isinstance(e, ir.AffineModExpr):
        return torch.remainder(a, b)
    if isinstance(e, ir.AffineFloorDivExpr):
        return floor_div(a, b)
    if isinstance(e, ir.AffineCeilDivExpr):
        return ceil_div(a, b)
    raise NotImplementedError(str(e))


def floor_div(a, b):
    return torch.div(a, b, rounding_mode="floor")


def ceil_div(a, b):
    return -torch.div(-a, b, rounding_mode="floor")


def round_half_away(x):
    """math.round: halves away from zero (sign(x) * floor(|x| + 0.5) rounds 0.49999997 up: the
    sum rounds to 1)."""
    t = x.trunc()
    return torch.where((x - t).abs() == 0.5, t + x.sign(), x.round())


def load_kernels(mlircap_opt, ir_text):
    gen = subprocess.run(
        [mlircap_opt, "-", "--mlircap-gpu-fuse", "--mlircap-gpu-codegen", "--canonicalize",
         "--cse", "--mlir-print-op-generic"],
        input=ir_text, capture_output=True, text=True, check=True).stdout
    ctx = ir.Context()
    ctx.allow_unregistered_dialects = True
    module = ir.Module.parse(gen, ctx)
    kernels = {}
    for op in module.body.operations:
        if op.operation.name != "gpu.module":
            continue
        for f in op.regions[0].blocks[0].operations:
            if f.operation.name == "gpu.func":
                kernels[ir.StringAttr(f.attributes["sym_name"]).value] = f
    return ctx, module, kernels


def run_plan(plan, kernels, inputs, debug=None, misalign=False, max_grid=None):
    """Executes a launch plan on CPU: library ops with torch, kernels with the
    SIMT interpreter. Returns the outputs. misalign: every input starts one
    element past its allocation (not 16-byte aligned). max_grid: grid-stride
    kernels run with at most that many blocks (as the CUDA runtime fits them
    to one wave)."""
    vals = {v["id"]: v for v in plan["values"]}
    storage = {}

    def base(i):
        v = vals[i]
        if i in storage:
            return storage[i]
        dt = DTYPES[v["dtype"]]
        if v["kind"] == "input":
            t = inputs[v["index"]].contiguous().to(dt).reshape(-1).clone()
            if misalign:
                t = torch.cat([t[:1], t])[1:]
        elif v["kind"] == "constant":
            n = 1
            for s in v["shape"]:
                n *= s
            data = torch.tensor([float(x) if isinstance(x, str) else x for x in v["data"]],
                                dtype=torch.float64).to(dt)
            t = data.expand(n).clone() if v.get("splat") else data
        else:
            n = 1
            for s in v["shape"]:
                n *= s
            t = torch.full((max(n, 1),), 7.0, dtype=torch.float64).to(dt)  # garbage
        storage[i] = t
        return t

    def tensor(i):
        v = vals[i]
        if v["kind"] == "view":
            return torch.as_strided(base(v["of"]), v["shape"], v["strides"], v["offset"])
        return base(i).view(v["shape"]) if v["shape"] else base(i)[0]

    for s in plan["steps"]:
        if s["kind"] == "library":
            ins = [tensor(i) for i in s["ins"]]
            op = s["op"]
            if op == "matmul" or op == "batch_matmul":
                r = torch.matmul(ins[0], ins[1])
            elif op.endswith("transpose_b"):
                r = torch.matmul(ins[0], ins[1].transpose(-1, -2))
            elif op in ("conv2d_nchw_fchw", "conv2d_nhwc_fhwc"):
                nhwc = op == "conv2d_nhwc_fhwc"   # NHWC input/result, (F, kh, kw, C) weight
                x, w = (t.permute(0, 3, 1, 2) for t in ins) if nhwc else ins
                r = torch.nn.functional.conv2d(x, w, stride=s["attrs"]["strides"],
                                               padding=s["attrs"].get("padding", [0, 0]),
                                               dilation=s["attrs"]["dilations"])
                if nhwc:
                    r = r.permute(0, 2, 3, 1)
            else:
                raise NotImplementedError(op)
            out = base(s["out"])
            out.copy_(r.reshape(-1).to(out.dtype))
            continue
        f = kernels[s["name"]]
        args = []
        for a in s["args"]:
            i = a["value"]
            v = vals[i]
            b = base(v["of"] if v["kind"] == "view" else i)
            off = v.get("offset", 0)
            t = b[off:]
            args.append(t.view(torch.int8) if t.dtype == torch.bool else t)
        grid = s["grid"][0]
        if max_grid is not None and s.get("grid_stride"):
            grid = min(grid, max_grid)
        for bid in range(grid):
            Block(f, args, bid, grid, s["block"][0]).run()
    if debug is not None:
        debug.update({i: tensor(i) for i in storage})
    return [tensor(o).clone() for o in plan["outputs"]]


def reference(binding, ir_text, inputs, out_specs):
    """Runs the CPU JIT (mlircap-cpu-pipeline) for reference outputs."""
    engine = binding.cpu_compile(ir_text)
    fn = engine.lookup("main")
    outs = [torch.zeros(v["shape"], dtype=DTYPES[v["dtype"]]) for v in out_specs]
    ins = [x.contiguous() for x in inputs]
    args = []
    for t in ins + outs:
        args.append((t.data_ptr(), list(t.shape), list(t.stride())))
    binding.call_packed(fn, args)
    return outs


# -- the GPU path of mlircap.compile, run on the CPU ------------------------------------------

def simt_executable_class():
    """A stand-in for runtime.cuda.GpuExecutable that builds the same launch plan (the core's
    GPU codegen, PTX included) and runs it on CPU tensors: library steps through the runtime's
    own LIBRARY calls, kernels in the SIMT interpreter (their gpu.func form, before NVVM; math
    functions are torch's, not libdevice's)."""
    from mlircap import config
    from mlircap._core import tool_path
    from mlircap.runtime.cuda import compile_plan
    from mlircap.runtime.plan import PlanExecutor, plan_input_ir
    from mlircap.runtime.schema import KernelStep

    class SimtExecutable(PlanExecutor):
        def __init__(self, linalg_ir, chip=config.DEFAULT_CHIP, features=config.DEFAULT_PTX_FEATURES, **_):
            plan, self.cache_hit = compile_plan(linalg_ir, chip, features)
            super().__init__(plan, torch.device("cpu"))
            # (the context and module must outlive the kernels read from them)
            self._mlir = load_kernels(str(tool_path("mlircap-opt")), plan_input_ir(linalg_ir, "cuda")) \
                if self.n_kernels else (None, None, {})
            self.kernels = self._mlir[2]

        def set_transient_outputs(self, positions):
            pass

        def __call__(self, *args):
            t = self._materialize(self._prepare_inputs(args))
            for step in self.plan.steps:
                if not isinstance(step, KernelStep):
                    self._run_library(step, t)
                    continue
                kargs = []
                for a in step.args:
                    if a.value is None:
                        kargs.append(torch.tensor(a.i64, dtype=torch.int64))
                        continue
                    v = self.values[a.value]
                    base = t[self._base_of(a.value)].reshape(-1)
                    flat = base[v.offset:] if v.kind == "view" else base
                    kargs.append(flat.view(torch.int8) if flat.dtype == torch.bool else flat)
                grid = step.grid[0]
                for bid in range(grid):
                    Block(self.kernels[step.name], kargs, bid, grid, step.block[0]).run()
            return self._outputs(t)

    return SimtExecutable


def install_simt_gpu():
    """Makes mlircap.compile(fn, device="cuda") run its launch plans on CPU tensors through
    simt_executable_class() (for sweeps of the GPU codegen on a machine without a GPU)."""
    import mlircap.runtime.cuda as cuda

    cuda.GpuExecutable = simt_executable_class()
