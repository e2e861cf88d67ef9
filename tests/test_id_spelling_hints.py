"""Why no id matched, said once for item and user ids alike (QA12 logs F2).

Ids match as spelled: zero-padded ids ("007") are text and never match the integer 7. A
padded ``--item-ids`` file beside a log of integers was refused with "pass --item-ids with
the raw id of each row", an option already passed, and no word about the spelling; the
user side said only "the log's users are not the model's users". Both now name the
padding (as decimals beside integers were named), and no refusal advises passing the
id-file option it was given.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from scipy.stats import spearmanr

from auditor.cli import cli
from auditor.id_spelling import decimal_spelled, spelled_apart, zero_padded

FAST = ("--no-probes", "--bootstrap", "0", "-q")
N_ITEMS, N_USERS = 40, 12


def _check(*args: object) -> tuple[int, str]:
    ran = CliRunner().invoke(cli, ["check", *map(str, args), *FAST])
    return ran.exit_code, " ".join(ran.output.split())


@pytest.fixture()
def inputs(tmp_path: Path) -> tuple[Path, np.ndarray, np.ndarray]:
    """A two-tower state dict, and a CSV log of integer ids (the QA's base.py)."""
    rng = np.random.default_rng(1)
    users = rng.integers(0, 10, 300)
    items = np.minimum(rng.zipf(1.5, 300) - 1, N_ITEMS - 1)
    counts = np.bincount(items, minlength=N_ITEMS)
    table = (rng.normal(size=(N_ITEMS, 8)) * (1 + np.log1p(counts))[:, None]).astype(np.float32)
    torch.save({"user_embedding.weight": torch.tensor(rng.normal(size=(N_USERS, 8)), dtype=torch.float32),
                "item_embedding.weight": torch.tensor(table)}, tmp_path / "m.pt")
    (tmp_path / "log.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    return tmp_path, counts, table


def test_which_ids_are_zero_padded() -> None:
    mask = zero_padded(np.array(["007", "12", "-01", "0", " 042 "], dtype=object))
    assert mask is not None and mask.tolist() == [True, False, True, False, True]
    assert zero_padded(np.array(["7", "12"], dtype=object)) is None  # nothing padded
    assert zero_padded(np.array(["007", "x7"], dtype=object)) is None  # not every id an integer's spelling
    assert zero_padded(np.array(["0-7", "--07"], dtype=object)) is None
    assert zero_padded(np.arange(3)) is None
    padded, plain = np.array(["000", "007", "012"], dtype=object), np.array([12, 3])
    assert spelled_apart(plain, padded, "ids.txt") == (
        "the ids of ids.txt are zero-padded ('012'), the log's are not (12); a zero-padded id is text, so it "
        "matches no integer id: write both the same way")  # the pair shown spells one integer twice
    assert "the log's ids are zero-padded ('012'), those of ids.txt are not (12)" in str(
        spelled_apart(padded, plain, "ids.txt"))
    assert spelled_apart(np.array(["a", "b"], dtype=object), plain, "ids.txt") is None


def test_zero_padded_item_ids_beside_integers(inputs: tuple[Path, np.ndarray, np.ndarray]) -> None:
    folder, counts, table = inputs
    (folder / "ipad.txt").write_text("".join(f"{row:03d}\n" for row in range(N_ITEMS)))
    code, text = _check(folder / "m.pt", "--interactions", folder / "log.csv", "--item-ids", folder / "ipad.txt")
    assert code == 1
    assert f"matches a row of the item table: the ids of --item-ids {folder / 'ipad.txt'} are zero-padded ('000'), " \
           "the log's are not (0); a zero-padded id is text, so it matches no integer id: write both the same way" in text
    assert "pass --item-ids" not in text
    _written_the_same_way(folder, counts, table)


def test_partly_zero_padded_item_ids_refused_by_share(inputs: tuple[Path, np.ndarray, np.ndarray]) -> None:
    """QA12 logs N2: an id file written f"{row:02d}" pads 0..9 alone; the rows 10..39 map,
    most interactions (a Zipf log's head) do not, and the refusal named no cause."""
    folder, counts, _ = inputs
    (folder / "i02.txt").write_text("".join(f"{row:02d}\n" for row in range(N_ITEMS)))
    code, text = _check(folder / "m.pt", "--interactions", folder / "log.csv", "--item-ids", folder / "i02.txt")
    share = counts[:10].sum() / counts.sum()
    assert code == 1 and share > 0.5
    assert f"({share:.1%}) reference {np.count_nonzero(counts[:10])} item ids with no row under --item-ids " in text
    assert f"of the log. The ids of --item-ids {folder / 'i02.txt'} are zero-padded ('00'), the log's are not (0); a " \
           "zero-padded id is text, so it matches no integer id: write both the same way (or --assume-row-ids" in text
    assert "List in --item-ids" not in text


def test_zero_padded_user_ids_beside_integers(inputs: tuple[Path, np.ndarray, np.ndarray]) -> None:
    folder = inputs[0]
    (folder / "upad.txt").write_text("".join(f"{row:03d}\n" for row in range(N_USERS)))
    code, text = _check(folder / "m.pt", "--interactions", folder / "log.csv", "--user-ids", folder / "upad.txt")
    assert code == 1
    assert f"(--user-ids {folder / 'upad.txt'}): the ids of --user-ids {folder / 'upad.txt'} are zero-padded " \
           "('000'), the log's are not (0); a zero-padded id is text, so it matches no integer id" in text
    assert "pass --user-ids" not in text and "not the model's users" not in text


def test_stored_ids_that_match_nothing_advise_the_id_file(tmp_path: Path) -> None:
    """Not given, the option is what to pass; given, its file is what to rewrite."""
    table = np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32)
    np.savez(tmp_path / "model.npz", item_embeddings=table, item_ids=np.array([f"x{i}" for i in range(10)]))
    (tmp_path / "log.csv").write_text("user_id,item_id\n" + "".join(f"{k % 3},{k % 10}\n" for k in range(30)))
    code, text = _check(tmp_path / "model.npz", "--interactions", tmp_path / "log.csv")
    assert code == 1
    assert "the log's items are not the model's items, or are spelled otherwise (the log: 0; the item ids stored in " \
           f"{tmp_path / 'model.npz'} (`item_ids`): 'x0'); pass --item-ids FILE with the raw item id of each row as the log " \
           "spells it" in text
    (tmp_path / "ids.txt").write_text("".join(f"y{i}\n" for i in range(10)))
    code, text = _check(tmp_path / "model.npz", "--interactions", tmp_path / "log.csv", "--item-ids", tmp_path / "ids.txt")
    assert code == 1
    assert f"list in --item-ids {tmp_path / 'ids.txt'} the raw item id of each row as the log spells it" in text
    assert "pass --item-ids" not in text


def test_partly_decimal_item_ids_refused_by_share(inputs: tuple[Path, np.ndarray, np.ndarray]) -> None:
    """QA12 logs verify-2 N5: an id file writing 0.0..9.0 then 10..39 (the decimal sibling of
    N2) was refused by share with "list in --item-ids the raw item id", no cause named."""
    folder, counts, table = inputs
    (folder / "idec.txt").write_text("".join(f"{row}.0\n" if row < 10 else f"{row}\n" for row in range(N_ITEMS)))
    code, text = _check(folder / "m.pt", "--interactions", folder / "log.csv", "--item-ids", folder / "idec.txt")
    share = counts[:10].sum() / counts.sum()
    assert code == 1 and share > 0.5
    assert f"({share:.1%}) reference {np.count_nonzero(counts[:10])} item ids with no row under --item-ids " in text
    assert f"of the log. Some of the ids of --item-ids {folder / 'idec.txt'} are written as decimals ('0.0'), the " \
           "log's as integers (0); a decimal id is text, so it matches no integer id: write both the same way " \
           "(pandas: .astype(\"Int64\") for a column of integers holding missing values) (or --assume-row-ids" in text
    assert "List in --item-ids" not in text
    _written_the_same_way(folder, counts, table)


def test_which_ids_are_decimals() -> None:
    mask = decimal_spelled(np.array(["3.0", "12", "-1.00", "0", " 4.0 "], dtype=object))
    assert mask is not None and mask.tolist() == [True, False, True, False, True]
    assert decimal_spelled(np.array(["7", "12"], dtype=object)) is None  # no decimal
    assert decimal_spelled(np.array(["3.5", "12"], dtype=object)) is None  # not a whole decimal
    assert decimal_spelled(np.array(["3.0", "x"], dtype=object)) is None  # not every id an integer's spelling
    assert decimal_spelled(np.arange(3)) is None
    plain = np.array([12, 3])
    assert spelled_apart(np.array(["12.0", "3"], dtype=object), plain, "ids.txt") == (
        "some of the log's ids are written as decimals ('12.0'), those of ids.txt as integers (12); a decimal id is "
        "text, so it matches no integer id: write both the same way (pandas: .astype(\"Int64\") for a column of "
        "integers holding missing values)")
    assert "writes every id as a decimal (3.0)" in str(spelled_apart(plain, np.array(["3.0", "12.0"], dtype=object),
                                                                     "ids.txt"))  # every id: as before


def _written_the_same_way(folder: Path, counts: np.ndarray, table: np.ndarray) -> None:
    """Ids written as the log writes them, as the message says: every row maps and ρ is scipy's."""
    (folder / "iplain.txt").write_text("".join(f"{row}\n" for row in range(N_ITEMS)))
    report = folder / "r.json"
    assert _check(folder / "m.pt", "--interactions", folder / "log.csv", "--item-ids", folder / "iplain.txt",
                  "--json", report)[0] == 0
    expected = spearmanr(counts, np.linalg.norm(table.astype(np.float64), axis=1))[0]
    assert json.loads(report.read_text())["frequency_norm"]["spearman"] == pytest.approx(expected, abs=1e-12)
