"""RecBole's evaluation split reproduced without RecBole (issue #21 item 1).

The reference is RecBole 1.2.1 itself: tests/data/recbole/eval.json records the split
RecBole made of eval.inter under six ``eval_args`` (make_eval.py), what its full-sort
test masks and holds out per user, and its token lists. RecBole is never imported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import auditor.loading.recbole_inter as recbole_inter
from auditor.config import LoadOptions
from auditor.errors import EvaluationSplitError, InteractionsError, setting
from auditor.loading import load_model
from auditor.loading.recbole_split import RecBoleSplit, recbole_split, split_plan, split_sizes

DATA = Path(__file__).parent / "data" / "recbole"
INTER = DATA / "eval.inter"
RECORD = json.loads((DATA / "eval.json").read_text(encoding="utf-8"))
PARTS = ("train", "valid", "test")


@pytest.fixture(scope="module")
def config() -> dict[str, Any]:
    """The recorded settings of the BPR run (RS 0.8/0.1/0.1, TO, by user), as popaudit reads them."""
    bundle = load_model(DATA / "BPR-eval.pth", LoadOptions())
    assert bundle.format == "recbole" and bundle.config is not None
    return dict(bundle.config)


def with_settings(config: dict[str, Any], settings: dict[str, Any]) -> dict[str, Any]:
    """``config`` with a recorded split's settings (eval_args merged key by key, as RecBole's Config does)."""
    out = {**config, **{k: v for k, v in settings.items() if k != "eval_args"}}
    out["eval_args"] = {**config["eval_args"], **settings.get("eval_args", {})}
    return out


def labels_of(split: RecBoleSplit, n_rows: int) -> str:
    labels = ["-"] * n_rows
    for label, part in enumerate(PARTS):
        for row in getattr(split, part).rows:
            labels[int(row)] = str(label)
    return "".join(labels)


@pytest.mark.parametrize("name", sorted(RECORD["splits"]))
def test_split_equals_recboles(config: dict[str, Any], name: str) -> None:
    """Every data row lands in the part RecBole put it in, for RS by user and over all
    interactions, LS both ways, TS, and with the time column min-max scaled."""
    recorded = RECORD["splits"][name]
    split = recbole_split(with_settings(config, recorded["settings"]), INTER)
    assert labels_of(split, len(recorded["labels"])) == recorded["labels"]
    assert split.n_dropped == recorded["labels"].count("-") == 1  # the row without an item id


def test_split_order_equals_recboles(config: dict[str, Any]) -> None:
    """Within each part, RecBole's order: users in order of first appearance in time, each
    user's interactions in (stable, float32) time order."""
    recorded = RECORD["splits"]["RS-TO-user"]
    split = recbole_split(config, INTER)
    for part in PARTS:
        assert getattr(split, part).rows.tolist() == [int(r) for r in recorded[part].split()]
    assert (len(split.train), len(split.valid), len(split.test)) == (2499, 248, 248)


def test_numbering_is_recboles(config: dict[str, Any]) -> None:
    """Row r of a table is RecBole's token r + 1 ([PAD] is row 0 in the checkpoint)."""
    split = recbole_split(config, INTER)
    assert [str(t) for t in split.user_ids] == RECORD["tokens"]["user_id"][1:]
    assert [str(t) for t in split.item_ids] == RECORD["tokens"]["item_id"][1:]
    assert split.user_ids.dtype == np.int64 and split.n_users == 160 and split.n_items == 120


def test_test_evaluation_masks_what_recbole_masks(config: dict[str, Any]) -> None:
    """Held out: each test user's distinct test items; masked: their train and valid items
    except the test items (27 test pairs were also trained on and stay rankable)."""
    split = recbole_split(config, INTER)
    users, indptr, items = split.held_out()
    masked_ptr, masked = split.masked()
    recorded = RECORD["masking"]
    assert sorted(int(u) + 1 for u in users) == sorted(int(u) for u in recorded)
    for j, user in enumerate(users):
        expect = recorded[str(int(user) + 1)]
        assert (items[indptr[j] : indptr[j + 1]] + 1).tolist() == [int(i) for i in expect["positive"].split()]
        assert (masked[masked_ptr[j] : masked_ptr[j + 1]] + 1).tolist() == [int(i) for i in expect["history"].split()]
    seen = set(zip(np.r_[split.train.users, split.valid.users].tolist(), np.r_[split.train.items, split.valid.items].tolist()))
    assert sum((u, i) in seen for u, i in zip(split.test.users.tolist(), split.test.items.tolist())) == 27


def test_train_counts(config: dict[str, Any]) -> None:
    split = recbole_split(config, INTER)
    counts = split.train_counts()
    assert counts.sum() == len(split.train) and counts.shape == (120,)
    assert counts[int(split.train.items[0])] == int(np.sum(split.train.items == split.train.items[0]))


