"""An id offset where it applies, and where the table contradicts it: the offset maps the
user rows when only they take ids as rows (QA formats #5: the advice to pass it was
refused), and an offset that puts a trained item on an all-zero padding row 0 stops the
audit (QA formats #7: ρ 0.99 read as 0.71, severity none as moderate)."""

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
from auditor.idmap import check_given_offset
from auditor.values import RowIdPolicy

N, USERS, DIM = 12, 5, 4
FAST = ("--no-probes", "--bootstrap", "0", "-q", "-k", "3")


def _run(*args: object) -> tuple[int, str, dict | None]:
    out = Path(str(args[0])).parent / "r.json"
    ran = CliRunner().invoke(cli, ["check", *map(str, args), *FAST, "--format", "json", "-o", str(out)])
    report = json.loads(out.read_text()) if ran.exit_code == 0 else None
    out.unlink(missing_ok=True)
    return ran.exit_code, " ".join(ran.output.split()), report


def _vectors(norms: np.ndarray) -> torch.Tensor:
    directions = np.random.default_rng(0).normal(size=(norms.size, DIM))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    return torch.from_numpy((directions * norms[:, None]).astype(np.float32))


def _log(path: Path, item_base: int, user_base: int) -> Path:
    """Item i (0-based) seen i + 1 times; ids written from ``item_base``/``user_base``."""
    items = np.repeat(np.arange(N), np.arange(1, N + 1))
    users = np.arange(items.size) % USERS
    pq.write_table(pa.table({"user_id": users + user_base, "item_id": items + item_base}), path)
    return path


def test_the_offset_maps_the_user_rows_beside_an_item_id_file(tmp_path: Path) -> None:
    model = tmp_path / "mf.pt"
    torch.save({"item_emb.weight": _vectors(np.arange(1.0, N + 1)), "user_emb.weight": _vectors(np.ones(USERS))}, model)
    log = _log(tmp_path / "log.parquet", item_base=100, user_base=1)  # items 100..111, 1-based users
    ids = tmp_path / "ids.txt"
    ids.write_text("\n".join(str(100 + i) for i in range(N)))
    code, output, _ = _run(model, "--interactions", log, "--item-ids", ids)
    assert code == 1 and "pass --id-offset 1 instead" in output  # the advice ...
    code, _, report = _run(model, "--interactions", log, "--item-ids", ids, "--id-offset", "1")  # ... now works
    assert code == 0 and report is not None
    assert report["inputs"]["item_id_mapping"] == (f"item rows mapped through --item-ids {ids} (the rows audited hold the "
                                                   f"ids 100..{100 + N - 1} in order: row = raw item id − 100)")
    assert report["inputs"]["user_id_mapping"] == "user table row = raw user id − 1 (--id-offset 1)"
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)
    assert report["retrieval"]["population"]["n_queries"] == USERS


def test_an_offset_that_applies_to_nothing_is_still_refused(tmp_path: Path) -> None:
    table = tmp_path / "items.parquet"
    vectors = _vectors(np.arange(1.0, N + 1)).numpy()
    pq.write_table(pa.table({"item_id": np.arange(N), "embedding": pa.array(list(vectors), pa.list_(pa.float32()))}),
                   table)  # fmt: skip
    refused = (f"Error: --id-offset applies where ids are taken as rows, but the item rows of {table} are mapped "
               f"through the item ids stored in {table}")
    code, output, _ = _run(table, "--interactions", _log(tmp_path / "log.parquet", 0, 0), "--id-offset", "1")
    assert code == 1 and refused in output
    code, output, _ = _run(table, "--id-offset", "1")  # without a log too: it used to vanish with no word
    assert code == 1 and refused in output


def _padded(tmp_path: Path) -> tuple[Path, Path]:
    """nn.Embedding(n + 1, padding_idx=0) tables: row 0 zeros, row = 1-based id."""
    items = torch.cat([torch.zeros(1, DIM), _vectors(np.arange(1.0, N + 1))])
    users = torch.cat([torch.zeros(1, DIM), _vectors(np.ones(USERS))])
    model = tmp_path / "pad.pt"
    torch.save({"item_emb.weight": items, "user_emb.weight": users}, model)
    return model, _log(tmp_path / "log.parquet", item_base=1, user_base=1)


def test_an_offset_onto_the_padding_row_is_refused(tmp_path: Path) -> None:
    model, log = _padded(tmp_path)
    code, _, report = _run(model, "--interactions", log)
    assert code == 0 and report is not None
    assert report["frequency_norm"]["spearman"] == pytest.approx(1.0)  # padding: a cold row of norm 0
    code, output, _ = _run(model, "--interactions", log, "--id-offset", "1")  # used to audit the shifted rows
    assert code == 1
    assert ("Error: with --id-offset 1, item id 1 (1 interaction in " in output
            and "lands on row 0 of the 13-row item table, which is all zeros" in output
            and "Drop --id-offset (or pass --assume-row-ids to audit with the offset anyway)" in output)
    code, _, report = _run(model, "--interactions", log, "--id-offset", "1", "--assume-row-ids")
    assert code == 0 and report is not None


def test_check_given_offset_needs_every_piece_of_evidence() -> None:
    zero, ids, counts = np.zeros(3), np.arange(1, 10), np.arange(1, 10) * 2
    with pytest.raises(IdMappingError, match=r"with id_offset 1, item id 1 \(2 interactions in log\) lands on row 0 "
                                             r"of the 10-row item table"):
        check_given_offset(ids, counts, 10, RowIdPolicy(1), "item", "log", zero)
    check_given_offset(ids, counts, 10, RowIdPolicy(1), "item", "log", np.ones(3))  # row 0 trained
    check_given_offset(ids, counts, 9, RowIdPolicy(1), "item", "log", zero)  # id 9 needs the offset
    check_given_offset(ids[1:], counts[1:], 10, RowIdPolicy(1), "item", "log", zero)  # nothing lands on row 0
    check_given_offset(ids, counts, 10, RowIdPolicy(1, assume_row_ids=True), "item", "log", zero)
    check_given_offset(ids, counts, 10, RowIdPolicy(None), "item", "log", zero)
