"""The Markdown and HTML headline says that the model is weak when the verdict's summary
opens with it (README: "a model less accurate than the most-popular list is said first"):
the first line a reader sees does not call a useless model merely unbiased.

Known answers: a random table (no signal) against a holdout of, for each user, the most
popular item they did not train on, which the most-popular list ranks first: its NDCG@10
is 1, and dot serving's is what the JSON's accuracy section holds, below it."""

from __future__ import annotations

import html
import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli

N_ITEMS, N_USERS, DIM = 150, 40, 8


def _files(tmp_path: Path) -> tuple[Path, Path, Path]:
    import torch

    rng = np.random.default_rng(13)
    counts = (200 / np.arange(1, N_ITEMS + 1) ** 0.8).astype(np.int64) + 1
    rows = np.repeat(np.arange(N_ITEMS), counts)
    users = rng.integers(0, N_USERS, rows.size)
    users[:N_USERS] = np.arange(N_USERS)  # every user trains on something
    trained = np.zeros((N_USERS, N_ITEMS), dtype=bool)
    trained[users, rows] = True
    held = np.argmax(~trained, axis=1)  # items are numbered by falling popularity: the most popular untrained one
    log, holdout, model = tmp_path / "log.parquet", tmp_path / "holdout.parquet", tmp_path / "model.pt"
    pq.write_table(pa.table({"user_id": users, "item_id": rows}), log)
    pq.write_table(pa.table({"user_id": np.arange(N_USERS), "item_id": held}), holdout)
    torch.save({"item_embedding.weight": torch.from_numpy(rng.standard_normal((N_ITEMS, DIM)).astype(np.float32)),
                "user_embedding.weight": torch.from_numpy(rng.standard_normal((N_USERS, DIM)).astype(np.float32))},
               model)
    return model, log, holdout


@pytest.mark.slow  # about 10 s: an audit rendered in every format, the HTML's figures drawn
def test_the_headline_says_the_model_is_weak_as_the_summary_does(tmp_path: Path) -> None:
    model, log, holdout = _files(tmp_path)
    out = {fmt: tmp_path / f"r.{fmt}" for fmt in ("json", "md", "html")}
    run = CliRunner().invoke(cli, [
        "check", str(model), "--interactions", str(log), "--holdout", str(holdout), "-k", "10", "--no-probes",
        "--bootstrap", "0", "--json", str(out["json"]), "--markdown", str(out["md"]), "--html", str(out["html"]),
    ], catch_exceptions=False)
    assert run.exit_code == 0, run.output
    report = json.loads(out["json"].read_text())
    at = report["accuracy"]["at"]["10"]
    assert at["popular"]["ndcg"] == pytest.approx(1.0) and at["dot"]["ndcg"] < 0.5
    sentence = (f"The model itself is weak: its dot-product serving reaches a held-out NDCG@10 of "
                f"{at['dot']['ndcg']:.4f}, below the most-popular list's 1.0000.")
    assert report["verdict"]["summary"].startswith(sentence)
    assert "weak" not in report["verdict"]  # the JSON report is unchanged: its summary says it
    assert sentence in " ".join(run.stdout.replace("│", " ").split())  # the console's panel is the summary
    for fmt in ("md", "html"):
        text = html.unescape(out[fmt].read_text())
        lead = text[: text.index("Verdict and recommendations")]
        assert f"the model itself is weak: its dot-product serving reaches a held-out NDCG@10 of " \
               f"{at['dot']['ndcg']:.4f}, below the most-popular list's 1.0000; " in lead, fmt
