"""``popaudit check MODEL --trace TRACE`` (issue #26): the training section in every format,
the measured angles as C1/C4/C5 evidence, and a trace of another model flagged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.flat import flat_metrics_from_report
from auditor.monitor import read_trace

RECBOLE = Path(__file__).resolve().parent / "data" / "recbole"
FAST = ["--bootstrap", "0", "--no-probes", "-q"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A retrained model (plain SGD, cosine InfoNCE, lr 10) and its trace, an alert that fired in it."""
    folder = tmp_path_factory.mktemp("trained")
    model, trace = folder / "model.pt", folder / "trace.jsonl"
    done = CliRunner().invoke(cli, ["retrain", "--n-users", "100", "--n-items", "150", "--n-interactions", "3000",
                                    "--epochs", "3", "--trace", str(trace), "--trace-every", "4",
                                    "--alert", "spearman>0.3", "-o", str(model)])
    assert done.exit_code == 0, done.output
    return model, trace


def check(*args: str) -> Any:
    done = CliRunner().invoke(cli, ["check", *args])
    assert done.exit_code == 0, done.output
    return done


@pytest.mark.slow  # three audits, two of them drawing every figure
def test_every_format_has_the_training_section(trained: tuple[Path, Path], tmp_path: Path) -> None:
    model, trace_path = trained
    before = trace_path.read_bytes()
    out = tmp_path / "r"
    done = check(str(model), "--trace", str(trace_path), "--bootstrap", "0", "--no-probes", "--json", f"{out}.json",
                 "--html", f"{out}.html", "--markdown", f"{out}.md")
    assert trace_path.read_bytes() == before
    trace = read_trace(trace_path)
    report = json.loads(Path(f"{out}.json").read_text())
    training = report["training"]
    assert training["source"] == "retrain" and training["point_kind"] == "step" and training["matches_model"]
    assert [p["step"] for p in training["points"]] == [r.step for r in trace.steps] == list(range(4, 37, 4))
    assert [p["spearman"] for p in training["points"]] == [r.spearman for r in trace.steps]
    assert [p["angle_share_90_1"] for p in training["points"]] == [r.angle_share_90_1 for r in trace.steps]
    assert all(p["lr"] == 10.0 for p in training["points"])
    assert [(a["step"], a["alert"]) for a in training["alerts"]] == [(4, "spearman>0.3")]
    pooled = trace.angles()
    assert pooled is not None and training["angles"]["n"] == pooled.n and training["angles"]["orthogonal"] is True
    assert training["angles"]["share_90_1"] == pooled.share_90_1 == 1.0
    # the last step record is the end of training: its rho is check's on the saved model, exactly
    assert trace.steps[-1].step == trace.epochs[-1].step
    assert training["points"][-1]["spearman"] == report["frequency_norm"]["spearman"]

    markdown = Path(f"{out}.md").read_text()
    assert "## While it trained" in markdown  # the end record's rho is the finished model's, at its step:
    assert f"| Spearman ρ at the end of training (step {training['end_step']}) |" in markdown
    assert "spearman\\>0.3 fired at step 4" in markdown and (tmp_path / "r_files" / "training.png").stat().st_size
    html = Path(f"{out}.html").read_text()
    assert "While it trained" in html and 'alt="Lines of Spearman ρ' in html
    console = check(str(model), "--trace", str(trace_path), *FAST[:3])
    assert "While it trained" in console.output and "Alert spearman>0.3 fired at step 4" in console.output
    assert "While it trained" not in check(str(model), *FAST[:3]).output
    assert "training" not in json.loads(check(str(model), *FAST[:3], "--format", "json").stdout)


