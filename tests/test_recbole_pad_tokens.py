"""RecBole's ``field2id_token`` as an id file, ``[PAD]`` first (QA formats #12b): the
docs tell users to pass it, and it was refused as one id too long. Its ``[PAD]`` entry
names the padding row popaudit drops, so it is left out and said so; any other file one
id longer than the table is refused as before."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli

DATA = Path(__file__).resolve().parent / "data" / "recbole"
FAST = ("--no-probes", "--bootstrap", "0", "-q", "--no-retrieval", "--format", "json")


def _audit(tmp_path: Path, items: list[str], users: list[str]) -> tuple[int, str, dict | None]:
    item_file, user_file, out = tmp_path / "items.txt", tmp_path / "users.txt", tmp_path / "r.json"
    item_file.write_text("\n".join(items) + "\n")
    user_file.write_text("\n".join(users) + "\n")
    ran = CliRunner().invoke(cli, ["check", str(DATA / "BPR-tiny.pth"), "--interactions", str(DATA / "tiny.inter"),
                                   "--item-ids", str(item_file), "--user-ids", str(user_file), *FAST, "-o", str(out)])
    report = json.loads(out.read_text()) if ran.exit_code == 0 else None
    return ran.exit_code, " ".join(ran.output.split()), report


def test_field2id_token_with_its_pad_entry_maps_the_rows(tmp_path: Path) -> None:
    tokens = json.loads((DATA / "BPR-tiny.tokens.json").read_text())
    assert tokens["item_id"][0] == tokens["user_id"][0] == "[PAD]"
    code, _, padded = _audit(tmp_path, tokens["item_id"], tokens["user_id"])
    assert code == 0 and padded is not None
    assert padded["inputs"]["item_id_mapping"].endswith("(its first entry, RecBole's [PAD] for the padding row, left out)")
    code, _, plain = _audit(tmp_path, tokens["item_id"][1:], tokens["user_id"][1:])
    assert code == 0 and plain is not None
    assert padded["frequency_norm"] == plain["frequency_norm"]  # the same rows, the same figures
    code, output, _ = _audit(tmp_path, ["x", *tokens["item_id"][1:]], tokens["user_id"][1:])  # not RecBole's [PAD]
    assert code == 1 and "has 81 ids but the item table in" in output and "has 80 rows" in output
