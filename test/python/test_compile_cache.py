"""The on-disk compile cache: round trip, corruption detection (no GPU needed)."""
import pytest

from mlircap.runtime import cuda as rt


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_round_trip(cache):
    rt.store_cached_plan("k1", '{"a": 1}')
    assert rt.load_cached_plan("k1") == '{"a": 1}'


def test_missing_is_a_miss(cache):
    assert rt.load_cached_plan("nope") is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupted_entry_is_rejected_and_removed(cache, damage):
    rt.store_cached_plan("k2", '{"ptx": "' + "x" * 1000 + '"}')
    path = cache / "k2.plan"
    data = path.read_bytes()
    if damage == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "flip":
        i = len(data) - 10
        path.write_bytes(data[:i] + bytes([data[i] ^ 1]) + data[i + 1:])
    else:
        path.write_bytes(b"")
    assert rt.load_cached_plan("k2") is None
    assert not path.exists()


def test_key_depends_on_ir_and_target():
    k = rt._cache_key("ir", "sm_90", "+ptx80")
    assert k != rt._cache_key("ir2", "sm_90", "+ptx80")
    assert k != rt._cache_key("ir", "sm_80", "+ptx80")
    assert k == rt._cache_key("ir", "sm_90", "+ptx80")
