"""Retrain QA, second round: the transformer's hidden width (N3), monitor options given
without the option they qualify (N2), whitespace-only ids (N4)."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.errors import TrainingError
from auditor.train import TRANSFORMER_HEADS, hidden_width_problem
from auditor.train.models import ModelSpec

SMALL = ["--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1", "--threads", "1", "-q"]


@pytest.mark.parametrize("width, refused", [(7, True), (1, True), (8, False), (2, False), (65, True)])
def test_the_transformer_width_must_split_among_its_heads(width: int, refused: bool, tmp_path: Path) -> None:
    """N3: --hidden-dim 7 with the transformer was exit 1 naming n_heads, an option that does not exist."""
    assert TRANSFORMER_HEADS == 2
    assert (hidden_width_problem("transformer", width) is not None) is refused
    assert hidden_width_problem("mlp", width) is None  # an MLP tower takes any width
    got = CliRunner().invoke(cli, ["retrain", *SMALL, "--user-encoder", "transformer", "--hidden-dim", str(width),
                                   "-o", str(tmp_path / "m.pt")])
    assert got.exit_code == (2 if refused else 0), got.output
    if refused:
        assert (f"--hidden-dim {width} cannot be split among the transformer user tower's 2 attention heads: give a "
                "multiple of 2") in got.stderr
        assert "n_heads" not in got.stderr and not (tmp_path / "m.pt").exists()
        with pytest.raises(TrainingError, match=f"hidden_dim {width} cannot be split"):
            ModelSpec(n_users=3, n_items=3, user_encoder="transformer", hidden_dim=width)


def test_on_alert_without_an_alert_is_a_usage_error(tmp_path: Path) -> None:
    """N2: --on-alert fail without --alert trained and said nothing (rc 0)."""
    out = tmp_path / "m.pt"
    got = CliRunner().invoke(cli, ["retrain", *SMALL, "--on-alert", "fail", "-o", str(out)])
    assert got.exit_code == 2
    assert "--on-alert says what a training alert does when it fires, and no --alert is given" in got.stderr
    assert not out.exists()
    with_alert = CliRunner().invoke(cli, ["retrain", *SMALL, "--on-alert", "stop", "--alert", "spearman>0.99", "-o",
                                          str(out)])
    assert with_alert.exit_code == 0, with_alert.output


def test_trace_every_without_trace_sets_the_checkpoints_angle_steps(tmp_path: Path) -> None:
    """N2, kept: --trace-every without --trace is not ignored. 100 interactions in batches of 50
    are 2 steps; the default interval (500) samples none of them, so the epoch row's angle share is
    NaN, while --trace-every 1 samples both: under the all-hold reference (plain SGD, id tables,
    cosine InfoNCE) every update is orthogonal to its vector (docs/theory.md), a share of exactly 1."""
    import math

    import torch

    shares = {}
    for every in ("1", None):
        out = tmp_path / f"m{every}.pt"
        args = ["retrain", *SMALL, "--batch-size", "50", "-o", str(out), *(["--trace-every", every] if every else [])]
        got = CliRunner().invoke(cli, args)
        assert got.exit_code == 0, got.output
        trace = torch.load(out, weights_only=False)["trace"]
        assert len(trace) == 1
        shares[every] = trace[0]["angle_share_90_1"]
    assert shares["1"] == 1.0 and math.isnan(shares[None])


def test_whitespace_only_ids_are_blank_ids(tmp_path: Path) -> None:
    """N4: '3, ' and ' ,4' made item ' ' and user ' ' real ids (and every id a string), silently."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from auditor.train.data import read_interactions

    csv = tmp_path / "ws.csv"
    csv.write_text("user_id,item_id\n1,2\n3, \n ,4\n5,6\n1,6\n\t,2\n")
    parquet = tmp_path / "ws.parquet"
    pq.write_table(pa.table({"user_id": ["1", "3", " ", "5", "1", "\t"], "item_id": ["2", " ", "4", "6", "6", "2"]}),
                   parquet)
    for log in (csv, parquet):
        data = read_interactions(log)
        # rows 1, 4 and 5 keep both ids: items {2, 6}, users 1 and 5 in order of appearance
        assert [str(i) for i in data.item_ids] == ["2", "6"] and [str(u) for u in data.user_ids] == ["1", "5"]
        assert data.item_frequencies.tolist() == [1, 2]
        assert data.warnings == (f"{log}: 3 of 6 rows (50.0%) have a blank id and are left out of training and the "
                                 "catalogue: 1 with no item id (column 'item_id', first at data row 2); 2 with no user "
                                 "id (column 'user_id', first at data row 3)",)
    assert read_interactions(csv).item_ids == [2, 6]  # the blanks no longer turn the ids into text


def test_an_empty_time_split_names_no_seed(tmp_path: Path) -> None:
    """Minor wording: the refusal of a time split said '(time split, seed 0)', but a time split draws nothing."""
    log = tmp_path / "single.csv"
    log.write_text("user_id,item_id,timestamp\n" + "".join(f"{u},{u % 3},{100 + u}\n" for u in range(8)))
    got = CliRunner().invoke(cli, ["experiment", "mitigations", "--data", str(log), "--seeds", "1", "--epochs", "1",
                                   "--threads", "1", "-q", "-o", str(tmp_path / "out")])
    assert got.exit_code == 1
    assert f"on {log} (time split) " in got.stderr and "seed" not in got.stderr


def test_blank_ids_of_a_movielens_dat_log_are_blank_too(tmp_path: Path) -> None:
    """N4, the '::' reader: an empty or whitespace-only field was the real id '' (and made every id text)."""
    from auditor.train.data import read_interactions

    log = tmp_path / "ratings.dat"
    log.write_text("1::10::5::978300760\n2::::3::978300761\n::11::4::978300762\n3::11::4::978300763\n1:: ::4::978300764\n")
    data = read_interactions(log, times="split")
    assert data.item_ids == [10, 11] and data.user_ids == [1, 3]
    assert data.timestamps is not None and data.timestamps.tolist() == [978300760.0, 978300763.0]  # rows 1 and 4
    assert data.warnings[0].endswith("3 of 5 rows (60.0%) have a blank id and are left out of training and the "
                                     "catalogue: 2 with no item id (column 'item_id', first at data row 2); 1 with no "
                                     "user id (column 'user_id', first at data row 3)")