def bare_table(trained: tuple[Path, Path], folder: Path, rows: slice = slice(None)) -> list[str]:
    """The retrained item table as a .npy and its counts: a file that records no optimizer and no loss."""
    ckpt = torch.load(trained[0], weights_only=True)
    np.save(folder / "items.npy", ckpt["item_embeddings"].numpy()[rows])
    ids, freq = ckpt["item_ids"][rows], ckpt["item_frequencies"][rows]
    (folder / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{int(f)}\n" for i, f in zip(ids, freq)))
    return [str(folder / "items.npy"), "--frequencies", str(folder / "counts.csv"), "--bootstrap", "0", "--format", "json"]


def test_measured_angles_settle_c1_c4_c5_of_a_bare_table(trained: tuple[Path, Path], tmp_path: Path) -> None:
    args = bare_table(trained, tmp_path)
    alone = json.loads(check(*args).stdout)["conditions"]
    assert (alone["C1"]["status"], alone["C4"]["status"]) == ("unknown", "unknown")
    # C5 from the table alone, which needs no learning rate (conditions QA F4)
    assert alone["C5"]["details"]["decided_by"] == "table" and "growth_source" not in alone["C5"]["details"]

    report = json.loads(check(*args, "--trace", str(trained[1])).stdout)
    c = report["conditions"]
    pooled = read_trace(trained[1]).angles()
    assert pooled is not None
    for key in ("C1", "C4"):  # every measured update at 90°: plain SGD on a cosine loss
        assert c[key]["status"] == "holds", c[key]
        assert "729 update angles over steps 4–36: 100.0% within 90° ± 1°" in c[key]["evidence"]
        assert "(source: trace)" in c[key]["evidence"] and c[key]["details"]["trace_angles"]["n"] == pooled.n == 729
    assert c["C1"]["details"]["optimizer"] == "SGD" and c["C1"]["details"]["sources"]["kind"] == "trace (header.optimizer)"
    assert c["C1"]["details"]["lr"] == 10.0 and c["C1"]["details"]["sources"]["lr"] == "trace (lr at step 36)"
    flat = flat_metrics_from_report(report)  # the trace's figures as gate names
    assert flat["training_angle_share_90_1"] == pooled.share_90_1 == 1.0
    assert flat["training_spearman"] == [p for p in read_trace(trained[1]).steps if p.spearman is not None][-1].spearman
    c5 = c["C5"]
    assert c5["status"] == "holds" and c5["details"]["growth_source"] == "trace"
    assert c5["details"]["growth_per_update"] == pooled.growth_per_update and c5["details"]["epochs"] == 3.0
    assert c5["evidence"].startswith("lr=10 (trace (lr at step 36)): growth per update c/s² = ")
    # the projection of C5's docstring from the trace's growth and the counts, by hand
    freq = np.array([int(line.split(",")[1]) for line in (tmp_path / "counts.csv").read_text().splitlines()[1:]])
    g, pos = pooled.growth_per_update, freq[freq > 0].astype(float)
    head = np.sqrt(1 + 2 * g * np.quantile(pos, 0.99) * 3)
    assert c5["details"]["s_growth_head"] == pytest.approx(head, rel=1e-12)


def test_a_trace_of_another_model_is_flagged(trained: tuple[Path, Path], tmp_path: Path) -> None:
    report = json.loads(check(*bare_table(trained, tmp_path, slice(0, 149)), "--trace", str(trained[1])).stdout)
    assert report["training"]["matches_model"] is False
    assert report["training"]["mismatch"] == "the trace watched 150 items, the audited table has 149 rows"
    # another model's figures are not this model's flat metrics
    assert flat_metrics_from_report(report)["training_spearman"] is None
    assert any("is of another model" in w and "not used as evidence" in w for w in report["warnings"])
    assert report["conditions"]["C1"]["status"] == "unknown" and "trace" not in report["conditions"]["C1"]["evidence"]
    assert report["conditions"]["C5"]["details"].get("growth_source") != "trace"

    # the same item count, but other item ids in row order
    args = bare_table(trained, tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("".join(f"{1000 + i}\n" for i in range(150)))
    counts = tmp_path / "counts.csv"
    counts.write_text("item_id,count\n" + "".join(f"{1000 + i},{i + 1}\n" for i in range(150)))
    report = json.loads(check(*args, "--item-ids", str(ids), "--trace", str(trained[1])).stdout)
    assert report["training"]["mismatch"] == "the trace's item ids (in row order) are not the audited table's"


@pytest.mark.slow  # a full audit of a RecBole checkpoint with its figures
def test_the_recbole_adapters_trace_renders_with_its_checkpoint(tmp_path: Path) -> None:
    """BPR on tiny.inter: the trace of a real RecBole run (SGD, a dot-product loss) beside a
    checkpoint of the same catalogue trained by another run (Adam): the section renders, but
    the trace is flagged as another model's and its angles are no evidence."""
    out = tmp_path / "r.md"
    # The run recorded RecBole's default random-order split, which is not reproduced: RecBole's
    # user tokens as --user-ids make the whole log the training log (tests/test_framework_recbole.py).
    users = tmp_path / "users.txt"
    users.write_text("\n".join(json.loads((RECBOLE / "BPR-tiny.tokens.json").read_text())["user_id"][1:]) + "\n")
    done = check(str(RECBOLE / "BPR-tiny.pth"), "--interactions", str(RECBOLE / "tiny.inter"), "--user-ids", str(users),
                 "--trace",
                 str(RECBOLE / "BPR-tiny.trace.jsonl"), *FAST, "--markdown", str(out), "--json", str(tmp_path / "r.json"))
    assert done.exit_code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    training = report["training"]
    assert training["source"] == "recbole" and training["angles"]["orthogonal"] is False
    assert training["matches_model"] is False
    assert training["mismatch"] == "the trace's run used SGD, the checkpoint's optimizer state records Adam"
    assert [p["step"] for p in training["points"]] == list(range(2, 21, 2))
    assert [(a["step"], a["alert"]) for a in training["alerts"]] == [(2, "angle_share_90_1<0.5")]
    c4 = report["conditions"]["C4"]
    assert c4["status"] == "violated" and "recorded model 'BPR'" in c4["evidence"]
    assert "(source: trace)" not in c4["evidence"] and "trace_angles" not in c4["details"]
    assert "## While it trained" in out.read_text() and (tmp_path / "r_files" / "training.png").exists()


def hand_trace(path: Path, n_items: int, optimizer: str | None, share: float, lr: float | None) -> None:
    """A trace written record by record with the monitor's own schema: two step records
    (ρ not measured: the table is random, so a ρ from another table would flag the trace)."""
    from auditor.trace_schema import TraceEnd, TraceHeader, TraceRecord

    header = TraceHeader(source="pytorch", n_items=n_items, dim=4, counts="running", interval=5, k=10,
                         head_percent=1.0, queries="items", n_queries=n_items, max_exact_items=200_000,
                         sample_items=100_000, optimizer=optimizer)
    records = [TraceRecord(
        kind="step", step=step, epoch=1, elapsed_s=0.1, wall_time=1.0e9, spearman=None, spearman_n=n_items,
        spearman_method="exact", spearman_ci=None, loglog_slope=0.1, mean_norm=1.0, n_nonfinite=0, n_counted=100,
        angle_n=n, angle_share_90_1=share, angle_share_90_10=1.0, angle_median=90.0, growth_per_update=None,
        head_share_dot=0.1, head_share_cosine=0.1, head_share_ratio=1.0, lr=lr, loss=1.0,
    ).to_json() for step, n in ((5, 30), (10, 10))]
    lines = [header.to_json(), *records, TraceEnd(step=10, epoch=1, reason="completed").to_json()]
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))