def test_streamed_in_small_blocks(config: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    """Read in ~30 record batches the numbering and the split are the same."""
    whole = recbole_split(config, INTER)
    monkeypatch.setattr(recbole_inter, "BLOCK_BYTES", 2048)
    streamed = recbole_split(config, INTER)
    for part in PARTS:
        for field in ("users", "items", "rows"):
            assert np.array_equal(getattr(getattr(whole, part), field), getattr(getattr(streamed, part), field))
    assert np.array_equal(whole.item_ids, streamed.item_ids) and np.array_equal(whole.user_ids, streamed.user_ids)


# ---------------------------------------------------------------------------- known answers


@pytest.mark.parametrize(
    ("total", "ratios", "bounds"),
    [
        (10, (0.8, 0.1, 0.1), [8, 9]),
        (5, (0.8, 0.1, 0.1), [3, 4]),  # 0.5 each for valid and test: raised to 1 while train keeps > 1
        (3, (0.8, 0.1, 0.1), [1, 2]),
        (2, (0.8, 0.1, 0.1), [1, 1]),  # test raised first, then train is down to 1: valid stays empty
        (1, (0.8, 0.1, 0.1), [1, 1]),
        (7, (8, 1, 1), [5, 6]),  # ratios normalised by their sum
        (20, (0.7, 0.2, 0.1), [14, 18]),
    ],
)
def test_split_sizes_follow_recboles_rounding(total: int, ratios: tuple[float, ...], bounds: list[int]) -> None:
    assert split_sizes(total, ratios) == bounds


def _inter(tmp_path: Path, lines: list[str], header: str = "user_id:token\titem_id:token\ttimestamp:float") -> Path:
    path = tmp_path / "hand.inter"
    path.write_text(header + "\n" + "\n".join(lines) + "\n", encoding="utf-8")
    return path


def _settings(split: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "eval_args": {"split": split, "order": "TO", "group_by": "user", "mode": {"valid": "full", "test": "full"}},
        "USER_ID_FIELD": "user_id", "ITEM_ID_FIELD": "item_id", "TIME_FIELD": "timestamp",
        "load_col": {"inter": ["user_id", "item_id", "timestamp"]}, **extra,
    }  # fmt: skip


def test_float32_ties_keep_file_order(tmp_path: Path) -> None:
    """880000001 and 880000000 are one float32 (880000000): RecBole's stable sort keeps
    their file order, so the row written second is the user's last and is held out."""
    path = _inter(tmp_path, ["a\tx\t880000001", "a\ty\t880000000", "a\tz\t5", "b\tx\t7", "b\tz\t3"])
    split = recbole_split(_settings({"LS": "test_only"}), path)
    # time order 3 (b), 5 (a), 7 (b), then a's tie: b first appears first, so b's rows come first
    assert split.test.rows.tolist() == [3, 1]  # b's "x"; a's "y" (not "x", whose float64 time is later)
    assert split.train.rows.tolist() == [4, 2, 0]
    assert [str(i) for i in split.item_ids] == ["x", "y", "z"] and [str(u) for u in split.user_ids] == ["a", "b"]


def test_valid_only_leaves_nobody_to_rank(tmp_path: Path) -> None:
    path = _inter(tmp_path, ["a\tx\t1", "a\ty\t2", "b\tx\t3"])
    split = recbole_split(_settings({"LS": "valid_only"}), path)
    assert split.valid.rows.tolist() == [1] and len(split.test) == 0  # b's only interaction stays in train
    users, indptr, items = split.held_out()
    assert users.size == items.size == 0 and indptr.tolist() == [0]
    assert [a.tolist() for a in split.masked()] == [[0], []]


def test_missing_times_are_filled_with_the_mean(tmp_path: Path) -> None:
    """A row without a time sorts at the mean of the others (RecBole's _fill_nan): here 20,
    between the user's 10 and 30; pandas' missing words ('NA', 'None') count as missing."""
    path = _inter(tmp_path, ["u\ti1\t10", "u\ti2\t", "u\ti3\t30", "u\ti4\tNA", "NA\ti5\t1", "u\tNone\t2"])
    split = recbole_split(_settings({"LS": "valid_and_test"}), path)
    assert split.n_dropped == 2  # user "NA", item "None": missing ids
    assert split.train.rows.tolist() == [0, 1] and split.valid.rows.tolist() == [3] and split.test.rows.tolist() == [2]


def test_scaled_times_keep_float32_resolution_of_the_scaled_values(tmp_path: Path) -> None:
    """normalize_all scales times to [0, 1] in float64 before the float32 copy: two times
    one float32 could not tell apart become distinct, so the later one is held out."""
    lines = ["a\tx\t0", "a\ty\t1", "a\tz\t0.5"]
    plain = recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, lines))
    assert plain.test.rows.tolist() == [1]
    lines = ["a\tx\t880000001", "a\ty\t880000000", "b\tq\t880000100", "b\tr\t880000064"]
    tied = recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, lines))
    scaled = recbole_split(_settings({"LS": "test_only"}, normalize_all=True), _inter(tmp_path, lines))
    assert tied.test.rows.tolist() == [1, 2]  # a: a float32 tie, file order; b: 880000064 < 880000128
    assert scaled.test.rows.tolist() == [0, 2]  # scaled: 1e-2 apart, a's later row is held out
    named = recbole_split(_settings({"LS": "test_only"}, normalize_field=["timestamp"]), _inter(tmp_path, lines))
    assert named.test.rows.tolist() == [0, 2]


