"""Store spec strings resolve in one place; every bad spec is one line that names the fix."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

import soak.stores as stores
from soak.errors import StoreBootError, StoreSpecError
from soak.stores import StoreTarget, redact, resolve
from soak.stores.memory import MemoryStore, open_memory
from soak.stores.sqlite import SqliteStore, open_sqlite


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    assert text, "empty message"
    return text


def test_memory_spec(tmp_path):
    target = resolve("memory:")
    assert target.factory is open_memory and target.single_process
    store = target.open(str(tmp_path), 200)
    assert isinstance(store, MemoryStore) and store.lease_ttl_ms == 200


def test_sqlite_spec_keeps_its_file_inside_the_location(tmp_path):
    target = resolve("sqlite:")
    assert target.factory is open_sqlite and not target.single_process and target.options == {}
    store = target.open(str(tmp_path), 300)
    try:
        assert isinstance(store, SqliteStore)
        assert store.path == str(tmp_path / "store.db") and (tmp_path / "store.db").exists()
        assert store.lease_ttl_ms == 300
    finally:
        store.close()


def test_sqlite_spec_with_an_absolute_path(tmp_path):
    db = tmp_path / "elsewhere.db"
    target = resolve(f"sqlite://{db}")
    assert target.options == {"path": str(db)}
    store = target.open(str(tmp_path / "loc"), 200)
    try:
        assert store.path == str(db) and db.exists()
    finally:
        store.close()


def test_sqlite_options_are_passed_through(tmp_path):
    target = resolve("sqlite:?busy_timeout_ms=1234&synchronous=FULL")
    assert target.options == {"busy_timeout_ms": "1234", "synchronous": "FULL"}
    store = target.open(str(tmp_path), 200)
    try:
        assert store.busy_timeout_ms == 1234 and store.synchronous == "FULL"
    finally:
        store.close()


def test_callable_spec_with_options(tmp_path):
    target = resolve("soak.stores.sqlite:open_sqlite?busy_timeout_ms=77")
    assert target.factory is open_sqlite and target.options == {"busy_timeout_ms": "77"}
    store = target.open(str(tmp_path), 200)
    try:
        assert store.busy_timeout_ms == 77
    finally:
        store.close()


def test_a_factory_object_resolves_to_itself(tmp_path):
    target = resolve(open_memory)
    assert target.factory is open_memory
    assert isinstance(resolve(target.spec), StoreTarget)  # the recorded spec resolves again


def test_callable_spec_reaches_tests_package():
    # The rootdir import the conformance tests rely on: broken stores are named by spec.
    target = resolve("tests.broken_stores:open_unfenced_append")
    assert target.factory.__name__ == "open_unfenced_append"


@pytest.mark.parametrize(
    "spec, fragments",
    [
        ("nosuch:", ["unknown store scheme 'nosuch:'", "use one of", "memory:", "sqlite:"]),
        ("not.a.module:f", ["cannot import module 'not.a.module'", "install the package or fix the spec"]),
        ("soak.spi:no_such_factory", ["has no attribute 'no_such_factory'", "fix the spec"]),
        ("soak.spi:RUN_STATUSES", ["not a callable store factory"]),
        ("memory:somewhere", ["memory: takes no location", "use 'memory:'"]),
        ("sqlite:relative.db", ["malformed", "sqlite:///abs/path.db"]),
        ("sqlite:?bogus=1", ["has no option 'bogus'", "options are"]),
        ("sqlite:?1bad=x", ["not an identifier", "?key=value"]),
        ("", ["store spec is empty", "sqlite:"]),
        ("   ", ["store spec is empty"]),
        ("no_such_entry_point", ["no store named 'no_such_entry_point'", "soak.stores", "package.module:callable"]),
        ("postgresql://db/x?bogus=1", ["malformed", "postgresql://HOST:PORT/DATABASE", "lock_timeout_ms"]),
        ("postgresql://db/x?lock_timeout_ms=soon", ["is not a number", "lock_timeout_ms=2000"]),
        ("redis://localhost/zero", ["malformed", "redis://HOST:PORT/DB"]),
        ("redis://localhost?pool=2", ["has no option 'pool'", "socket_timeout_s"]),
        ("mutant:no-such", ["no mutant named 'no-such'", "pg-split-fence", "unfenced-meta"]),
    ],
)
def test_bad_specs_are_one_line_naming_the_fix(spec, fragments):
    with pytest.raises(StoreSpecError) as info:
        resolve(spec)
    text = _one_line(info.value)
    for fragment in fragments:
        assert fragment in text, (fragment, text)
    assert info.value.exit_code == 2
    assert isinstance(info.value, ValueError)


def test_a_module_that_raises_on_import_is_named(tmp_path, monkeypatch):
    (tmp_path / "explodes_on_import.py").write_text("raise RuntimeError('boom at import')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(StoreSpecError) as info:
        resolve("explodes_on_import:open")
    text = _one_line(info.value)
    assert "RuntimeError" in text and "boom at import" in text and "fix the module" in text


def _fake_entry_points(*eps: EntryPoint):
    def entry_points(*, group: str):
        return [ep for ep in eps if ep.group == group]

    return entry_points


def test_entry_point_resolves(monkeypatch, tmp_path):
    ep = EntryPoint(name="vendorstore", value="soak.stores.memory:open_memory", group="soak.stores")
    monkeypatch.setattr(stores, "entry_points", _fake_entry_points(ep))
    target = resolve("vendorstore?x=1")
    assert target.factory is open_memory and target.options == {"x": "1"}
    assert "entry point" in target.description


def test_entry_point_that_fails_to_load_is_one_line(monkeypatch):
    ep = EntryPoint(name="vendorstore", value="vendor_pkg_not_installed.store:open", group="soak.stores")
    monkeypatch.setattr(stores, "entry_points", _fake_entry_points(ep))
    with pytest.raises(StoreSpecError) as info:
        resolve("vendorstore")
    text = _one_line(info.value)
    assert "store entry point 'vendorstore'" in text and "failed to load" in text
    assert "ModuleNotFoundError" in text


def test_entry_point_lookup_miss_names_the_alternatives(monkeypatch):
    monkeypatch.setattr(stores, "entry_points", _fake_entry_points())
    with pytest.raises(StoreSpecError, match="no such entry point in group soak.stores"):
        resolve("vendorstore")


def test_a_factory_that_raises_is_a_boot_error(tmp_path):
    target = resolve("tests.broken_stores:open_refusing")
    with pytest.raises(StoreBootError) as info:
        target.open(str(tmp_path), 200)
    text = _one_line(info.value)
    assert "failed to boot" in text and "ConnectionRefusedError" in text and "no server here" in text
    assert info.value.exit_code == 2


def test_a_factory_returning_a_non_store_is_a_boot_error(tmp_path):
    target = StoreTarget("x:y", lambda location, *, lease_ttl_ms: object())
    with pytest.raises(StoreBootError) as info:
        target.open(str(tmp_path), 200)
    text = _one_line(info.value)
    assert "lacks" in text and "acquire" in text and "soak.spi.FencedRunStore" in text


def test_a_factory_that_hangs_is_a_boot_error(tmp_path):
    import time

    target = StoreTarget("slow:", lambda location, *, lease_ttl_ms: time.sleep(10))
    t0 = time.monotonic()
    with pytest.raises(StoreBootError, match="did not finish booting within 0.3 s"):
        target.open(str(tmp_path), 200, timeout_s=0.3)
    assert time.monotonic() - t0 < 5


def test_redact_hides_secrets():
    assert redact("postgresql://u:hunter2@db/x") == "postgresql://u:***@db/x"
    assert "s3cret" not in redact("pkg.mod:f?password=s3cret&token=t0k")
