"""diff of two audits that served other vectors (a RecBole LightGCN's propagated vectors
against its stored tables standing in, the same checkpoint): every retrieval, accuracy
and served figure is not comparable, the setting named, and a gate on one is not
measured (issue "Served F9": it read "+50% more bias" and tripped exit 3)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli
from auditor.diff import diff_reports

from recbole_helpers import write_checkpoint, write_inter

N_USERS, N_ITEMS = 12, 15


def check(*args: str) -> None:
    result = CliRunner().invoke(cli, ["check", *args, "--no-probes", "--bootstrap", "0", "-q", "-k", "5"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_propagated_against_stood_in_tables_are_not_compared(tmp_path: Path) -> None:
    inter, model = tmp_path / "x.inter", tmp_path / "LightGCN.pth"
    write_inter(inter, N_USERS, N_ITEMS, per_user=6, seed=3)
    write_checkpoint(model, "LightGCN", {"n_layers": 2}, N_USERS, N_ITEMS, dim=4, seed=1)
    # write_inter names every id first, in order: RecBole's tokens are u0.., i0.. after [PAD]
    (tmp_path / "items.txt").write_text("\n".join(["[PAD]"] + [f"i{k}" for k in range(N_ITEMS)]) + "\n")
    (tmp_path / "users.txt").write_text("\n".join(["[PAD]"] + [f"u{k}" for k in range(N_USERS)]) + "\n")
    check(str(model), "--interactions", str(inter), "--json", str(tmp_path / "a.json"))
    check(str(model), "--interactions", str(inter), "--item-ids", str(tmp_path / "items.txt"), "--user-ids",
          str(tmp_path / "users.txt"), "--json", str(tmp_path / "b.json"))
    base, new = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("a", "b"))
    assert base["served_vectors"]["source"] == "propagated" and new["served_vectors"]["as_served"] is False
    diff = diff_reports(base, new)
    head = diff.metric("head_share_1pct_dot@5")
    assert head.status == "incomparable" and head.delta is None
    assert 'served_vectors.source differs ("propagated" vs "tables")' in (head.reason or "")
    assert {s.setting for s in diff.settings} >= {"served_vectors.source", "served_vectors.as_served"}
    # The stored table's own figure is not the served vectors' to flag; RecBole's rule and the same numbering
    # written to files are one mapping by content (the ids' fingerprints agree, QA11 diffapi N2): compared, with
    # the note that the training log differs (the split's training part against the whole file).
    assert base["inputs"]["item_id_fingerprint"] == new["inputs"]["item_id_fingerprint"] is not None
    assert diff.metric("spearman").status == "compared"
    assert any("inputs.n_interactions differs (63 vs 87)" in note for note in diff.notes)
    same = diff_reports(base, base)
    assert same.metric("head_share_1pct_dot@5").status == "compared" and not same.settings
    gate = CliRunner().invoke(cli, ["diff", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "-q", "--fail-on",
                                    "gini_dot@5.delta>0.02"])
    assert gate.exit_code == 1 and "served_vectors.source differs" in gate.output, gate.output