def test_the_traces_optimizer_and_tilted_angles(tmp_path: Path) -> None:
    """An optimizer the file does not record comes from the trace; tilted angles settle
    nothing alone, and with C1-C3 known to hold they make the loss the cause."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "items.npy", rng.normal(size=(20, 4)).astype(np.float32))
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{i + 1}\n" for i in range(20)))
    args = [str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"), "--bootstrap", "0",
            "--no-probes", "--format", "json", "--trace", str(tmp_path / "t.jsonl")]

    hand_trace(tmp_path / "t.jsonl", 20, "Adam", 0.3, 0.01)
    c = json.loads(check(*args).stdout)["conditions"]
    assert c["C1"]["status"] == "violated"
    assert c["C1"]["evidence"].startswith("trace (header.optimizer): Adam rescales each coordinate")
    # pooled over the records by their angle counts: (30 x 0.3 + 10 x 0.3) / 40
    assert "40 update angles over steps 5–10: 30.0% within 90° ± 1°" in c["C1"]["evidence"]
    assert c["C4"]["status"] == "unknown" and "not orthogonal" not in c["C4"]["evidence"]

    hand_trace(tmp_path / "t.jsonl", 20, "SGD", 0.3, 0.5)  # plain SGD declared: the loss must be the cause
    c = json.loads(check(*args, "--momentum", "0", "--weight-decay", "0").stdout)["conditions"]
    assert c["C1"]["status"] == "holds" and c["C1"]["details"]["lr"] == 0.5
    assert c["C4"]["status"] == "violated" and "not orthogonal although C1–C3 hold" in c["C4"]["evidence"]

    hand_trace(tmp_path / "t.jsonl", 20, "SGD", 0.7, 0.5)  # neither clearly orthogonal nor tilted
    c = json.loads(check(*args, "--momentum", "0", "--weight-decay", "0").stdout)["conditions"]
    assert c["C4"]["status"] == "unknown" and c["C4"]["details"]["trace_angles"]["orthogonal"] is None


def test_c5_projects_the_updates_a_stopped_run_took(tmp_path: Path) -> None:
    """A run an alert stopped at step 4 of an epoch of 12 (3,000 pairs in batches of 256):
    C5 projects 4/12 of an epoch of updates, from the checkpoint's config and from the trace."""
    model, trace = tmp_path / "m.pt", tmp_path / "t.jsonl"
    done = CliRunner().invoke(cli, ["retrain", "--n-users", "100", "--n-items", "150", "--n-interactions", "3000",
                                    "--epochs", "2", "--trace", str(trace), "--trace-every", "4", "--alert",
                                    "spearman>0.3", "--on-alert", "stop", "-o", str(model), "-q", "--threads", "1"])
    assert done.exit_code == 0, done.output
    assert read_trace(trace).end.step == 4  # type: ignore[union-attr]
    config = torch.load(model, weights_only=False)["config"]
    assert (config["steps"], config["steps_per_epoch"], config["epochs"]) == (4, 12, 1)
    c5 = json.loads(check(str(model), "--trace", str(trace), *FAST[:-1], "--format", "json").stdout)["conditions"]["C5"]
    freq = torch.load(model, weights_only=False)["item_frequencies"].numpy()
    head = float(np.quantile(freq[freq > 0].astype(float), 0.99))
    assert c5["details"]["epochs"] == pytest.approx(1 / 3, rel=1e-15)
    assert c5["details"]["appearances_head"] == pytest.approx(head / 3, rel=1e-12)
    assert "over frequency × 0.333333 epochs (the updates actually taken: config (4 steps taken ÷ 12 steps per " \
           "epoch))" in c5["evidence"]
    # a bare table records nothing: the trace's end step over its header's steps per epoch
    bare = tmp_path / "bare"
    bare.mkdir()
    report = json.loads(check(*bare_table((model, trace), bare), "--no-probes", "--trace", str(trace)).stdout)
    assert report["training"]["steps"] == 4 and report["training"]["steps_per_epoch"] == 12
    c5 = report["conditions"]["C5"]
    assert c5["details"]["epochs"] == pytest.approx(1 / 3, rel=1e-15)
    assert "(the updates actually taken: trace (4 steps taken ÷ 12 steps per epoch))" in c5["evidence"]


