"""Make this checkout's python/mlircap/capture importable even when another mlircap
(e.g. an editable install of the main tree) shadows the package."""
import os
import sys
import types

_PY = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "..", "python"))
_MINE = os.path.join(_PY, "mlircap")
if _PY not in sys.path:
    sys.path.insert(0, _PY)
try:
    import mlircap  # noqa: F401
except Exception:  # the compiler half may not be built; the capture layer does not need it
    mlircap = types.ModuleType("mlircap")
    mlircap.__path__ = []
    sys.modules["mlircap"] = mlircap
if _MINE not in list(mlircap.__path__):
    mlircap.__path__.insert(0, _MINE)
