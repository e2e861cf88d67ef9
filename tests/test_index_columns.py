"""``item_index``/``user_index`` are id column names, so beside ``item_id``/``user_id`` they are
ambiguous as ``item_idx`` is (Logs F6 of QA round 10). Before, ``item_id`` was taken silently
beside ``item_index``, although the choice decides the figures."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from auditor.errors import InteractionsError
from auditor.loading import count_item_ids
from auditor.values import LogSpec


def _write(path: Path, columns: dict[str, np.ndarray]) -> None:
    if path.suffix == ".parquet":
        pq.write_table(pa.table(columns), path)
    else:
        names = list(columns)
        path.write_text(",".join(names) + "\n" + "".join(
            ",".join(str(columns[c][r]) for c in names) + "\n" for r in range(len(columns[names[0]]))))


def _log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.integers(0, 10, 300), np.minimum(rng.zipf(1.5, 300) - 1, 39)


@pytest.mark.parametrize("suffix", [".csv", ".parquet"])
@pytest.mark.parametrize(("role", "extra"), [("item", "item_index"), ("item", "ItemIndex"), ("user", "user_index")])
def test_an_index_column_beside_the_id_column_is_ambiguous(tmp_path: Path, suffix: str, role: str, extra: str) -> None:
    users, items = _log()
    path = tmp_path / f"log{suffix}"
    _write(path, {"user_id": users, "item_id": items, extra: 39 - items if role == "item" else 9 - users})
    with pytest.raises(InteractionsError, match=rf"could be the {role} id column \('{role}_id', '{extra}'\); "
                       rf"pass {role}_col NAME"):
        count_item_ids(LogSpec(path))
    picked = count_item_ids(LogSpec(path, user_col="user_id", item_col=extra if role == "item" else "item_id"))
    want = np.bincount(39 - items if role == "item" else items, minlength=40)  # numpy, by the column picked
    assert dict(zip(picked.ids.tolist(), picked.counts.tolist())) == {i: int(c) for i, c in enumerate(want) if c}


def test_an_index_column_alone_is_the_id_column(tmp_path: Path) -> None:
    users, items = _log()
    path = tmp_path / "log.parquet"
    _write(path, {"user_index": users, "item_index": items})
    counts = count_item_ids(LogSpec(path))
    assert counts.item_col == "item_index" and counts.user_col == "user_index"
    assert counts.counts.tolist() == np.bincount(items)[np.bincount(items) > 0].tolist()