def _retrain(folder: Path, name: str, *extra: str) -> tuple[Path, Path]:
    """A real retrain run on the synthetic catalogue of the QA finding (200 users, 150 items)."""
    model, trace = folder / f"{name}.pt", folder / f"{name}.jsonl"
    done = CliRunner().invoke(cli, ["retrain", "--n-users", "200", "--n-items", "150", "--n-interactions", "4000",
                                    "--trace", str(trace), "-o", str(model), "-q", "--threads", "1", *extra])
    assert done.exit_code == 0, done.output
    return model, trace


def test_a_trace_of_another_run_of_the_same_catalogue_is_flagged(tmp_path: Path) -> None:
    """Same items and ids, another run: the optimizer, the loss, the learning rate or the end ρ
    tell it apart; its angles are then no evidence for C4 or C5."""
    sgd = _retrain(tmp_path, "sgd", "--epochs", "2", "--trace-every", "0")  # SGD lr 10, infonce-cos
    adam = _retrain(tmp_path, "adam", "--epochs", "1", "--optimizer", "adam", "--loss", "infonce-dot",
                    "--trace-every", "5")
    own = json.loads(check(str(sgd[0]), "--trace", str(sgd[1]), *FAST[:-1], "--format", "json").stdout)
    assert own["training"]["matches_model"] is True and own["training"]["mismatch"] is None
    end = read_trace(sgd[1]).records[-1]
    assert own["training"]["end_spearman"] == end.spearman == own["frequency_norm"]["spearman"]  # to the last bit
    assert own["training"]["end_spearman_range"] == [end.spearman - 0.02, end.spearman + 0.02]

    report = json.loads(check(str(sgd[0]), "--trace", str(adam[1]), *FAST[:-1], "--format", "json").stdout)
    assert report["training"]["matches_model"] is False
    assert report["training"]["mismatch"] == "the trace's run used Adam, the checkpoint's optimizer state records SGD"
    assert any(w.endswith("is of another model: the trace's run used Adam, the checkpoint's optimizer state records "
                          "SGD; its figures are shown but its update angles are not used as evidence for C1, C4 or C5")
               for w in report["warnings"])
    c = report["conditions"]
    assert c["C4"]["status"] == "holds" and "trace_angles" not in c["C4"]["details"]  # the loss's name decides
    assert c["C5"]["details"].get("growth_source") != "trace" and "trace" not in c["C5"]["evidence"]

    loss = _retrain(tmp_path, "dot", "--epochs", "1", "--loss", "infonce-dot", "--trace-every", "0")
    report = json.loads(check(str(sgd[0]), "--trace", str(loss[1]), *FAST[:-1], "--format", "json").stdout)
    assert report["training"]["mismatch"] == "the trace's config records the loss 'infonce-dot', the checkpoint's " \
                                             "'infonce-cos'"
    lr = _retrain(tmp_path, "lr", "--epochs", "1", "--lr", "5", "--trace-every", "0")
    report = json.loads(check(str(sgd[0]), "--trace", str(lr[1]), *FAST[:-1], "--format", "json").stdout)
    assert report["training"]["mismatch"] == "the trace's config records the learning rate 5, the checkpoint's 10"

    # every recorded setting alike, another initial scale: only the end ρ tells
    wide = _retrain(tmp_path, "wide", "--epochs", "2", "--init-std", "1", "--trace-every", "0")
    report = json.loads(check(str(sgd[0]), "--trace", str(wide[1]), *FAST[:-1], "--format", "json").stdout)
    theirs, ours = read_trace(wide[1]).records[-1].spearman, report["frequency_norm"]["spearman"]
    assert theirs is not None and abs(theirs - ours) > 0.5
    assert report["training"]["matches_model"] is False
    assert report["training"]["mismatch"] == (
        f"its last record's Spearman ρ {theirs:.4f} (step 32, the model at the end of training) is not the audited "
        f"table's {ours:.4f}: the same table gives a ρ in [{theirs - 0.02:.4f}, {theirs + 0.02:.4f}] (its ρ ± 0.02: "
        "the same computation on the same counts)")
    assert report["conditions"]["C1"]["details"].get("trace_angles") is None


