import pytest

from harness import run_program
from programs import P


@pytest.mark.parametrize("p", P, ids=[p["name"] for p in P])
def test_program(p):
    kw = {k: v for k, v in p.items() if k not in ("name", "src", "calls")}
    run_program(p["src"], p["calls"], name=p["name"], **kw)
