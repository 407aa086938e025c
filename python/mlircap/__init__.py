"""mlircap: an MLIR-based compiler for PyTorch programs.

    import mlircap
    fast = mlircap.compile(model)      # function or nn.Module
    y = fast(x)
    print(fast.ir("linalg"))           # fx, torch, linalg, fused, llvm, ptx

Capture is mlircap's own bytecode capture (`mlircap.capture`); `mlircap.explain(fn)(*args)`
shows graphs, breaks and guards. `torch.compile(model, backend="mlircap")` works too
(entry point torch_dynamo_backends).
"""
from .api import Compiled, compile, explain
from .backend import MlircapCompileError, mlircap_backend
from .logs import set_logs

__all__ = ["compile", "explain", "Compiled", "MlircapCompileError", "mlircap_backend", "set_logs"]
__version__ = "0.1.0"


def _register_backend():
    try:
        from torch._dynamo import register_backend
        from torch._dynamo.backends.registry import _BACKENDS
    except Exception:  # pragma: no cover - torch without dynamo
        return
    if "mlircap" not in _BACKENDS:
        register_backend(name="mlircap")(mlircap_backend)


_register_backend()
