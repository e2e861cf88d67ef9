"""The query population's log-derived parts kept between audits (auditor/loading/log_memo.py):
the second audit of a log and item mapping reads nothing, gets the same population, and a
rewritten log, another mapping or another sample is read again."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from auditor.config import AuditConfig
from auditor.loading import history, log_memo
from auditor.loading.csr import build_csr, mean_rows
from auditor.loading.log_memo import LogMemo
from auditor.loading.population import load_population
from auditor.model import ModelBundle, QueryPopulation

LOG = "user_id,item_id\n4,2\n9,1\n7,0\n4,2\n4,5\n7,8\n2,4\n"


@pytest.fixture
def log(tmp_path: Path) -> Path:
    """The training log both memo tests audit (users 4, 9, 7, 2)."""
    path = tmp_path / "train.csv"
    path.write_text(LOG)
    return path


def _bundle(tmp_path: Path, n_items: int = 6, item_ids: np.ndarray | None = None) -> ModelBundle:
    items = np.arange(1, n_items * 3 + 1, dtype=np.float32).reshape(n_items, 3)
    return ModelBundle(source=tmp_path / "model.npy", format="npy", item_table=items, item_ids=item_ids)


def _population(bundle: ModelBundle, memo: LogMemo, **settings: object) -> QueryPopulation:
    config = AuditConfig(model=bundle.source, **settings)  # type: ignore[arg-type]
    return load_population(
        bundle, queries=config.queries, log=config.training_log, mapping=config.item_rows(bundle),
        row_ids=config.row_ids, max_queries=config.max_queries, seed=config.seed, keep_seen=config.keep_seen,
        memo=memo,
    )


def _seen(population: QueryPopulation) -> list[list[int]]:
    indptr, rows = population.seen_indptr, population.seen_rows
    assert indptr is not None and rows is not None
    return [rows[indptr[u] : indptr[u + 1]].tolist() for u in range(population.n_queries)]


def _reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Counts the passes over a log (users, then the chosen users' items)."""
    import auditor.loading.population as population

    calls: list[str] = []
    real_users, real_seen = history.eligible_users, population._seen_rows

    def users(*args: Any, **kwargs: Any) -> Any:
        calls.append("users")
        return real_users(*args, **kwargs)

    def seen(*args: Any, **kwargs: Any) -> Any:
        calls.append("seen")
        return real_seen(*args, **kwargs)

    monkeypatch.setattr(population, "eligible_users", users)
    monkeypatch.setattr(population, "_seen_rows", seen)
    return calls


def test_second_audit_of_a_log_reads_nothing_and_gets_the_same_population(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: Path
) -> None:
    reads, memo = _reads(monkeypatch), LogMemo()
    first = _population(_bundle(tmp_path), memo, interactions=log)
    assert reads == ["users", "seen"]
    # Another model of the same shape (other vectors): the log's parts come from the memo.
    other = _bundle(tmp_path)
    other.item_table[:] *= 2
    second = _population(other, memo, interactions=log)
    assert reads == ["users", "seen"] and memo.hits == 2
    assert second.raw_ids is not None and first.raw_ids is not None
    assert second.raw_ids.tolist() == first.raw_ids.tolist() == [4, 9, 7, 2]
    assert _seen(second) == _seen(first) == [[2, 5], [1], [0], [4]]
    np.testing.assert_array_equal(second.vectors, 2 * first.vectors)  # means of this model's rows
    assert second.seen_rows is not None and not second.seen_rows.flags.writeable  # shared: read-only


