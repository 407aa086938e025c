"""mlircap.config is the one list of MLIRCAP_* environment variables and target defaults:
every name used in the repository's Python, scripts and benchmarks is in it, the old
literals are gone from the package, the C++ constants agree, and the README's table is
the one the module prints."""
import re
from pathlib import Path

from mlircap import config

ROOT = Path(__file__).resolve().parents[2]
NAME = re.compile(r"\bMLIRCAP_[A-Z0-9_]*[A-Z0-9]\b")


def _sources():
    yield from (ROOT / "python").rglob("*.py")
    yield from (p for p in (ROOT / "scripts").iterdir() if p.is_file())
    yield from (ROOT / "bench").rglob("*.py")
    yield from (ROOT / "test" / "python").rglob("*.py")
    yield ROOT / "setup.py"
    yield ROOT / ".ci" / "run"


def test_every_env_var_is_listed():
    used = {}
    for path in _sources():
        for name in NAME.findall(path.read_text(errors="replace")):
            used.setdefault(name, set()).add(str(path.relative_to(ROOT)))
    missing = {n: sorted(f) for n, f in used.items() if n not in config.ENV}
    assert not missing, f"add these to python/mlircap/config.py's ENV: {missing}"
    assert {"MLIRCAP_LOGS", "MLIRCAP_CACHE_DIR", "MLIRCAP_LIB_DIR"} <= set(used)


def test_package_reads_no_target_literals_or_env_defaults():
    """sm_90 / +ptx80 and MLIRCAP_* lookups with defaults live in config.py only (the
    capture layer's torch-free standalone modules read their variables directly)."""
    bad = []
    for path in (ROOT / "python" / "mlircap").rglob("*"):
        if path.suffix not in (".py", ".cpp") or path.name == "config.py":
            continue
        for i, line in enumerate(path.read_text().splitlines(), 1):
            if re.search(r"""["'](sm_90|\+ptx80)["']""", line) or \
                    re.search(r"""environ\.get\(\s*["']MLIRCAP_\w+["']\s*,""", line):
                bad.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bad, "use mlircap.config instead:\n" + "\n".join(bad)


def test_cxx_defaults_agree():
    h = (ROOT / "include" / "mlircap" / "TargetDefaults.h").read_text()

    def const(name):
        m = re.search(rf"\b{name}\s*=\s*(\"[^\"]*\"|\d+);", h)
        assert m, name
        return m.group(1).strip('"')

    assert const("kDefaultChip") == config.DEFAULT_CHIP
    assert const("kDefaultPtxFeatures") == config.DEFAULT_PTX_FEATURES
    assert "+ptx" + const("kDefaultPtxVersion") == config.DEFAULT_PTX_FEATURES
    assert int(const("kDefaultNumSMs")) == config.DEFAULT_NUM_SMS


def test_readme_table_is_current():
    readme = (ROOT / "README.md").read_text()
    assert config.markdown_table() in readme, \
        "README.md's environment table is stale: paste mlircap.config.markdown_table()"


def test_env_defaults(monkeypatch, tmp_path):
    monkeypatch.delenv("MLIRCAP_COMPILE_TIMEOUT", raising=False)
    assert config.env("MLIRCAP_COMPILE_TIMEOUT") == "900"
    monkeypatch.setenv("MLIRCAP_CUDA_GRAPHS", "0")
    assert not config.env_flag("MLIRCAP_CUDA_GRAPHS")
    monkeypatch.delenv("MLIRCAP_CUDA_GRAPHS")
    assert config.env_flag("MLIRCAP_CUDA_GRAPHS")
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    assert config.cache_dir() == tmp_path
    monkeypatch.delenv("MLIRCAP_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert config.cache_dir() == tmp_path / "mlircap"


def test_codegen_settings_are_part_of_the_cache_keys(monkeypatch):
    # code compiled with MLIRCAP_CASCADE_SUMS=1 (another summation order) must not be
    # loaded from the on-disk cache by a process without it, nor the other way round
    from mlircap.runtime import cpu, cuda

    monkeypatch.delenv("MLIRCAP_CASCADE_SUMS", raising=False)
    off = (cpu._cache_key("plan", "module {}", 2), cuda._cache_key("module {}", "sm_90", "+ptx80"))
    monkeypatch.setenv("MLIRCAP_CASCADE_SUMS", "1")
    on = (cpu._cache_key("plan", "module {}", 2), cuda._cache_key("module {}", "sm_90", "+ptx80"))
    assert off[0] != on[0] and off[1] != on[1]
    assert all(k in config.ENV for k in config.CODEGEN_ENV)
