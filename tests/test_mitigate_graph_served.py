"""mitigate of a RecBole graph model to its served item vectors (.npy/Parquet): the suggested
follow-up audits what the output serves (check of the model, its alpha_<α> scoring), and
the sidecar's log–log slope counts the training part the vectors were propagated over, as
check does (issues "Served F5" and "Served F6"); and the id-mapping line of a RecBole
audit says what its numbering rests on (F10)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.cli.mitigate import served_table_note
from auditor.config import LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_split import recbole_split

from recbole_helpers import write_checkpoint, write_inter

N_USERS, N_ITEMS, LAYERS = 12, 15, 2


@pytest.fixture()
def graph_model(tmp_path: Path) -> tuple[Path, Path]:
    inter = tmp_path / "x.inter"
    write_inter(inter, N_USERS, N_ITEMS, per_user=6, seed=3)
    model = tmp_path / "LightGCN.pth"
    write_checkpoint(model, "LightGCN", {"n_layers": LAYERS}, N_USERS, N_ITEMS, dim=4, seed=1)
    return model, inter


def run(*args: str) -> str:
    result = CliRunner().invoke(cli, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result.output


def numpy_served_slope(model: Path, inter: Path) -> tuple[float, float]:
    """LightGCN's served item vectors by dense numpy (Â = D^-1/2 A D^-1/2 over the distinct
    training pairs, mean of layers 0..n_layers) and the OLS slope of log‖v‖ on log frequency
    (frequency > 0): with training-part counts, and with whole-file counts."""
    bundle = load_model(model, LoadOptions())  # the stored tables, padding row 0 dropped
    assert bundle.user_table is not None and bundle.config is not None
    users, items = bundle.user_table.astype(np.float64), bundle.item_table.astype(np.float64)
    split = recbole_split(bundle.config, inter)
    a = np.zeros((N_USERS, N_ITEMS))
    a[split.train.users, split.train.items] = 1.0
    du, di = (a.sum(1) + 1e-7) ** -0.5, (a.sum(0) + 1e-7) ** -0.5
    norm = du[:, None] * a * di[None, :]
    total_u, total_i, u, i = users.copy(), items.copy(), users, items
    for _ in range(LAYERS):
        u, i = norm @ i, norm.T @ u
        total_u, total_i = total_u + u, total_i + i
    lengths = np.linalg.norm(total_i / (LAYERS + 1), axis=1)
    everything = np.concatenate([split.train.items, split.valid.items, split.test.items])

    def slope(freq: np.ndarray) -> float:
        seen = freq > 0
        return float(np.polyfit(np.log(freq[seen]), np.log(lengths[seen]), 1)[0])

    return slope(np.bincount(split.train.items, minlength=N_ITEMS)), slope(np.bincount(everything, minlength=N_ITEMS))


def test_the_sidecar_slope_counts_the_training_part_as_check_does(graph_model: tuple[Path, Path], tmp_path: Path) -> None:
    model, inter = graph_model
    trained, whole = numpy_served_slope(model, inter)
    assert abs(trained - whole) > 1e-3  # the two countings differ here: the test tells them apart
    run("mitigate", str(model), "--interactions", str(inter), "--alpha", "0.5", "-o", str(tmp_path / "out.npy"), "-q")
    sidecar = json.loads((tmp_path / "out.npy.popaudit.json").read_text())
    slopes = sidecar["frequency_norm"]
    assert slopes["before"]["loglog_slope"] == pytest.approx(trained, abs=1e-5)
    assert slopes["after"]["loglog_slope"] == pytest.approx(0.5 * trained, abs=1e-5)
    assert slopes["frequencies"] == f"the training part of RecBole's split of {inter}"
    run("check", str(model), "--interactions", str(inter), "--json", str(tmp_path / "r.json"), "--no-probes",
        "--bootstrap", "0", "-q")
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["served_vectors"]["frequency_norm"]["loglog_slope"] == pytest.approx(trained, abs=1e-5)


@pytest.mark.parametrize(("alpha", "fmt", "flag"), [("0.5", "npy", ""), ("0.3", "parquet", " --alpha 0.3")])
def test_next_audits_the_model_whose_scoring_the_output_serves(
    graph_model: tuple[Path, Path], tmp_path: Path, alpha: str, fmt: str, flag: str
) -> None:
    """The output is served with LightGCN's propagated users, which check of the table alone
    does not rebuild (the .npy's check failed on the .inter's text ids; the Parquet's audited
    history-mean queries over the whole file): Next names check of the model."""
    model, inter = graph_model
    out = tmp_path / f"out.{fmt}"
    output = run("mitigate", str(model), "--interactions", str(inter), "--alpha", alpha, "-o", str(out))
    assert f"Next: popaudit check {model} --interactions {inter}{flag}\n" in output, output
    said = "".join(output.split())  # the console folds a long path anywhere
    note = served_table_note(out, model, f"alpha_{alpha}")
    assert note == (f"{out}, served with the user vectors {model} serves, gives the lists that the 'alpha_{alpha}' scoring "
                    f"of this audit of {model} measures")  # QA6 served F3: was "... serves as the ... of MODEL does"
    assert "".join(f"note: {note}".split()) in said
    sidecar = json.loads((tmp_path / f"out.{fmt}.popaudit.json").read_text())
    assert any("check of the table alone does not rebuild" in w for w in sidecar["warnings"])


def test_the_mapping_says_the_numbering_rests_on_the_files_row_order(graph_model: tuple[Path, Path], tmp_path: Path) -> None:
    """A reordered copy of the .inter numbers every row otherwise and nothing shows it: the
    report's mapping line says what the numbering rests on (issue "Served F10")."""
    model, inter = graph_model
    run("check", str(model), "--interactions", str(inter), "--json", str(tmp_path / "r.json"), "--no-probes",
        "--bootstrap", "0", "-q")
    inputs = json.loads((tmp_path / "r.json").read_text())["inputs"]
    for side in ("item_id_mapping", "user_id_mapping"):
        assert inputs[side].endswith("which holds only for the .inter file RecBole read, in its row order (a reordered "
                                     "copy of the same rows numbers them otherwise, and nothing in the checkpoint "
                                     "shows it)"), inputs[side]
