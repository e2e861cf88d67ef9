"""RecBole checkpoints audited with no flags (issue #13), on real files RecBole 1.2.1 made.

The fixtures in tests/data/recbole/ were written by RecBole itself (make_checkpoint.py
there; README.md gives the versions). ``*.tokens.json`` hold RecBole's own
``dataset.field2id_token`` of each run: the reference the id rule is checked against.
RecBole is never imported here.
"""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import torch
from click.testing import CliRunner
from scipy import stats

from auditor.cli import cli
from auditor.conditions import assess_conditions
from auditor.conditions.facts import Origin, read_config
from auditor.config import DeclaredTraining, LoadOptions
from auditor.errors import IdMappingError
from auditor.loading import load_model
from auditor.loading.checkpoints import read_torch
from auditor.loading.logs import open_log
from auditor.values import LogSpec
from auditor.loading.recbole import _InOrder, first_seen, unreproducible_settings
from auditor.model import ModelBundle
from auditor.plugins import get_plugin_manager

DATA = Path(__file__).parent / "data" / "recbole"
MODEL, FILTERED, LOG = DATA / "BPR-tiny.pth", DATA / "BPR-tiny-filtered.pth", DATA / "tiny.inter"
FAST = ("--bootstrap", "200", "--seed", "0", "--no-probes", "-q")


def _tokens(model: Path) -> dict[str, list[str]]:
    tokens: dict[str, list[str]] = json.loads(model.with_suffix(".tokens.json").read_text())
    return tokens


def _weights(model: Path) -> dict[str, torch.Tensor]:
    """The tables exactly as RecBole saved them (padding row included)."""
    return read_torch(model, trust_pickle=False).tensors


def _load(model: Path, **options: Any) -> ModelBundle:
    bundle = load_model(model, LoadOptions(**options), get_plugin_manager(entry_points=False))
    if bundle.log_id_rule is not None:
        bundle.log_id_rule.apply(bundle, LOG, "auto", None, None)
    return bundle


def _check(*args: object) -> tuple[int, str, str]:
    result = CliRunner().invoke(cli, ["check", *map(str, args)])
    return result.exit_code, result.stdout, result.stderr


# ---------------------------------------------------------------------------- the id rule


def test_rows_map_to_the_ids_recbole_gave():
    """Row r of the audited tables is RecBole's id r + 1 (row 0, [PAD], dropped), and its
    raw id is the token RecBole's field2id_token gave that id."""
    bundle = _load(MODEL)
    tokens, weights = _tokens(MODEL), _weights(MODEL)
    assert tokens["item_id"][0] == "[PAD]" and tokens["user_id"][0] == "[PAD]"
    assert bundle.format == "recbole"
    assert bundle.item_ids is not None and bundle.user_ids is not None
    assert bundle.item_ids.tolist() == [int(t) for t in tokens["item_id"][1:]]
    assert bundle.user_ids.tolist() == [int(t) for t in tokens["user_id"][1:]]
    np.testing.assert_array_equal(bundle.item_table, weights["item_embedding.weight"][1:].numpy())
    assert bundle.user_table is not None
    np.testing.assert_array_equal(bundle.user_table, weights["user_embedding.weight"][1:].numpy())
    # One id by hand: raw item 179 is the first item of tiny.inter, so RecBole id 1, row 0 here.
    first_item = LOG.read_text().splitlines()[1].split("\t")[1]
    assert first_item == "179" == tokens["item_id"][1]
    row = bundle.item_ids.tolist().index(179)
    np.testing.assert_array_equal(bundle.item_table[row], weights["item_embedding.weight"][1].numpy())
    assert "first appearance" in (bundle.item_ids_source or "")


def test_first_seen_order_skips_rows_without_both_ids(tmp_path):
    """Hand-checked: RecBole drops rows with a missing user or item id before numbering."""
    log = tmp_path / "x.inter"
    log.write_text(
        "user_id:token\titem_id:token\n"
        "u2\tb\n"
        "\tz\n"  # no user: item z is never numbered
        "u1\t\n"  # no item: user u1 is not numbered here
        "u1\ta\n"
        "u2\tz\n"
        "u3\tb\n",
        encoding="utf-8",
    )
    opened = open_log(LogSpec(log))
    items, users = first_seen(opened, as_strings=False)
    assert items.tolist() == ["b", "a", "z"]
    assert users.tolist() == ["u2", "u1", "u3"]


def test_in_order_keeps_first_appearance_across_batches_and_compactions():
    rng = np.random.default_rng(0)
    stream = rng.integers(0, 50_000, size=400_000)
    order = _InOrder()
    for chunk in np.array_split(stream, 37):
        order.add(pa.array(chunk))
    result = order.result()
    assert result is not None
    _, first = np.unique(stream, return_index=True)
    np.testing.assert_array_equal(result.to_numpy(), stream[np.sort(first)])


# ---------------------------------------------------------------------------- the audit


