"""Rough edges a newcomer hit (issue #14): progress off a terminal, why novelty is
missing, which files were written, a fast refusal of a missing model, labels."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.cli._progress import PlainLines, RichProgress
from auditor.metrics.frequency_norm import frequency_norm_stats
from auditor.report import RenderContext
from auditor.report.batch_rows import BatchSummary, SummaryRow
from auditor.report.batch_summary import summary_figure
from auditor.report.console import ConsoleRenderer
from report_samples import full_result


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _plain(clock: Clock) -> tuple[PlainLines, list[str]]:
    lines: list[str] = []
    return PlainLines(lines.append, interval=10.0, task_seconds=1.0, clock=clock), lines


def test_fast_units_print_at_most_a_line_per_interval_and_a_closing_line() -> None:
    clock = Clock()
    plain, lines = _plain(clock)
    with plain.track("Counting interactions", total=1_000_000) as advance:
        for _ in range(100):  # 100 blocks of 10,000 rows, 0.25 s each: 25 s in all
            clock.now += 0.25
            advance(10_000)
    # At 10 s and 20 s, then the closing line at 25 s.
    assert len(lines) == 3, lines
    assert lines[0].endswith("Counting interactions: 400,000/1,000,000 (40%), 0:10 elapsed")
    assert lines[-1].endswith("Counting interactions: 1,000,000/1,000,000 (100%), 0:25 elapsed · done")


def test_slow_units_print_a_line_each_and_no_repeated_closing_line() -> None:
    clock = Clock()
    plain, lines = _plain(clock)
    with plain.track("Auditing 3 of 3 models", total=3) as advance:
        for _ in range(3):  # one audit (batch row, experiment run) per 4 s
            clock.now += 4.0
            advance(1)
    assert [line.split("] ", 1)[1] for line in lines] == [
        "Auditing 3 of 3 models: 1/3 (33%), 0:04 elapsed",
        "Auditing 3 of 3 models: 2/3 (67%), 0:08 elapsed",
        "Auditing 3 of 3 models: 3/3 (100%), 0:12 elapsed",
    ]


def test_a_short_track_prints_nothing_but_notes_always_print() -> None:
    clock = Clock()
    plain, lines = _plain(clock)
    with plain.track("epoch 1/10", total=200) as advance:  # 200 batches in 0.4 s
        for _ in range(200):
            clock.now += 0.002
            advance(1)
    plain.note("epoch 1/10: loss 4.1, frequency-norm ρ +0.8 [sic]")
    assert len(lines) == 1 and re.fullmatch(r"\[\d\d:\d\d:\d\d\] epoch 1/10: loss 4\.1, .* \[sic\]", lines[0])


def test_quiet_progress_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    progress = RichProgress(enabled=False)
    with progress.track("x", 2) as advance:
        advance(2)
    progress.note("hidden")
    assert capsys.readouterr().err == ""


@pytest.fixture(scope="module")
def retrained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    out = tmp_path_factory.mktemp("retrain") / "m.pt"
    result = CliRunner().invoke(cli, ["retrain", "--n-users", "40", "--n-items", "30", "--n-interactions", "1500",
                                      "--epochs", "3", "-o", str(out)])
    assert result.exit_code == 0, result.output
    return out, result.output


def test_retrain_prints_a_line_per_epoch_when_not_on_a_terminal(retrained: tuple[Path, str]) -> None:
    _out, output = retrained  # CliRunner's streams are no terminal, as under nohup or Slurm
    epochs = re.findall(r"^\[\d\d:\d\d:\d\d\] epoch (\d)/3: loss \d+\.\d+, frequency-norm ρ [+-]\d\.\d+", output, re.M)
    assert epochs == ["1", "2", "3"]


def test_check_confirms_each_file_and_suggests_only_what_was_not_done(
    retrained: tuple[Path, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    model, _ = retrained
    report = model.with_name("r.json")
    result = CliRunner().invoke(cli, ["check", str(model), "--bootstrap", "0", "--no-probes", "--json", str(report),
                                      "--fail-on", "spearman>0.99"])
    assert result.exit_code == 0, result.output
    assert f"Wrote the JSON report: {report}" in result.stderr
    next_line = next(line for line in result.stderr.splitlines() if line.startswith("Next:"))
    # JSON written, a gate given: the same audit with the HTML report, as a command that runs as printed.
    command = shlex.join(["popaudit", "check", str(model), "--no-probes", "--bootstrap", "0", "--html", "report.html"])
    assert next_line == f"Next: {command}"
    assert "Next:" not in result.stdout  # the report itself no longer guesses
    monkeypatch.chdir(model.parent)  # the suggested report.html lands in the working folder
    rerun = CliRunner().invoke(cli, shlex.split(command)[1:], catch_exceptions=False)
    assert rerun.exit_code == 0 and (model.parent / "report.html").is_file()
    # Novelty is measured from the (user, item) training pairs the checkpoint records: no log needed.
    data = json.loads(report.read_text())
    assert data["retrieval"]["at"]["10"]["dot"]["novelty"] > 0
    assert "novelty" not in data["not_measured"]
    # Every output written: no Next line at all.
    html, md = model.with_name("r.html"), model.with_name("r.md")
    result = CliRunner().invoke(cli, ["check", str(model), "--bootstrap", "0", "--no-probes", "--json", str(report),
                                      "--html", str(html), "--markdown", str(md), "--fail-on", "spearman>0.99"])
    assert result.exit_code == 0, result.output
    assert f"Wrote the HTML report: {html}" in result.stderr and f"Wrote the Markdown report: {md}" in result.stderr
    assert re.search(r"^Wrote \d+ figure files in .*r_files/$", result.stderr, re.M)
    assert "Next:" not in result.output


def test_a_missing_model_is_refused_before_heavy_imports(tmp_path: Path) -> None:
    code = (
        "import sys, time\n"
        "t = time.perf_counter()\n"
        "from auditor.cli import main\n"
        "sys.argv = ['popaudit', 'check', '/nonexistent.pt']\n"
        "try:\n    main()\n"
        "except SystemExit as exc:\n    code = exc.code\n"
        "heavy = sorted(m for m in ('torch', 'faiss', 'matplotlib', 'scipy', 'pyarrow') if m in sys.modules)\n"
        "print(code, heavy, round(time.perf_counter() - t, 3), file=sys.stderr)\n"
    )
    tic = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    wall = time.perf_counter() - tic
    assert "Error: model file not found: /nonexistent.pt" in done.stderr
    assert done.stderr.strip().splitlines()[-1].startswith("1 []"), done.stderr  # exit 1, nothing heavy imported
    assert wall < 5.0  # about 0.25 s on an idle machine; generous for a loaded CI runner


def test_a_decile_of_one_frequency_is_labelled_once() -> None:
    rng = np.random.default_rng(0)
    freqs = np.concatenate([np.ones(60, dtype=np.int64), rng.integers(2, 50, 40)])
    fn, _ = frequency_norm_stats(rng.lognormal(size=100), freqs, n_bootstrap=0)
    assert any(d.freq_min == d.freq_max == 1 for d in fn.deciles)
    text = ConsoleRenderer().render(replace(full_result(), frequency_norm=fn), RenderContext(width=120))
    section = text[text.index("Item norm by popularity decile"):text.index("Retrieval skew")]
    assert "1–1" not in section and re.search(r"│\s+\d+ │\s+1 │\s+60 │", section)  # the 60 items seen once


def test_batch_trend_plot_names_models_on_its_x_axis() -> None:
    rows = [SummaryRow(row=i, model=f"runs/{i}/model.pt", label=label, severity="low", spearman=0.1 * i,
                       head_share=1.0 + i, rank_value=0.1 * i) for i, label in enumerate(["nightly-01", None, "v3"])]
    summary = BatchSummary(n_rows=3, n_ok=3, n_error=0, rank_by="spearman", head_share_metric="head_share_1pct_ratio@10",
                           ranking=rows, order=rows, trends=[], failures=[])
    ax = summary_figure(summary).axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["nightly-01", "model.pt", "v3"]
    assert list(ax.get_xticks()) == [0, 1, 2]


def test_batch_max_memory_help_shows_the_default() -> None:
    result = CliRunner().invoke(cli, ["batch", "--help"])
    assert "[default: half the memory available when each audit starts]" in " ".join(result.output.split())


def test_batch_prints_a_line_per_audited_row_when_not_on_a_terminal(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(30, 4)).astype(np.float32))
    counts = "item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(30))
    (tmp_path / "counts.csv").write_text(counts)
    (tmp_path / "m.csv").write_text("model,label\nitems.npy,a\nitems.npy,b\nitems.npy,c\n")
    result = CliRunner().invoke(cli, ["batch", str(tmp_path / "m.csv"), "-o", str(tmp_path / "r.parquet"),
                                      "--frequencies", str(tmp_path / "counts.csv"), "--bootstrap", "0",
                                      "--no-probes"])
    assert result.exit_code == 0, result.output
    lines = re.findall(r"^\[\d\d:\d\d:\d\d\] Auditing 3 of 3 models: (\d)/3", result.stderr, re.M)
    assert lines == ["1", "2", "3"]
