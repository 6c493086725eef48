"""The public surface is what the docs say it is (httpx's test_exported_members)."""

import soak
import soak.spi


def test_package_exports_are_sorted_and_present():
    assert soak.__all__ == sorted(soak.__all__)
    for name in soak.__all__:
        assert hasattr(soak, name), name


def test_pinned_contract_names():
    pinned = {
        "Lease", "JournalEntry", "RunMeta", "StoreError", "LeaseHeldError",
        "JournalOrderError", "StoreBusyError",
    }
    for name in pinned:
        assert getattr(soak.spi, name) is getattr(soak, name)
    assert issubclass(soak.LeaseHeldError, soak.StoreError)
    assert issubclass(soak.JournalOrderError, soak.StoreError)
    assert issubclass(soak.StoreBusyError, soak.StoreError)


def test_lease_held_error_carries_run_and_holder():
    holder = soak.Lease("r1", "a", 3)
    err = soak.LeaseHeldError("r1", holder)
    assert err.run_id == "r1" and err.holder == holder
    assert soak.LeaseHeldError("r2").holder is None


def test_records_are_frozen():
    import dataclasses

    lease = soak.Lease("r", "o", 1)
    try:
        lease.epoch = 2  # type: ignore[misc]
    except dataclasses.FrozenInstanceError:
        pass
    else:
        raise AssertionError("Lease must be frozen")
    assert soak.RunMeta("r", "running", 0).payload == b""
