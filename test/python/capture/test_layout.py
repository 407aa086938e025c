"""The capture package's layout: each module imports (at module level) only modules listed
before it in core.py's Layout (the order README.md's "Capture layout" gives)."""
import ast
import pathlib
import re

import mlircap.capture.core as core

PKG = pathlib.Path(core.__file__).parent
# helpers below the layout: imported by any module
BASE = ["_bytecode", "_ext", "_tensor_ext"]


def _layout():
    doc = core.__doc__
    block = doc[doc.index("Layout"):]
    return re.findall(r"^  (\w+)\s", block, re.M)


def _module_imports(path):
    tree = ast.parse(path.read_text())
    out = set()
    for node in tree.body:   # module level only: imports inside functions are lazy
        if isinstance(node, ast.ImportFrom) and node.level == 1:
            if node.module:
                out.add(node.module.split(".")[0])
            else:
                out.update(a.name for a in node.names)
        elif isinstance(node, ast.If):   # `if TYPE_CHECKING:` imports are annotations only
            continue
    return out


def test_every_module_is_in_the_layout():
    names = set(_layout()) | set(BASE) | {"core", "__init__"}
    files = {p.stem for p in PKG.glob("*.py")}
    assert files - names == set(), f"modules missing from core.py's Layout: {sorted(files - names)}"
    assert set(_layout()) - files == set()


def test_imports_go_downward():
    order = BASE + _layout()
    pos = {n: i for i, n in enumerate(order)}
    bad = []
    for name in _layout():
        for dep in _module_imports(PKG / f"{name}.py"):
            if dep in pos and pos[dep] >= pos[name]:
                bad.append(f"{name} imports {dep}")
    assert bad == []
