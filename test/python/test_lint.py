"""./scripts/test runs scripts/lint: ruff on the changed Python files and clang-format on
the changed C/C++ lines. Here it runs in a scratch repository with this checkout's
configs and must fail on a real finding of each kind, then pass once they are fixed."""
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def _have(tool):
    return (BIN / tool).exists() or shutil.which(tool)


def test_scripts_test_runs_lint():
    assert "./scripts/lint" in (ROOT / "scripts" / "test").read_text()


@pytest.mark.skipif(not (_have("ruff") and _have("clang-format") and _have("git-clang-format")),
                    reason="ruff / clang-format not installed (./scripts/setup installs them)")
def test_lint_fails_on_findings_and_passes_when_fixed(tmp_path):
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    for f in ("ruff.toml", ".clang-format", "scripts/lint"):
        shutil.copy2(ROOT / f, repo / f)
    env = dict(os.environ, PATH=f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}",
               GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    env.pop("MLIRCAP_LINT_BASE", None)

    def git(*args):
        subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True)

    def lint():
        r = subprocess.run(["scripts/lint"], cwd=repo, env=env, capture_output=True, text=True, timeout=120)
        return r.returncode, r.stdout + r.stderr

    (repo / "ok.py").write_text("import os\n\nprint(os.sep)\n")
    (repo / "k.cpp").write_text("int f() { return 1; }\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-qm", "base")
    # untouched code is not linted, however it looks
    (repo / "old.cpp").write_text("int   g( ){return 2;}\n")
    git("add", ".")
    git("commit", "-qm", "old")
    rc, out = lint()
    assert rc != 0 and "old.cpp" in out  # ...unless it was just committed (HEAD~1..HEAD)
    git("commit", "-q", "--allow-empty", "-m", "next")
    rc, out = lint()
    assert rc == 0, out

    (repo / "ok.py").write_text("import os\nimport sys\n\nprint(os.sep)\n")  # unused import
    (repo / "k.cpp").write_text("int f() { return 1; }\nint  h( int x ){return x;}\n")
    rc, out = lint()
    assert rc != 0, out
    assert "F401" in out and "ok.py" in out, out
    assert "k.cpp" in out and "not clang-formatted" in out, out

    (repo / "ok.py").write_text("import os\n\nprint(os.sep, 1)\n")
    (repo / "k.cpp").write_text("int f() { return 1; }\nint h(int x) { return x; }\n")
    rc, out = lint()
    assert rc == 0 and "[lint] ok" in out, out
