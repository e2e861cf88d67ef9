"""C5's evidence names the violated condition that explains non-orthogonal updates
(conditions QA F4): weight decay only where C1 records it, never on a run whose optimizer
state says weight_decay = 0 (the QA's dense-linear retrain: C3 violated, residual −2.79)."""

from __future__ import annotations

from auditor.conditions.angles_check import tilt_cause
from auditor.result import CONDITION_NAMES, Condition


def _conds(**status: str) -> dict[str, Condition]:
    c1_details = {"optimizer": "SGD", "momentum": 0.0, "weight_decay": 0.0}
    out = {k: Condition(CONDITION_NAMES[k], "holds", "", c1_details if k == "C1" else {}) for k in ("C1", "C2", "C3", "C4")}
    for key, value in status.items():
        out[key] = Condition(CONDITION_NAMES[key], value, "", out[key].details)
    return out


def test_shared_parameters_are_named_not_weight_decay() -> None:
    text = tilt_cause(_conds(C3="violated"))
    assert text == "as violated C3 (item parameters shared between items or with the user tower) makes them"
    assert "weight decay" not in text


def test_c1_cause_comes_from_its_recorded_settings() -> None:
    conds = _conds()
    conds["C1"] = Condition(CONDITION_NAMES["C1"], "violated", "", {"optimizer": "SGD", "momentum": 0.9, "weight_decay": 0.01})
    assert tilt_cause(conds) == "as violated C1 (momentum 0.9, weight decay 0.01) makes them"
    conds["C1"] = Condition(CONDITION_NAMES["C1"], "violated", "", {"optimizer": "Adam", "momentum": None, "weight_decay": 0.0})
    conds["C2"] = Condition(CONDITION_NAMES["C2"], "violated", "", {})
    assert tilt_cause(conds) == ("as violated C1 (Adam's per-coordinate scaling), C2 (the item encoder is not "
                                 "parameter-linear) make them")


def test_unknown_and_holding_conditions_name_no_cause() -> None:
    assert tilt_cause(_conds(C1="unknown", C4="unknown")) == "from one of C1–C4 this audit could not establish (C1, C4 unknown)"
    assert "not shown" in tilt_cause(_conds())


def test_dense_linear_retrain_blames_c3_not_weight_decay(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import json

    from click.testing import CliRunner

    from auditor.cli import cli

    model, report = tmp_path / "dense.pt", tmp_path / "r.json"
    got = CliRunner().invoke(cli, ["retrain", "--n-users", "200", "--n-items", "200", "--n-interactions", "6000",
                                   "--epochs", "3", "--threads", "1", "-q", "--item-encoder", "dense-linear",
                                   "-o", str(model)])
    assert got.exit_code == 0, got.output
    got = CliRunner().invoke(cli, ["check", str(model), "--no-retrieval", "--bootstrap", "0", "-q", "--json", str(report)])
    assert got.exit_code == 0, got.output
    conditions = json.loads(report.read_text())["conditions"]
    assert conditions["C1"]["details"]["weight_decay"] == 0 and conditions["C3"]["status"] == "violated"
    c5 = conditions["C5"]["evidence"]
    assert "shrank the norms" in c5 and "weight decay" not in c5  # was: "such as weight decay's"
    assert "as violated C3 (item parameters shared" in c5
