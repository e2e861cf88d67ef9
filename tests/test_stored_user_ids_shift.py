"""Loaders QA12 N1: stored user ids 0..n−1 against a log whose users are numbered from 1
were used silently (39 of 40 users queried with their neighbour's vector: dot head share
0.1026 for the true 0.1225, a ``>0.12`` gate passed), while the same shift of item ids, or
of user ids taken as rows, was refused. User ids mapped through ids are now held to the one
rule (auditor/idmap.py ``check_mapped_shift`` through ``table_rows``), with the same fix: an
id file of each stored id + 1 is accepted, warned.

Known answer: the dot head share at K=10 computed here with numpy under the true pairing
(log user u + 1 is table row ``where(perm == u)``), training items excluded.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import IdMappingError
from auditor.model import InteractionPairs, ModelBundle
from auditor.probes.sampling import sample_batches
from tests.loader_world import DIM, K, N_ITEMS, N_USERS, loader_world


def _head_share(user_vectors: np.ndarray, item_table: np.ndarray, users: np.ndarray, items: np.ndarray,
                freq: np.ndarray) -> float:
    """Share of top-K slots on the 10% most frequent items, each user's training items excluded."""
    threshold = np.sort(freq)[::-1][max(1, int(0.1 * N_ITEMS)) - 1]
    head = (freq >= threshold) & (freq > 0)
    scores = user_vectors.astype(np.float64) @ item_table.T.astype(np.float64)
    scores[users, items] = -np.inf
    top = np.argsort(-scores, axis=1, kind="stable")[:, :K]
    return float(head[top].mean())


def _files(tmp_path: Path) -> tuple[Path, Path, np.ndarray, float]:
    users, items, freq, user_table, item_table, _ = loader_world()
    perm = np.random.default_rng(7).permutation(N_USERS)
    log = tmp_path / "log.parquet"
    pq.write_table(pa.table({"user_id": users + 1, "item_id": items}), log)  # users numbered 1..40
    model = tmp_path / "uids0.pt"
    torch.save({"user_embedding.weight": torch.from_numpy(user_table[perm]),
                "item_embedding.weight": torch.from_numpy(item_table),
                "user_ids": torch.from_numpy(perm.astype(np.int64))}, model)  # the rows' 0-based ids
    return model, log, perm, _head_share(user_table, item_table, users, items, freq)


def _check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(cli, ["check", *args, "--no-probes", "--bootstrap", "0", "-q", "-k", str(K)],
                                catch_exceptions=False)
    return result.exit_code, " ".join(result.output.split())


def test_stored_user_ids_shifted_against_the_log_are_refused(tmp_path: Path) -> None:
    model, log, perm, true_share = _files(tmp_path)
    assert true_share == pytest.approx(0.1225)
    gate = "head_share_10pct_dot@10>0.12"
    code, output = _check(str(model), "--interactions", str(log), "--fail-on", gate)
    assert code == 1, output  # was 0: 0.1026, users on their neighbours' vectors, the gate passed
    assert (f"Error: 1 of the 40 distinct user ids in the training log {log} have no row under the user ids stored in "
            f"{model} (`user_ids`), while every id minus 1 has one: the ids look shifted: if the rows are the ids minus "
            "1 (1-based ids), this mapping pairs each user with its neighbour's row. Pass --user-ids FILE with the raw "
            f"user id of each row as the training log {log} spells it (if they are shifted: each row's id +1, in row "
            "order; or --assume-row-ids") in output, output
    ids = tmp_path / "uids1.txt"  # the fix the message names
    ids.write_text("".join(f"{int(x) + 1}\n" for x in perm))
    report = tmp_path / "r.json"
    code, output = _check(str(model), "--interactions", str(log), "--user-ids", str(ids), "--json", str(report),
                          "--fail-on", gate)
    assert code == 3, output  # the true 0.1225 trips the gate the shifted pairing (0.1026) passed
    audited = json.loads(report.read_text())
    assert audited["retrieval"]["at"]["10"]["dot"]["head_share_10pct"] == pytest.approx(true_share, abs=1e-12)
    assert any(w.startswith(f"--user-ids {ids} renumbers the user ids stored in {model}: every row's id +1")
               for w in audited["warnings"]), audited["warnings"]
    code, _ = _check(str(model), "--interactions", str(log), "--assume-row-ids")
    assert code == 0


def test_probe_pairs_hold_stored_user_ids_to_the_same_rule(tmp_path: Path) -> None:
    """A live model's probe batches map the log's users through the same ids: refused alike."""
    bundle = ModelBundle(item_table=np.ones((N_ITEMS, DIM), np.float32), user_table=np.ones((N_USERS, DIM), np.float32),
                         user_ids=np.arange(N_USERS), source=tmp_path / "m.pt", format="state_dict")
    pairs = InteractionPairs(user_index=np.arange(N_USERS), item_rows=np.zeros(N_USERS, np.int64),
                             user_ids=np.arange(1, N_USERS + 1), source=tmp_path / "log.parquet")
    with pytest.raises(IdMappingError, match=r"1 of the 40 distinct user ids in .*log\.parquet have no row under the "
                                             r"model's user ids, while every id minus 1 has one"):
        sample_batches(bundle, pairs, object(), size=4, steps=1, rng=np.random.default_rng(0))  # type: ignore[arg-type]
    aligned = InteractionPairs(user_index=np.arange(N_USERS), item_rows=np.zeros(N_USERS, np.int64),
                               user_ids=np.arange(N_USERS), source=tmp_path / "log.parquet")
    assert len(sample_batches(bundle, aligned, object(), size=4, steps=1, rng=np.random.default_rng(0))) == 1  # type: ignore[arg-type]
