"""``render_outputs`` (docs/api.md "Write a report") never writes over a file the audit
read (QA Api F1): before, ``render_outputs(result, [("json", log)], pm)`` replaced the
training log and an HTML report replaced the model, where ``check --json LOG`` refuses.
Now the result's own inputs are checked, as the CLI checks them, and nothing is written."""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor import AuditConfig, AuditResult, run_audit
from auditor.errors import InputError
from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import audit_inputs, render_outputs


def _audited(tmp_path: Path) -> tuple[Path, Path, AuditResult]:
    rng = np.random.default_rng(0)
    model = tmp_path / "items.npy"
    np.save(model, rng.normal(size=(30, 4)).astype(np.float32))
    items = np.repeat(np.arange(30), np.arange(1, 31))
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": items}), log)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False))
    return model, log, result


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.mark.parametrize("target", ["model", "log"])
def test_render_outputs_refuses_the_audits_own_inputs(tmp_path: Path, target: str) -> None:
    model, log, result = _audited(tmp_path)
    before = {p: _sha(p) for p in (model, log)}
    victim = model if target == "model" else log
    setting = "model" if target == "model" else "interactions"
    ok = tmp_path / "ok.json"
    with pytest.raises(InputError, match=rf"the html report {victim} is the input file given as {setting}; "
                                         "popaudit never overwrites an input"):
        render_outputs(result, [("json", ok), ("html", victim)], get_plugin_manager())
    assert {p: _sha(p) for p in (model, log)} == before
    assert not ok.exists()  # all or none: the other report is not written either
    assert {p.name for p in tmp_path.iterdir()} == {"items.npy", "log.parquet"}


def test_a_link_or_another_spelling_of_an_input_is_refused(tmp_path: Path) -> None:
    model, log, result = _audited(tmp_path)
    (tmp_path / "sub").mkdir()
    spelled = tmp_path / "sub" / ".." / "log.parquet"
    with pytest.raises(InputError, match="is the input file given as interactions"):
        render_outputs(result, [("json", spelled)], get_plugin_manager())
    assert pq.read_table(log).num_rows == 465  # 1 + 2 + ... + 30 interactions, as written


def test_a_result_without_recorded_files_falls_back_to_its_inputs_section(tmp_path: Path) -> None:
    model, log, result = _audited(tmp_path)
    assert audit_inputs(result) == {"model": model, "interactions": log}
    bare = replace(result, read_files={})
    assert audit_inputs(bare) == {"model": model, "interactions": log}
    with pytest.raises(InputError, match="is the input file given as model"):
        render_outputs(bare, [("markdown", model)], get_plugin_manager())
    written = render_outputs(bare, [("json", tmp_path / "r.json")], get_plugin_manager())
    assert written == [tmp_path / "r.json"]


def test_an_input_named_relative_to_another_directory_is_still_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """QA Api N1: a notebook audits ``sample/log.parquet``, then ``%cd sample`` and writes
    ``log.parquet``: the same file, and it was overwritten because the read paths were kept
    relative to the directory of the audit."""
    (tmp_path / "sample").mkdir()
    monkeypatch.chdir(tmp_path)
    model, log = Path("sample/items.npy"), Path("sample/log.parquet")
    np.save(model, np.random.default_rng(0).normal(size=(30, 4)).astype(np.float32))
    items = np.repeat(np.arange(30), np.arange(1, 31))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": items}), log)
    result = run_audit(AuditConfig(model=model, interactions=log, ks=(5,), bootstrap=0, probes=False))
    before = _sha(log)
    monkeypatch.chdir(tmp_path / "sample")
    with pytest.raises(InputError, match="is the input file given as interactions"):
        render_outputs(result, [("json", Path("log.parquet"))], get_plugin_manager())
    assert _sha(tmp_path / "sample" / "log.parquet") == before