def test_another_mapping_sample_or_a_rewritten_log_is_read_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, log: Path
) -> None:
    reads, memo = _reads(monkeypatch), LogMemo()
    _population(_bundle(tmp_path), memo, interactions=log)
    # 9 rows: item 8 now has a row, so user 7 has two training items.
    wider = _population(_bundle(tmp_path, n_items=9), memo, interactions=log)
    assert reads.count("users") == 2 and _seen(wider)[2] == [0, 8]
    # Rows through raw ids reversed: another mapping again.
    ids = np.arange(6)[::-1].copy()
    mapped = _population(_bundle(tmp_path, item_ids=ids), memo, interactions=log)
    assert reads.count("users") == 3 and _seen(mapped)[0] == [0, 3]  # items 5 and 2 at rows 0 and 3
    # A sample of the same users: their list is read from the log again, the users are not.
    sampled = _population(_bundle(tmp_path), memo, interactions=log, max_queries=2, seed=1)
    assert reads.count("users") == 3 and reads.count("seen") == 4 and sampled.n_queries == 2
    # The log rewritten (another size and time): read again, the new interactions seen.
    log.write_text(LOG + "2,3\n")
    os.utime(log, ns=(1, 1))
    again = _population(_bundle(tmp_path), memo, interactions=log)
    assert reads.count("users") == 4 and _seen(again)[3] == [3, 4]


def test_memo_keeps_few_entries_and_bounded_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    memo = LogMemo()
    for i in range(log_memo.MEMO_ENTRIES + 3):
        memo.get(("k", i), lambda: np.zeros(10))
    assert len(memo.entries) == log_memo.MEMO_ENTRIES and ("k", 0) not in memo.entries
    monkeypatch.setattr(log_memo, "MEMO_BYTES", 100)
    memo.get(("big",), lambda: np.zeros(1000))  # over the budget alone: kept, the others dropped
    assert list(memo.entries) == [("big",)]
    with pytest.raises(ValueError):
        memo.get(("fails",), lambda: int("x"))
    assert ("fails",) not in memo.entries


def test_mean_rows_sums_in_set_order_in_float64_whatever_the_block_size(monkeypatch: pytest.MonkeyPatch) -> None:
    """Means as a running float64 sum per set (blocks split a set into partial sums), exact
    against a hand-written loop; -0.0 and empty sets included; tables larger than a block
    gather their distinct rows."""
    import auditor.loading.csr as csr

    rng = np.random.default_rng(3)
    for n_items, block in ((40, 1 << 16), (40, 7), (300, 50)):
        table = rng.standard_normal((n_items, 5)).astype(np.float32)
        table[::5] = -0.0
        owners, items = rng.integers(0, 30, 400), rng.integers(0, n_items, 400)
        indptr, rows = build_csr(owners, items, 32)  # sets 30 and 31 empty
        monkeypatch.setattr(csr, "GATHER_ROWS", block)
        expected = np.zeros((32, 5), np.float64)
        for start in range(0, rows.shape[0], block):  # the same blocks, added one row at a time
            partial = np.zeros((32, 5), np.float64)
            for at in range(start, min(start + block, rows.shape[0])):
                owner = int(np.searchsorted(indptr, at, "right")) - 1
                partial[owner] += table[rows[at]]
            expected += partial
        expected = (expected / np.maximum(np.diff(indptr), 1)[:, None]).astype(np.float32)
        got = mean_rows(table, indptr, rows)
        np.testing.assert_array_equal(got.view(np.int32), expected.view(np.int32))


def test_group_preparation_is_shared_only_for_the_same_read_only_profiles() -> None:
    from auditor.metrics import group_state
    from auditor.plugin_api import ListContext

    rng = np.random.default_rng(0)
    popularity = rng.integers(1, 50, 40).astype(np.float64)
    indptr, rows = build_csr(rng.integers(0, 12, 200), rng.integers(0, 40, 200), 12)
    for array in (indptr, rows):
        array.setflags(write=False)
    first = group_state.prepared(ListContext(popularity.copy(), profiles=(indptr, rows)))
    again = group_state.prepared(ListContext(popularity.copy(), profiles=(indptr, rows)))
    assert again is first  # another audit (context) of the same population and popularity
    other_pop = popularity.copy()
    other_pop[0] += 1
    assert group_state.prepared(ListContext(other_pop, profiles=(indptr, rows))) is not first
    writable = (indptr.copy(), rows.copy())
    one = group_state.prepared(ListContext(popularity.copy(), profiles=writable))
    assert group_state.prepared(ListContext(popularity.copy(), profiles=writable)) is not one
    fresh = group_state._prepare(ListContext(popularity.copy(), profiles=(indptr, rows)))
    np.testing.assert_array_equal(fresh.profile_shares, again.profile_shares)
    np.testing.assert_array_equal(fresh.user_group, again.user_group)
