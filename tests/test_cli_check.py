"""`popaudit check` end to end through click's CliRunner, on tables built in tmp_path."""

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli


@pytest.fixture
def biased(tmp_path):
    """A table whose norms follow popularity exactly (ρ = 1), its log, and user vectors."""
    rng = np.random.default_rng(0)
    n_items, dim, n_users = 60, 8, 40
    freqs = np.arange(1, n_items + 1)
    directions = rng.normal(size=(n_items, dim))
    directions /= np.linalg.norm(directions, axis=1, keepdims=True)
    table = (directions * freqs[:, None] ** 0.25).astype(np.float32)
    items = np.repeat(np.arange(n_items), freqs)
    users = rng.integers(0, n_users, items.size)
    np.save(tmp_path / "items.npy", table)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), tmp_path / "log.parquet")
    return tmp_path


def run(*args):
    return CliRunner().invoke(cli, [str(a) for a in args], catch_exceptions=False)


def test_check_reports_perfect_correlation_and_writes_schema_json(biased):
    out = biased / "report.json"
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet", "--json", out, "--no-probes")
    assert result.exit_code == 0, result.output
    assert "Spearman" in result.output
    report = json.loads(out.read_text())
    assert report["schema_version"] == 1
    assert report["tool"]["name"] == "popaudit"
    for key in ("inputs", "frequency_norm", "retrieval", "conditions", "verdict"):
        assert key in report
    fn = report["frequency_norm"]
    assert fn["spearman"] == pytest.approx(1.0)
    assert fn["loglog_slope"] == pytest.approx(0.25, abs=1e-6)
    assert fn["n_items"] == 60 and fn["n_cold"] == 0
    assert len(fn["deciles"]) == 10
    assert report["inputs"]["n_interactions"] == int(np.arange(1, 61).sum())
    # rho = 1, but 40 users have seen the popular items, which are never served to them again:
    # norms follow popularity while serving is not skewed, so no bias is detected.
    assert report["retrieval"]["population"]["seen_items"] == "excluded"
    assert report["verdict"]["bias_detected"] is False
    assert report["verdict"]["summary"].startswith("Norms follow popularity, but serving is not skewed")
    assert not list(biased.glob(".*.tmp"))


def test_fail_on_gate_trips_with_exit_3_and_passes_with_0(biased):
    base = ["check", biased / "items.npy", "--interactions", biased / "log.parquet", "--no-probes", "--no-retrieval", "-q"]
    tripped = run(*base, "--fail-on", "spearman>0.5")
    assert tripped.exit_code == 3
    assert "TRIPPED" in tripped.output
    assert run(*base, "--fail-on", "spearman<0").exit_code == 0


def test_fail_on_typo_is_usage_error_listing_valid_names(biased):
    result = run("check", biased / "items.npy", "--fail-on", "spearmn>0.5")
    assert result.exit_code == 2
    assert "unknown metric 'spearmn'" in result.output
    assert "head_share_1pct_ratio@100" in result.output or "Valid metrics" in result.output
    assert "every <metric>_ratio@K is dot / cosine" in result.output  # one direction, said where names are listed


def test_gate_on_unmeasured_metric_is_an_error_not_a_pass(biased):
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet",
                 "--no-retrieval", "--no-probes", "-q", "--fail-on", "head_share_1pct_ratio@100>1.5")
    assert result.exit_code == 1
    assert "not measured" in result.output


def test_missing_model_is_error_exit_1_without_traceback(tmp_path):
    result = run("check", tmp_path / "nope.pt")
    assert result.exit_code == 1
    assert result.output.startswith("Error:")
    assert "nope.pt" in result.output
    assert "Traceback" not in result.output


def test_pickled_module_is_read_without_running_it(tmp_path):
    model = torch.nn.Module()
    model.item_embedding = torch.nn.Embedding(10, 4)
    torch.save(model, tmp_path / "full.pt")
    result = run("check", tmp_path / "full.pt", "--no-probes", "--format", "json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)  # stderr: progress lines (not a terminal)
    assert report["inputs"]["n_items"] == 10 and report["inputs"]["dim"] == 4
    assert any("without running code" in w for w in report["warnings"])


def test_debug_shows_the_traceback(tmp_path):
    runner = CliRunner()
    result = runner.invoke(cli, ["check", str(tmp_path / "nope.pt"), "--debug"])
    assert result.exit_code != 0
    assert result.exc_info is not None and result.exception is not None


def test_output_format_json_to_file_and_stdout(biased):
    out = biased / "r.json"
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet",
                 "--no-probes", "--no-retrieval", "--format", "json", "-o", out)
    assert result.exit_code == 0
    assert json.loads(out.read_text())["frequency_norm"]["spearman"] == pytest.approx(1.0)
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet",
                 "--no-probes", "--no-retrieval", "--format", "json")
    assert json.loads(result.stdout)["schema_version"] == 1
    # -q silences progress and a console report, not the report asked for by --format (it printed nothing).
    for fmt, start in (("json", "{"), ("markdown", "# "), ("html", "<!DOCTYPE html>")):
        quiet = run("check", biased / "items.npy", "--interactions", biased / "log.parquet",
                    "--no-probes", "--no-retrieval", "--format", fmt, "-q")
        assert quiet.exit_code == 0 and quiet.stdout.startswith(start) and quiet.stderr == "", (fmt, quiet.stdout[:80])
    assert run("check", biased / "items.npy", "--interactions", biased / "log.parquet",
               "--no-probes", "--no-retrieval", "-q").stdout == ""


