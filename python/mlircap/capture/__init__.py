"""mlircap.capture: bytecode-level capture of PyTorch programs into FX graphs."""
from .core import capture, explain, ExplainOutput, HOOK  # noqa: F401

__all__ = ["capture", "explain", "ExplainOutput", "HOOK"]
