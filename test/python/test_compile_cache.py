"""The on-disk compile cache: round trip, corruption detection (no GPU needed)."""
import json

import pytest

from mlircap.runtime import cuda as rt
from mlircap.runtime.schema import Plan


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLIRCAP_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_round_trip(cache):
    plan = '{"values": [], "steps": [], "outputs": []}'
    rt.store_cached_plan("k1", plan)
    assert rt.load_cached_plan("k1") == Plan.from_json(json.loads(plan))


def test_missing_is_a_miss(cache):
    assert rt.load_cached_plan("nope") is None


@pytest.mark.parametrize("damage", ["truncate", "flip", "empty"])
def test_corrupted_entry_is_rejected_and_removed(cache, damage):
    rt.store_cached_plan("k2", '{"values": [], "steps": [], "outputs": [], "ptx": "' + "x" * 1000 + '"}')
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


@pytest.mark.parametrize("body", [b"not json", b'{"a": 1}', b"\xff\xfe", b"[]",
                                  # has the keys, breaks the contract (a step reads a missing value)
                                  b'{"values": [], "steps": [{"kind": "library", "op": "matmul", '
                                  b'"ins": [0, 1], "out": 2}], "outputs": []}'])
def test_valid_checksum_bad_body_is_rejected_and_removed(cache, body):
    # shared/repro/r21: a well-formed entry whose body is not a launch plan.
    import hashlib

    path = cache / "k3.plan"
    path.write_bytes(hashlib.sha256(body).hexdigest().encode() + b"\n" + body)
    assert rt.load_cached_plan("k3") is None
    assert not path.exists()


def test_key_depends_on_ir_and_target():
    k = rt._cache_key("ir", "sm_90", "+ptx80")
    assert k != rt._cache_key("ir2", "sm_90", "+ptx80")
    assert k != rt._cache_key("ir", "sm_80", "+ptx80")
    assert k == rt._cache_key("ir", "sm_90", "+ptx80")


def test_key_names_this_build_of_the_core(monkeypatch):
    # A rebuilt core keeps its version string: its plans must not be mistaken for
    # those of the build that wrote the cache.
    class Rebuilt:
        def __init__(self, real):
            self.real = real

        def version(self):
            return self.real.version()

        def build_id(self):
            return "0" * 40

    k = rt._cache_key("ir", "sm_90", "+ptx80")
    real = rt.core()
    monkeypatch.setattr(rt, "core", lambda: Rebuilt(real))
    assert rt._cache_key("ir", "sm_90", "+ptx80") != k