# ---------------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"eval_args": {"order": "RO"}}, r"eval_args order 'RO' \(random order: RecBole shuffles with torch's generator"),
        ({"eval_args": {"mode": {"valid": "full", "test": "uni100"}}}, r"eval_args mode 'uni100' for the test"),
        ({"eval_args": {"mode": "pop50"}}, r"eval_args mode 'pop50'"),
        ({"eval_args": {"mode": "labeled"}}, r"eval_args mode 'labeled'"),
        ({"eval_args": {"split": {"RS": [0.8, 0.2]}}}, r"eval_args split RS \[0.8, 0.2\] \(RecBole needs three non-negative ratios"),
        ({"eval_args": {"split": {"RS": [-1, 1, 1]}}}, r"eval_args split RS \[-1, 1, 1\]"),
        ({"eval_args": {"split": {"LS": "last_two"}}}, r"eval_args split LS 'last_two'"),
        ({"eval_args": {"split": {"XS": [1]}}}, r"eval_args split 'XS'"),
        ({"eval_args": {"split": {"RS": [0.8, 0.1, 0.1], "LS": "test_only"}}}, r"eval_args split \{"),
        ({"eval_args": {"group_by": "item"}}, r"eval_args group_by 'item'"),
        ({"eval_args": None}, r"no eval_args"),
        ({"user_inter_num_interval": "[5,inf)"}, r"data filters it does not re-run \(user_inter_num_interval='\[5,inf\)'\)"),
        ({"rm_dup_inter": "first"}, r"rm_dup_inter='first'"),
        ({"MODEL_TYPE": {"__class__": "recbole.utils.enum_type.ModelType", "__args__": [2]}}, r"MODEL_TYPE sequential"),
    ],
)
def test_unreproducible_settings_are_refused(config: dict[str, Any], change: dict[str, Any], named: str) -> None:
    """Each refusal names the setting and the way out: --holdout with the id files."""
    changed = {**config, **change}
    if isinstance(change.get("eval_args"), dict):
        changed["eval_args"] = {**config["eval_args"], **change["eval_args"]}
    with pytest.raises(EvaluationSplitError, match=named) as caught:
        recbole_split(changed, INTER)
    message = str(caught.value)
    assert "the RecBole run recorded" in message
    route = f"{setting('holdout')} FILE", f"{setting('item_ids')} and {setting('user_ids')} FILE"
    assert all(part in message for part in route) and "field2id_token" in message


def test_the_default_recbole_config_is_refused(config: dict[str, Any]) -> None:
    """RecBole's own default eval_args (RS by user, random order) cannot be reproduced."""
    default = {**config, "eval_args": {"split": {"RS": [0.8, 0.1, 0.1]}, "order": "RO", "group_by": "user",
                                       "mode": {"valid": "full", "test": "full"}}}  # fmt: skip
    with pytest.raises(EvaluationSplitError, match="order 'RO'"):
        split_plan(default)


def test_time_column_problems_are_refused(config: dict[str, Any], tmp_path: Path) -> None:
    unloaded = {**config, "load_col": {"inter": ["user_id", "item_id"]}}
    with pytest.raises(EvaluationSplitError, match=r"order 'TO' but no loaded float time column \(TIME_FIELD 'timestamp'\)"):
        recbole_split(unloaded, INTER)
    token = _inter(tmp_path, ["a\tx\t1"], header="user_id:token\titem_id:token\ttimestamp:token")
    with pytest.raises(EvaluationSplitError, match=r"time column 'timestamp' of .* is 'token'"):
        recbole_split(_settings({"LS": "test_only"}), token)
    with pytest.raises(EvaluationSplitError, match=r"time column 'timestamp' is discretized"):
        recbole_split(_settings({"LS": "test_only"}, discretization={"timestamp": {"method": "ED", "bucket": 5}}),
                      _inter(tmp_path, ["a\tx\t1"]))


def test_file_problems(tmp_path: Path) -> None:
    with pytest.raises(EvaluationSplitError, match=r"field_separator '::' is not one character.*holdout"):
        recbole_split(_settings({"LS": "test_only"}, field_separator="::"), _inter(tmp_path, ["a::x::1"]))
    with pytest.raises(EvaluationSplitError, match=r"the item column 'item_id' \(ITEM_ID_FIELD\) is not a loaded column"):
        recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, ["a\t1"], header="user_id:token\tmovie:token"))
    with pytest.raises(InteractionsError, match=r"header field 'user_id' is not NAME:TYPE"):
        recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, ["a\tx\t1"], header="user_id\titem_id\ttimestamp"))
    with pytest.raises(InteractionsError, match="no row has both a user and an item id"):
        recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, ["\tx\t1", "a\t\t2"]))
    with pytest.raises(InteractionsError, match=r"cannot parse .* a value could not be read"):
        recbole_split(_settings({"LS": "test_only"}), _inter(tmp_path, ["a\tx\tyesterday"]))
