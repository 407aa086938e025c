"""torch-mlir's LLVM and mlircap's LLVM in one process, both load orders."""
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


@pytest.mark.parametrize("order", ["torch_mlir_first", "mlircap_first"])
def test_both_jits_work_in_one_process(order):
    env = {"PYTHONPATH": str(HERE.parents[1] / "python")}
    import os

    env = {**os.environ, **env}
    r = subprocess.run([sys.executable, str(HERE / "coload_check.py"), order], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "COLOAD OK 6/6" in r.stdout, r.stdout
