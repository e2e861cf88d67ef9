"""The typed descriptions every log reader takes: ``LogSpec`` (which log, how to read it)
and ``ItemRows`` (how raw item ids become table rows), and how ``AuditConfig`` builds them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.config import AuditConfig
from auditor.errors import IdMappingError
from auditor.loading import align_counts, count_item_ids, read_pairs
from auditor.values import ItemRows
from auditor.values import LogSpec
from auditor.model import ModelBundle


def test_item_rows_need_one_raw_id_per_row() -> None:
    with pytest.raises(IdMappingError, match=r"^3 item ids for a table of 2 rows$"):
        ItemRows(np.array([7, 8, 9]), 2)
    assert ItemRows(None, 2, offset=1).lookup is None  # ids taken as rows: nothing to look up


def test_one_mapping_gives_counts_and_pairs_the_same_rows(tmp_path: Path) -> None:
    log = tmp_path / "log.csv"
    # 1-based ids 1..3 on a 3-row table; id 4 has no row under offset 1.
    log.write_text("user_id,item_id\nu,1\nu,3\nv,3\nv,4\nw,2\n")
    spec = LogSpec(str(log))  # a str path is taken as a Path
    assert spec.path == log and (spec.fmt, spec.user_col, spec.item_col) == ("auto", None, None)
    mapping = ItemRows(None, 3, offset=1)
    stats = align_counts(count_item_ids(spec), mapping)
    assert stats.frequencies.tolist() == [1, 1, 2]
    assert (stats.n_unmapped, stats.n_unmapped_ids) == (1, 1)
    pairs = read_pairs(spec, mapping)
    assert pairs.item_rows.tolist() == [0, 2, 2, 1]
    assert pairs.user_ids.tolist() == ["u", "v", "w"] and pairs.user_index.tolist() == [0, 0, 1, 2]
    by_ids = read_pairs(spec, ItemRows(np.array([3, 4, 1]), 3))  # raw id of each row
    assert by_ids.item_rows.tolist() == [2, 0, 0, 1]


def test_audit_config_describes_its_logs_and_item_rows() -> None:
    config = AuditConfig(model=Path("m.pt"), interactions=Path("train.tsv"), holdout=Path("test.tsv"),
                         interactions_format="tsv", user_col="who", item_col="what", id_offset=1)
    assert config.training_log == LogSpec(Path("train.tsv"), "tsv", "who", "what")
    assert config.holdout_log == LogSpec(Path("test.tsv"), "tsv", "who", "what")  # read as the training log
    rows = config.item_rows(ModelBundle(source=Path("m.npy"), format="npy", item_table=np.zeros((10, 2))))
    assert (rows.item_ids, rows.n_items, rows.offset) == (None, 10, 1)
    bare = AuditConfig(model=Path("m.pt"))
    assert bare.training_log is None and bare.holdout_log is None and bare.item_rows(ModelBundle(source=Path("m.npy"), format="npy", item_table=np.zeros((4, 2)))).offset == 0
