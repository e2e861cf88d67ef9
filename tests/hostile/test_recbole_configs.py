"""Hostile RecBole run settings: checkpoints whose recorded ``eval_args`` (or data settings)
make RecBole's evaluation split unreproducible (auditor/loading/recbole_split.py).

Each checkpoint is made by the case (tests/recbole_helpers.py pickles a stand-in for
RecBole's ``Config``), with a RecBole ``.inter`` file beside it. The library refuses every
one today, naming the setting and the ``--holdout`` / id-file route
(:func:`test_library_refuses`). The command line ``popaudit check MODEL.pth --interactions
DATASET.inter`` (no holdout, no id file) reproduces RecBole's split (issue #21), so it
refuses each the same way, exit 1, the inputs unchanged (:func:`test_recbole_configs`).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from auditor.config import LoadOptions
from auditor.errors import EvaluationSplitError, setting
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split

from recbole_helpers import write_checkpoint, write_inter

from .corpus import EXIT_ERROR, EXIT_OK, Built, Case, Outcome, check_args, params, run_case, snapshot

N_USERS, N_ITEMS = 6, 8
ROUTE = r"holdout.* FILE .*field2id_token"


@dataclass(frozen=True)
class Setting:
    """One hostile set of recorded settings and the refusal it must get."""

    id: str
    settings: dict[str, Any]
    error: str
    model_type: int | None = 1
    header: str | None = None
    """The .inter header line, when not the standard one."""


def _eval(**args: Any) -> dict[str, Any]:
    return {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "TO", "group_by": "user",
                          "mode": {"valid": "full", "test": "full"}, **args}}  # fmt: skip


SETTINGS = [
    Setting("recbole-no-eval-args", {"eval_args": None}, r"the RecBole run recorded no eval_args"),
    Setting("recbole-rs-without-order", {"eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "group_by": "user"}},
            r"eval_args order 'RO' \(random order: RecBole shuffles with torch's generator"),
    Setting("recbole-random-order", _eval(order="RO"), r"eval_args order 'RO'"),
    Setting("recbole-unknown-order", _eval(order="XO"), r"eval_args order 'XO' \(an unknown order"),
    Setting("recbole-uni100", _eval(mode={"valid": "full", "test": "uni100"}), r"eval_args mode 'uni100' for the test"),
    Setting("recbole-pop100", _eval(mode="pop100"), r"eval_args mode 'pop100'"),
    Setting("recbole-labeled", _eval(mode="labeled"), r"eval_args mode 'labeled'"),
    Setting("recbole-ratios-as-text", _eval(split={"RS": "0.8,0.1,0.1"}), r"eval_args split RS '0.8,0.1,0.1'"),
    Setting("recbole-negative-ratio", _eval(split={"RS": [0.8, -0.1, 0.3]}), r"three non-negative ratios"),
    Setting("recbole-two-splits", _eval(split={"RS": [0.8, 0.1, 0.1], "LS": "test_only"}), r"eval_args split \{"),
    Setting("recbole-unknown-leave-one", _eval(split={"LS": "last_three"}), r"eval_args split LS 'last_three'"),
    Setting("recbole-group-by-item", _eval(group_by="item"), r"eval_args group_by 'item'"),
    Setting("recbole-sequential", {}, r"MODEL_TYPE sequential", model_type=2),
    Setting("recbole-time-not-loaded", {"load_col": {"inter": ["user_id", "item_id"]}},
            r"order 'TO' but no loaded float time column \(TIME_FIELD 'timestamp'\)"),
    Setting("recbole-time-as-token", {}, r"time column 'timestamp' of .*fake\.inter is 'token'",
            header="user_id:token\titem_id:token\ttimestamp:token"),
]
FILTER = Setting("recbole-filtered", {"item_inter_num_interval": "[3,inf)"}, r"item_inter_num_interval='\[3,inf\)'")


def _files(setting_: Setting) -> Callable[[Path], None]:
    def make(d: Path) -> None:
        write_checkpoint(d / "fake.pth", "BPR", setting_.settings, N_USERS, N_ITEMS, model_type=setting_.model_type)
        write_inter(d / "fake.inter", N_USERS, N_ITEMS)
        if setting_.header is not None:
            text = (d / "fake.inter").read_text(encoding="utf-8").split("\n", 1)[1]
            (d / "fake.inter").write_text(setting_.header + "\n" + text, encoding="utf-8")

    return make


def _case(setting_: Setting, route: bool = True) -> Case:
    def build(d: Path) -> Built:
        _files(setting_)(d)
        return Built(check_args("fake.pth", interactions="fake.inter"))

    return Case(setting_.id, build, EXIT_ERROR, setting_.error + (".*" + ROUTE if route else ""))


CASES = [*(_case(s) for s in SETTINGS), _case(FILTER, route=False)]  # the filter: refused by RecBole's id rule first


def _other_file(d: Path) -> Built:
    """QA6 served N3: the run recorded dataset 'fake' (RecBole read fake.inter); audited
    with other.inter, it runs (the ids may well agree) and says so, naming both files."""
    write_checkpoint(d / "fake.pth", "BPR", {**_eval(group_by="none"), "data_path": "data"}, N_USERS, N_ITEMS)
    write_inter(d / "other.inter", N_USERS, N_ITEMS)
    return Built(check_args("fake.pth", "--json", "r.json", interactions="other.inter"), outputs=["r.json"],
                 must_exist=["r.json"], check=_warned_other_file)


def _warned_other_file(d: Path, outcome: Outcome) -> None:
    warnings = json.loads((d / "r.json").read_text(encoding="utf-8"))["warnings"]
    assert warnings[0].startswith(
        "--interactions other.inter is not the file the run of fake.pth read: its config records dataset 'fake', "
        "and RecBole reads {data_path}/{dataset}.inter (data/fake.inter)"), warnings[0]


CASES.append(Case("recbole-other-dataset-file", _other_file, EXIT_OK, None))


def _untrained_users_lists(d: Path) -> Built:
    """QA6 served N5: lists only for a test user who never trained in RecBole's global split
    (u5 of the untrained-test-users data) are refused for that, not as mismatched ids."""
    from test_recbole_untrained_test_users import _write  # its split has such a user (u5)

    model, inter = _write(d)
    (d / "recs.csv").write_text("user_id,item_id,rank\n" + "".join(f"u5,i{i},{r}\n" for r, i in enumerate([3, 6, 0], 1)),
                                encoding="utf-8")
    return Built(check_args(model.name, "--recommendations", "recs.csv", interactions=inter.name))


CASES.append(Case("recbole-lists-of-untrained-test-users-only", _untrained_users_lists, EXIT_ERROR,
                  r"none of the 1 users in recs\.csv \(column 'user_id'\) is a trained user of RecBole's split: the "
                  r"lists of its test users who never trained count in accuracy alone", absent=r"evidently"))


@pytest.mark.parametrize("case", params(CASES))
def test_recbole_configs(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


@pytest.mark.parametrize("setting_", [*SETTINGS, FILTER], ids=lambda s: s.id)
def test_library_refuses(setting_: Setting, tmp_path: Path) -> None:
    """recbole_split refuses each, naming the setting and the way out; nothing is written."""
    _files(setting_)(tmp_path)
    before = snapshot(tmp_path)
    bundle = load_model(tmp_path / "fake.pth", LoadOptions())
    assert bundle.format == "recbole" and bundle.config is not None
    with pytest.raises(EvaluationSplitError, match=setting_.error) as caught:
        recbole_split(bundle.config, tmp_path / "fake.inter")
    assert f"{setting('holdout')} FILE" in str(caught.value) and "field2id_token" in str(caught.value)
    assert snapshot(tmp_path) == before