def _json(tmp_path: Path, name: str, *args: object) -> dict[str, Any]:
    out = tmp_path / f"{name}.json"
    code, stdout, stderr = _check(*args, "--json", out, *FAST)
    assert code == 0, stdout + stderr
    report: dict[str, Any] = json.loads(out.read_text())
    return report


def _user_ids(tmp_path: Path, model: Path = MODEL) -> Path:
    """RecBole's user tokens as a --user-ids file: with it, the whole log is the training log."""
    path = tmp_path / "recbole-users.txt"
    path.write_text("\n".join(_tokens(model)["user_id"][1:]) + "\n")
    return path


def test_random_order_run_is_refused_without_id_files():
    """BPR-tiny.pth records RecBole's default eval_args order RO: its split cannot be
    reproduced, so the zero-option check refuses, naming the setting and the routes."""
    code, _, stderr = _check(MODEL, "--interactions", LOG, *FAST)
    assert code == 1 and "Traceback" not in stderr
    assert "eval_args order 'RO'" in stderr and "--holdout FILE" in stderr and "--user-ids" in stderr
    assert "without held-out accuracy" in stderr


def test_item_rule_audit_equals_the_exported_state_dict(tmp_path):
    """`popaudit check BPR.pth --interactions tiny.inter --user-ids USERS` (the item rows
    numbered by RecBole's rule, the whole log the training log) gives the same figures as
    the same tables exported as a plain state dict (padding row dropped) with --item-ids
    and --user-ids files holding RecBole's tokens."""
    recbole = _json(tmp_path, "recbole", MODEL, "--interactions", LOG, "--user-ids", _user_ids(tmp_path))
    tokens, weights = _tokens(MODEL), _weights(MODEL)
    plain = tmp_path / "plain.pt"
    torch.save({k: weights[k][1:].clone() for k in ("item_embedding.weight", "user_embedding.weight")}, plain)
    (tmp_path / "items.txt").write_text("\n".join(tokens["item_id"][1:]) + "\n")
    (tmp_path / "users.txt").write_text("\n".join(tokens["user_id"][1:]) + "\n")
    exported = _json(
        tmp_path, "plain", plain, "--interactions", LOG,
        "--item-ids", tmp_path / "items.txt", "--user-ids", tmp_path / "users.txt",
    )
    assert recbole["frequency_norm"] == exported["frequency_norm"]
    assert recbole["retrieval"]["at"] == exported["retrieval"]["at"]
    assert recbole["inputs"]["n_unmapped_interactions"] == 0
    assert "RecBole's own rule" in recbole["inputs"]["item_id_mapping"]
    assert "first appearance" in recbole["inputs"]["item_id_mapping"]
    assert recbole["inputs"]["format"] == "recbole" and recbole["inputs"]["n_items"] == 80

    # The known answer: Spearman of RecBole's item norms (rows 1..80) against the counts of
    # tiny.inter, each count put on the row RecBole's field2id_token gave its raw id.
    counts = Counter(line.split("\t")[1] for line in LOG.read_text().splitlines()[1:])
    freq = np.array([counts[t] for t in tokens["item_id"][1:]])
    norms = weights["item_embedding.weight"][1:].double().norm(dim=1).numpy()
    rho = stats.spearmanr(norms, freq).statistic
    assert recbole["frequency_norm"]["spearman"] == pytest.approx(rho, abs=1e-12)
    # A wrong mapping gives another answer: the constant shift the log's id range suggests.
    shifted = _json(tmp_path, "shifted", plain, "--interactions", LOG, "--id-offset", "101",
                    "--user-ids", tmp_path / "users.txt")
    assert abs(shifted["frequency_norm"]["spearman"] - rho) > 0.1