def test_a_traces_steps_per_epoch_come_from_epoch_one_when_training_went_on(tmp_path: Path) -> None:
    """No config: epoch 1 ended at step 3, an alert stopped epoch 2 after step 2 of it, so the
    run took 5 steps of 3 per epoch (5/3 epochs); a stop within epoch 1 leaves it unknown."""
    from auditor.conditions.facts import read_trace_facts
    from auditor.loading.trace_input import summarise
    from auditor.monitor import TrainingMonitor

    table = torch.zeros(4, 2, dtype=torch.float64)
    table[:, 0] = torch.arange(1.0, 5.0)
    path = tmp_path / "t.jsonl"
    monitor = TrainingMonitor(table, counts=np.arange(4.0), interval=0, trace=path, n_queries=2)
    for _ in range(3):
        monitor.before_step(), monitor.after_step()
    monitor.end_epoch()
    for _ in range(2):
        monitor.before_step(), monitor.after_step()
    monitor.end_epoch()
    monitor.close("stopped by hand")
    section = summarise(read_trace(path), path)
    assert (section.steps, section.steps_per_epoch, section.epochs) == (5, 3, 2)
    epochs = read_trace_facts(section).epochs
    assert epochs is not None and epochs.value == 5 / 3 and epochs.source == "trace (5 steps taken ÷ 3 steps per epoch)"

    short = tmp_path / "s.jsonl"
    monitor = TrainingMonitor(table, counts=np.arange(4.0), interval=0, trace=short, n_queries=2)
    monitor.before_step(), monitor.after_step()
    monitor.end_epoch()
    monitor.close("stopped by hand")
    section = summarise(read_trace(short), short)
    assert (section.steps, section.steps_per_epoch) == (1, None)
    assert read_trace_facts(section).epochs.value == 1.0  # type: ignore[union-attr]  # the epochs begun


def test_a_rate_stored_in_float32_is_the_same_rate() -> None:
    """A checkpoint that stores lr 0.05 in float32 (0.0500000007) and a trace that records
    0.05 are one run; 0.05 against 0.051 are two (the tolerance, 1e-6 relative, is the one
    the declared --lr is compared with too)."""
    from types import SimpleNamespace

    from auditor.loading.trace_input import _setting_mismatch
    from auditor.model import ModelBundle

    def bundle(lr: float) -> ModelBundle:
        return ModelBundle(Path("m.pt"), "state_dict", np.ones((3, 2), dtype=np.float32), config={"lr": lr})

    trace = SimpleNamespace(header=SimpleNamespace(config={"lr": 0.05}, optimizer=None))
    assert _setting_mismatch(trace, bundle(float(np.float32(0.05)))) is None  # type: ignore[arg-type]
    assert _setting_mismatch(trace, bundle(0.051)) == (  # type: ignore[arg-type]
        "the trace's config records the learning rate 0.05, the checkpoint's 0.051")
