"""Bytecode-level capture of PyTorch programs (MagPy style: run for real while recording).

Overview
--------
* Entry: a PEP 523 frame-evaluation hook (C++ extension `_mlircap_evalframe`) intercepts
  the frame of the captured function's code object and hands the CPython-bound arguments
  to `_Captured.dispatch`.  Without the extension a pure-Python wrapper binds the
  arguments itself (fallback).
* Recording: the first call (and every guard miss) runs the function for real with
  `sys.settrace` opcode events on user frames.  A C++ helper peeks the value stack, so
  every external read (globals, closure cells, attributes of modules/objects, container
  items) is seen and turned into a guard; writes are detected (STORE_* opcodes plus a
  diff of touched external state) and replayed.  Tensor operations are intercepted by a
  TorchFunctionMode and recorded into torch.fx graphs.
* Graph breaks: operations that depend on tensor data (`.item()`, `bool(t)`, `.tolist()`,
  printing ...) or calls to uncapturable code end the current graph; the operation is
  replayed eagerly and its result is guarded (mid-replay guard), then capture continues in
  a new graph.  When a mid-replay guard fails, tensor mutations / RNG are rolled back and
  a new variant is recorded.
* Replay: generated Python code (one function per variant) evaluates the graphs compiled
  by the user backend, the eager break operations and the deferred side effects.

Layout (each module imports only the ones listed before it; README.md, "Capture layout"):
  base           sentinels (_MISSING, _Miss, _Canned) and errors (Unreplayable, strict errors)
  device_checks  device-side asserts (bounds.py's GPU index flags) held until a graph's data checks ran
  resume_code    continuations: the function's code started mid-frame with its variables and stack given
  steps          typed replay plan records: GraphStep, CallStep, Write
  frame_hook     the C++ frame hook glue: _E (+ 3.12 stack-depth shim), _active, _hook_cb
  classify       code classification (_classify), call kinds (_call_kind), value categories
  state_writers  C functions writing process-wide state (RNG, default dtype) or autograd modes, learned writers
  reductions     copy.deepcopy / copy.copy of plain objects traced: object.__reduce_ex__ as Python code
  shape_ops      which calls make results whose shape depends on tensor data (_dyn_shape_op)
  optim_calls    optimizer / LR scheduler steps and nn.Module grad walks, run at replay as they are
  dispatch_args  a call's arguments bound as CPython binds them, direct module calls, warnings' stacklevel,
                 the frame hook's count of users
  functorch_calls torch.func transforms (grad, jacrev, vjp, ...) called from traced code: uncapturable calls,
                 their closures made again at replay (rebuilt_function)
  draws          which torch calls and graph nodes draw from torch's generators (_draws_rng, _node_draws)
  iterators      `next` on iterators that outlive the call (replayed, not folded), which may run before a graph
  autocast       autocast regions inside the call: _enter_autocast / _exit_autocast nodes in the graph
  locations      the user's file:line (_user_location, _frame_loc), short value descriptions
  typeinfo       type introspection: MRO lookups, descriptors, class dicts, __slots__
  guard_kinds    the guard kinds, one frozen record each (check / code / describe)
  guard_tensors  the tensor guard kinds: TensorMatch, TensorMatchAll (one C call: _tensor_ext), StorageAliasing
  guard_batches  guards checked many per call in C: dict version tags, function code, closure cells
  guards         _GuardMixin, Placed, _GlobalState, guard merging and compilation
  counters       _CounterMixin: int attributes incremented / compared (`self.step += 1`), not guarded by value
  values         _ValueMixin: constants and value reconstruction (expr_of)
  lazy_sources   _LazySourceMixin: containers and objects guarded where first used (touch), snapshots
  epochs         _EpochMixin: what an uncapturable call that may write changes: reads guarded again, held objects bound
  sources        _SourceMixin: guarding values read from external locations (_source, read)
  side_effects   _SideEffectMixin: STORE_* handlers and the writes replayed
  fx_targets     FX call targets FX code generation can name (_fx_target), constants bound into targets
  restrides      _RestrideMixin: in-place view ops (x.transpose_) on tensors from outside, recorded
  overlaps       in-place writes onto memory an operand shares (eager), interleaved views told apart
  data_writes    _DataWriteMixin: `t.data = v` as a step after the open graph, which reads v for t
  grad_hooks     _GradHookMixin: pure gradient hooks and custom autograd.Functions as graph nodes;
                 the pure-body checks (also of a vmapped function)
  scalar_inputs  _ScalarInputMixin: numbers a tensor operator takes as graph inputs (`x * r`, clamp bounds)
  number_calls   _NumberCallMixin: floats handed to torch functions / autograd.Functions as graph inputs
  index_inputs   _IndexInputMixin: ints that index or fill a tensor as graph inputs (`betas[t]`, `torch.full((n,), t)`)
  asserts        _AssertMixin: the truth of a tensor deciding a jump to a raise, a check after the graph
  deferred       _DeferMixin: numbers read from tensors of the open graph (`t.item()`), read after it
  torch_calls    _Mode (routes torch calls to the recorder); what a torch call is: writer tables, predicates
                 on its arguments (cuDNN RNN dropout, a custom Function's forward, raises decided by metadata)
  tensor_meta    _TensorMetaMixin: tensors an in-place call may resize or restride, data-dependent shapes,
                 autograd metadata (`is_leaf`, `grad_fn is None`, `.grad is None`) guarded where read
  graph_steps    _GraphStepMixin: steps a torch call makes between graphs (call steps, hoisted draws, .grad
                 writes, autograd state, explicit generators, ops that raised)
  graph_nodes    _Seg (one graph being recorded), _NodeMixin: a torch call's node, its arguments as nodes or
                 graph inputs
  graph          _GraphMixin: FX recording of tensor operations (what a torch call records)
  np_ops         the NumPy operations translated: operator tables, torch._numpy application, replay steps
  np_plan        _NumpyPlanMixin: which instruction on a tracked array translates to what
  np_interop     _NumpyMixin: NumPy arrays computed from tensors, recorded through torch._numpy
  rng            the RNG state a replay that misses restores after logged uncapturable calls
  flow_state     _Flow: the stack slots followed in one frame, and their bookkeeping over one instruction
  flow_writes    _FlowWriteMixin: floats written back to attributes (`self.tau *= 0.9`) replayed as expressions
  flush_writes   writes a recording made before a graph break, made right before the break's eager call
                 (then guarded after it; put back by a replay that misses)
  flow_items     _FlowItemMixin: items of lazily guarded lists / dicts followed as numbers (`self.w[0]`, `d.get(k)`)
  flow_roots     _FlowRootMixin: where followed numbers start (arguments, attributes, breaks) and escape (guards)
  flow_boxes     _FlowBoxMixin: containers of followed floats built, moved and returned (a metrics dict)
  flows          _FlowMixin: numbers followed opcode by opcode to their use (branch outcome guards, printed)
  external_calls _ExternalCallMixin: the uncapturable call replayed as a graph break, its result sourced
  give_ups       callees a recording gave up in (failing_callee), broken around at their calls (learned_break)
  grad_clips     clip_grad_norm_ / clip_grad_value_ right after a graph break: run with that break
  module_factories _ModuleFactoryMixin: modules the function makes (`nn.Linear(...)`), a replayed call
                 run before the open graph, the module sourced through its result (kind "fresh")
  transform_closures bodies of torch.func transforms that read the program's modules (`functional_call(self.net, p, x)`):
                 what they read guarded, the modules they use reparametrized to the node's inputs
  transform_nodes _TransformNodeMixin: torch.func transforms (jacrev, grad, vjp, vmap of closures; jvp, jacfwd, hessian without grad) of
                 pure tensor code as one graph node
  tensor_copies  _TensorCopyMixin: copy.deepcopy of a tensor, a clone node or a new leaf's replayed step
  special_calls  _SpecialCallMixin: methods of opaque call results (`with fork_rng()`), lru_cache calls,
                 vmap, a tensor's deepcopy, disabled loggers
  reads          _ReadMixin: LOAD_GLOBAL / LOAD_ATTR / LOAD_DEREF reads of external state, guarded
  fast_paths     nn.MultiheadAttention / TransformerEncoderLayer fast paths: whether eager may take one,
                 whether the slow path the recording takes computes the same (torch untouched)
  call_guards    _CallGuardMixin: a call's module hooks / forward / type, metaclass isinstance answers, callees noted
  calls          _CallMixin: CALL handlers and call kinds
  tracer         _TracerMixin, _HANDLERS: the settrace callbacks and the opcode -> handler table
  resumes        _ResumeMixin: the frame's state after breaks, where a failed guard continues it
  recorder       _Recorder: the state of one recording run (all mixins)
  higher_order   create_graph backwards of compiled graphs: the captured graph re-run (_HigherOrderGrad)
  graph_prep     what compiling a graph rewrites first: inputs reaching no output detached, a graph split per
                 gradient group, sizes computed as 0-d tensors folded to numbers
  graph_compile  compiling graphs with the backend (fallbacks, first-run check)
  replay_helpers what generated replay code calls: rebuilt objects, write statements, rollback of a miss
  guard_misses   where a replay failing a guard after an uncapturable call goes: continuations, hoisted guards
  replay         _Variant, _GraphVariant (generated replay code), _EagerVariant
  callees        _Callees: the callees of a frame run eagerly, captured on their own
  recording      _RecordingMixin: a call recorded under the tracer, the variant it leaves, giving up
  cache          _Captured: variants, cache_limit, strict, stats; dispatch and recording
  explanation    ExplainOutput
  entry          capture(), explain()
This module only re-exports the names it used to define, for compatibility.
"""
from __future__ import annotations

