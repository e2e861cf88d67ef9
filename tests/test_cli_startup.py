"""The collector around ``check``'s imports: paused inside, the imports' objects frozen
out of later collections, everything handed back after the run."""

import gc

from auditor.cli._startup import frozen_for_the_run, imports_without_gc


def test_imports_run_without_collections_and_are_frozen_then_released():
    collections: list[str] = []

    def seen(phase: str, info: dict) -> None:
        if phase == "start":
            collections.append(phase)

    assert gc.isenabled()
    gc.callbacks.append(seen)
    try:
        with frozen_for_the_run():
            with imports_without_gc():
                assert not gc.isenabled()
                built = [[i] for i in range(50_000)]  # would trigger gen-0 collections
                assert collections == []
            assert gc.isenabled()
            assert gc.get_freeze_count() >= len(built)
        assert gc.get_freeze_count() == 0
    finally:
        gc.callbacks.remove(seen)


def test_a_disabled_collector_stays_disabled():
    gc.disable()
    try:
        with frozen_for_the_run(), imports_without_gc():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