def test_recbole_file_is_read_without_warnings_on_stderr(tmp_path):
    """RecBole saves with pickle protocol 4; nothing of torch's own reaches the user."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _load(MODEL)
    assert [str(w.message) for w in caught] == []
    code, _, stderr = _check(DATA / "BPR-eval.pth", "--interactions", DATA / "eval.inter", *FAST)
    assert code == 0
    assert "warn" not in stderr.lower() and "pickle protocol" not in stderr.lower()


# ---------------------------------------------------------------------------- filtering


def test_filtered_run_is_refused_without_item_ids():
    code, _, stderr = _check(FILTERED, "--interactions", LOG, *FAST)
    assert code == 1
    assert "Traceback" not in stderr
    assert "user_inter_num_interval='[8,inf)'" in stderr and "item_inter_num_interval='[5,inf)'" in stderr
    assert "--item-ids FILE" in stderr and "field2id_token['item_id']" in stderr
    with pytest.raises(IdMappingError, match="does not re-run RecBole's filtering"):
        _load(FILTERED)


def test_filtered_run_with_item_ids(tmp_path):
    tokens = _tokens(FILTERED)
    (tmp_path / "items.txt").write_text("\n".join(tokens["item_id"][1:]) + "\n")
    report = _json(tmp_path, "f", FILTERED, "--interactions", LOG, "--item-ids", tmp_path / "items.txt")
    assert report["inputs"]["n_items"] == len(tokens["item_id"]) - 1 == 62
    assert report["inputs"]["item_id_mapping"].startswith("item rows mapped through --item-ids")
    assert any("user rows" in w and "--user-ids" in w for w in report["warnings"])
    # 18 raw items RecBole filtered out (fewer than 5 interactions) have no row.
    counts = Counter(line.split("\t")[1] for line in LOG.read_text().splitlines()[1:])
    dropped = set(counts) - set(tokens["item_id"][1:])
    assert len(dropped) == 18
    assert report["inputs"]["n_unmapped_interactions"] == sum(counts[t] for t in dropped)


@pytest.mark.parametrize(
    ("settings", "refused"),
    [
        ({"user_inter_num_interval": "[0,inf)", "item_inter_num_interval": "[0,inf)"}, []),
        ({"user_inter_num_interval": "[1,inf)", "item_inter_num_interval": None}, []),
        ({"user_inter_num_interval": "(0,inf]"}, []),
        ({"user_inter_num_interval": "(1,inf)"}, ["user_inter_num_interval"]),
        ({"item_inter_num_interval": "[5,inf)"}, ["item_inter_num_interval"]),
        ({"item_inter_num_interval": "[0,100]"}, ["item_inter_num_interval"]),
        ({"val_interval": {"rating": "[3,inf)"}}, ["val_interval"]),
        ({"rm_dup_inter": "first"}, ["rm_dup_inter"]),
        ({"alias_of_item_id": ["item_id_list"]}, ["alias_of_item_id"]),
        ({"benchmark_filename": ["train", "valid", "test"]}, ["benchmark_filename"]),
        ({"min_user_inter_num": 5, "max_item_inter_num": 300}, ["min_user_inter_num", "max_item_inter_num"]),
        ({"min_user_inter_num": 1}, []),
        ({"load_col": {"inter": ["user_id", "item_id"], "item": ["item_id", "genre"]}}, ["load_col"]),
        ({"load_col": None}, ["load_col"]),
    ],
)
def test_unreproducible_settings(settings, refused):
    config = {"load_col": {"inter": ["user_id", "item_id"]}, **settings}
    found = unreproducible_settings(config)
    assert [f.split("=")[0] for f in found] == refused


def test_log_of_another_dataset_is_refused(tmp_path):
    """One extra item in the log: RecBole did not number this log's ids."""
    log = tmp_path / "other.inter"
    log.write_text(LOG.read_text() + "3\t999\t4\t881000000\n", encoding="utf-8")
    code, _, stderr = _check(MODEL, "--interactions", log, "--user-ids", _user_ids(tmp_path), *FAST)
    assert code == 1
    assert "81 distinct item ids" in stderr and "80 rows after its padding row" in stderr
    # the same through RecBole's reproduced split (a time-ordered run)
    inter = DATA / "eval.inter"
    header, body = inter.read_text().split("\n", 1)
    log.write_text(header + "\n" + body + body.splitlines()[0].split("\t")[0] + "\t99999\t1\t1\n")
    code, _, stderr = _check(DATA / "BPR-eval.pth", "--interactions", log, *FAST)
    assert code == 1
    assert "121 distinct item ids" in stderr and "120 rows after its padding row" in stderr


# ---------------------------------------------------------------------------- C1 and C4


def test_c1_and_c4_from_recboles_record(tmp_path):
    report = _json(tmp_path, "r", MODEL, "--interactions", LOG, "--user-ids", _user_ids(tmp_path))
    c1, c4 = report["conditions"]["C1"], report["conditions"]["C4"]
    assert c1["status"] == "violated" and "Adam" in c1["evidence"]
    assert c1["details"]["sources"] == {"kind": "optimizer state", "weight_decay": "optimizer state",
                                        "lr": "optimizer state"}
    assert c1["details"]["lr"] == 0.01
    assert c4["status"] == "violated"
    assert "recorded model 'BPR'" in c4["evidence"] and "dot-product" in c4["evidence"]
    assert "not cosines" in c4["evidence"]


def test_c1_from_config_values_when_no_optimizer_state():
    """RecBole's learner / learning_rate / weight_decay, each with its config key."""
    bundle = _load(MODEL)
    recorded = read_config(bundle.config)
    assert recorded.optimizer is not None and recorded.optimizer.value == "Adam"
    assert (recorded.optimizer.origin, recorded.optimizer.key) == (Origin.CONFIG, "learner")
    assert recorded.lr is not None and (recorded.lr.value, recorded.lr.key) == (0.01, "learning_rate")
    assert recorded.weight_decay is not None and recorded.weight_decay.key == "weight_decay"
    assert recorded.batch_size is not None and recorded.batch_size.value == 256
    assert recorded.model is not None and recorded.model.value == "BPR"
    bundle.optimizer_state = None
    outcome = assess_conditions(bundle, None, None, DeclaredTraining(), run_probes=False)
    c1 = outcome.conditions["C1"]
    assert c1.status == "violated"
    assert c1.details["sources"] == {"kind": "config (learner)", "weight_decay": "config (weight_decay)",
                                     "lr": "config (learning_rate)"}