from .. import logs as _logs  # noqa: F401
from . import _ext  # noqa: F401
from ._bytecode import _CHECK_DEPTH, _STATIC_DEPTH, _instrs  # noqa: F401
from .base import (  # noqa: F401
    MISS,
    PY312,
    Unreplayable,
    _Canned,
    _CaptureStrictError,
    _MISSING,
    _Miss,
    _Missing,
    _fn_name,
    _strict_error,
)
from .frame_hook import (  # noqa: F401
    HOOK,
    NOT_HANDLED,
    _E,
    _E_real,
    _HOOK_LOCK,
    _HOOK_USERS,
    _NULL,
    _RECORD_LOCK,
    _REC_TLS,
    _TLS,
    _active,
    _call_bound,
    _hook_cb,
)
from .classify import (  # noqa: F401
    _DATA_DEP,
    _EXTERNAL_PY_MODULES,
    _EXTERNAL_PY_NAMES,
    _GLOBAL_STATE_FUNCS,
    _ID_HASHED,
    _IMMUTABLE_CONST,
    _META_OK,
    _MODULE_WALKERS,
    _MUTATORS,
    _OPAQUE_STDLIB,
    _OWN_DIR,
    _PRIM,
    _SAFE_BUILTIN_NAMES,
    _SAFE_MODULES,
    _SAFE_SELF_TYPES,
    _STDLIB_DIR,
    _TORCH_DIR,
    _TORCH_NN_MODULES,
    _WRITE_ONLY,
    _call_kind,
    _classify,
    _code_kind,
    _fname,
    _func_qualname,
)
from .locations import (  # noqa: F401
    _API_FILE,
    _frame_loc,
    _short,
    _user_location,
    _user_stack_trace,
)
from .typeinfo import (  # noqa: F401
    _HEAPTYPE,
    _IMMUTABLETYPE,
    _NDARRAY_GUARD_BYTES,
    _class_dicts,
    _class_dicts_cache,
    _dict_version,
    _is_data_descr,
    _is_ndarray,
    _is_opaque_value,
    _mro_lookup,
    _pure_python_type,
    _slot_cache,
    _slot_names,
    _slot_values,
    _static_lookup,
)
from .guards import (  # noqa: F401
    _CONST_REF,
    _GlobalState,
    _GuardMixin,
    _ambient,
    _bind_consts,
    _compile_guard,
    _merge_guards,
)
from .guard_tensors import _alias_pattern, _tensor_guards  # noqa: F401
from .values import (  # noqa: F401
    _ValueMixin,
)
from .sources import (  # noqa: F401
    _SourceMixin,
)
from .side_effects import (  # noqa: F401
    _SideEffectMixin,
)
from .torch_calls import _Mode  # noqa: F401
from .graph_nodes import (  # noqa: F401
    _NodeMixin,
    _Seg,
    _new_placeholder,
)
from .graph import (  # noqa: F401
    _GraphMixin,
)
from .fx_targets import _fx_ok, _fx_target  # noqa: F401
from .tracer import (  # noqa: F401
    _HANDLERS,
    _TracerMixin,
    _touch_ops,
)
from .recorder import (  # noqa: F401
    _Recorder,
)
from .graph_compile import (  # noqa: F401
    _FirstRunChecked,
    _HAS_LOC,
    _compile_graph,
    _graph_loc,
    _strict_backend_error,
)
from .higher_order import (  # noqa: F401
    _HigherOrderGrad,
    _RecomputeForHigherOrder,
    _double_backward_ok,
    _keep_graph,
)
from .replay_helpers import (  # noqa: F401
    _merge_log,
    _mk_obj,
    _rollback,
)
from .replay import (  # noqa: F401
    _EagerVariant,
    _GraphVariant,
    _Variant,
)
from .recording import _plain  # noqa: F401
from .cache import (  # noqa: F401
    CaptureStats,
    _Captured,
)
from .explanation import (  # noqa: F401
    ExplainOutput,
)
from .entry import (  # noqa: F401
    _CapturedModuleCall,
    capture,
    explain,
)
