"""QA diffapi F6: run_audit left KMP_DUPLICATE_LIB_OK=True in the caller's os.environ
(threadpoolctl and scikit-learn set it when imported), which children inherit and which
silences Intel OpenMP's duplicate-runtime abort; auditor.environment undoes it on return."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

from auditor.environment import environment_kept

ROOT = Path(__file__).resolve().parents[1]

AUDIT = """
import json, os
from pathlib import Path
before = dict(os.environ)
from auditor import AuditConfig, run_audit
run_audit(AuditConfig(model=Path("sample_data/biased.pt"), interactions=Path("sample_data/interactions.parquet"),
                      ks=(10,), bootstrap=0, probes=False))
import threadpoolctl  # imported by the audit: its import set the variable
print(json.dumps({k: [before.get(k), v] for k, v in os.environ.items() if before.get(k) != v}))
"""


def test_run_audit_leaves_the_callers_environment_as_it_found_it() -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KMP_")}
    done = subprocess.run([sys.executable, "-c", AUDIT], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=True)
    assert json.loads(done.stdout.strip().splitlines()[-1]) == {}


def test_the_outermost_call_restores_what_was_added_or_changed(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("POPAUDIT_TEST_KEPT", "caller")
    monkeypatch.delenv("POPAUDIT_TEST_ADDED", raising=False)
    with environment_kept():
        with environment_kept():  # nested (an audit inside an audit's plugin): the inner exit undoes nothing
            os.environ["POPAUDIT_TEST_ADDED"] = "True"
            os.environ["POPAUDIT_TEST_KEPT"] = "library"
        assert os.environ["POPAUDIT_TEST_ADDED"] == "True"
    assert "POPAUDIT_TEST_ADDED" not in os.environ and os.environ["POPAUDIT_TEST_KEPT"] == "caller"


def test_concurrent_calls_restore_once_the_last_leaves(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.delenv("POPAUDIT_TEST_ADDED", raising=False)
    entered, release = threading.Event(), threading.Event()
    seen: list[str | None] = []

    def other() -> None:
        with environment_kept():
            entered.set()
            release.wait(10)
            seen.append(os.environ.get("POPAUDIT_TEST_ADDED"))

    thread = threading.Thread(target=other)
    thread.start()
    entered.wait(10)
    with environment_kept():
        os.environ["POPAUDIT_TEST_ADDED"] = "True"  # a lazy import in this thread, while the other audit runs
    assert os.environ.get("POPAUDIT_TEST_ADDED") == "True"  # the other call is still inside
    release.set()
    thread.join(10)
    assert seen == ["True"] and "POPAUDIT_TEST_ADDED" not in os.environ