def test_unknown_format_is_usage_error(biased):
    result = run("check", biased / "items.npy", "--format", "yaml")
    assert result.exit_code == 2
    assert "html" in result.output and "json" in result.output


def test_python_dash_m_entry_point():
    done = subprocess.run([sys.executable, "-m", "auditor", "--help"], capture_output=True, text=True)
    assert done.returncode == 0
    assert "check" in done.stdout


def test_unmapped_and_empty_item_ids_are_reported_not_silently_dropped(biased):
    log = pq.read_table(biased / "log.parquet")
    items = log.column("item_id").to_pylist()
    items[:5] = [None] * 5  # five interactions without an item
    items[5:8] = [999] * 3  # three interactions with an item the table lacks
    pq.write_table(pa.table({"user_id": log.column("user_id"), "item_id": pa.array(items, pa.int64())}),
                   biased / "holes.parquet")
    out = biased / "holes.json"
    # Without a mapping, an id beyond the table stops the audit (rows evidently are not ids) ...
    stopped = run("check", biased / "items.npy", "--interactions", biased / "holes.parquet", "-q")
    assert stopped.exit_code == 1
    assert "--item-ids FILE" in stopped.output and "--assume-row-ids" in stopped.output
    # ... and when the user says rows are ids anyway, the unmapped interactions are reported.
    result = run("check", biased / "items.npy", "--interactions", biased / "holes.parquet", "--assume-row-ids",
                 "--no-probes", "--no-retrieval", "-q", "--json", out)
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    warnings = " ".join(report["warnings"])
    assert "5 interactions" in warnings and "empty item id" in warnings
    assert "3 interactions" in warnings and "1 item id with no row" in warnings
    assert report["inputs"]["n_unmapped_interactions"] == 3


@pytest.mark.parametrize(
    "flag, value, words",
    [("--lr", "-1", "'-1' must be > 0"), ("--lr", "nan", "'nan' is not a finite number"),
     ("--momentum", "-0.5", "'-0.5' must be >= 0"), ("--weight-decay", "inf", "'inf' is not a finite number"),
     ("--momentum", "-1", "'-1' must be >= 0"), ("--seed", "-1", "-1 is not in the range 0<=x<=18446744073709551615")],
)
def test_declared_training_values_are_usage_errors(biased, flag, value, words):
    result = run("check", biased / "items.npy", flag, value, "-q")
    assert result.exit_code == 2
    assert words in result.output and flag in result.output


def test_scheduler_unused_for_a_small_table_is_said_not_silent(biased):
    out = biased / "s.json"
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet", "--no-probes",
                 "--scheduler", "tcp://127.0.0.1:1", "-q", "--json", out)
    assert result.exit_code == 0, result.output
    assert any("--scheduler tcp://127.0.0.1:1 was not used" in w for w in json.loads(out.read_text())["warnings"])


def test_markdown_figure_that_is_an_input_is_refused_before_the_audit(biased):
    figures = biased / "r_files"
    figures.mkdir()
    ids = figures / "head_share.png"
    ids.write_text("".join(f"{i}\n" for i in range(60)))
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet", "--item-ids", ids,
                 "--markdown", biased / "r.md", "--no-probes")
    assert result.exit_code == 1, result.output
    assert "figure head_share.png of --markdown" in result.output
    assert "is the input file given as --item-ids" in result.output
    assert ids.read_text().startswith("0\n") and not (biased / "r.md").exists()


def test_markdown_to_a_special_file_omits_its_figures(biased, tmp_path_factory):
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs on this platform")
    fifo = tmp_path_factory.mktemp("fifo") / "pipe.md"
    os.mkfifo(fifo)
    import threading

    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()))
    reader.start()
    result = run("check", biased / "items.npy", "--interactions", biased / "log.parquet", "--markdown", fifo,
                 "--no-probes", "-q")
    reader.join(timeout=30)
    assert result.exit_code == 0, result.output
    text = got[0].decode()
    assert f"Plots omitted: this report went to {fifo}, not a regular file" in text
    assert "](" not in text.split("## Verdict")[1].split("## Inputs")[0]  # no image links
    assert not (fifo.parent / "pipe_files").exists()
