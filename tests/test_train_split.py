"""retrain --holdout-fraction: the per-user split, the time column, and the held-out
pairs stored in the checkpoint and loaded as ModelBundle.holdout_pairs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from auditor.config import LoadOptions
from auditor.errors import InputError, ModelLoadError
from auditor.loading import load_model
from auditor.train.data import TrainingData, read_interactions, synthetic_interactions
from auditor.train.split import held_out_counts, split_holdout


def _data(users: list[int], items: list[int], times: list[float] | None = None, n_items: int = 10) -> TrainingData:
    n_users = max(users) + 1
    return TrainingData(
        users=np.array(users, np.int64), items=np.array(items, np.int64), n_users=n_users, n_items=n_items,
        user_ids=list(range(n_users)), item_ids=list(range(n_items)), description={"kind": "file", "path": "x"},
        timestamps=None if times is None else np.array(times, np.float64),
    )


def test_held_out_counts_follow_the_ratio_rule() -> None:
    counts = np.array([0, 1, 2, 3, 5, 9, 10, 100])
    # floor(0.2 n), at least 1 for users with 2 or more (RecBole's two-part ratio split), none of 1
    assert held_out_counts(counts, 0.2).tolist() == [0, 0, 1, 1, 1, 1, 2, 20]
    assert held_out_counts(np.array([100]), 0.29).tolist() == [29]  # int(0.29 * 100) would be 28
    assert held_out_counts(np.array([2, 30]), 0.9).tolist() == [1, 27]  # at most n - 1
    assert held_out_counts(np.array([30]), 0.1).tolist() == [3]


def test_time_split_holds_out_each_users_latest() -> None:
    #            user 0: five items at shuffled times       user 1: one   user 2: two
    data = _data([0, 0, 0, 0, 0, 1, 2, 2], [0, 1, 2, 3, 4, 5, 6, 7], [50, 10, 40, 20, 30, 5, 7, 3])
    split = split_holdout(data, 0.4, "auto", seed=0)
    assert split.method == "time"  # auto: the data has times
    assert split.holdout.tolist() == [[0, 2], [0, 0], [2, 6]]  # user 0: times 40, 50; user 2: time 7
    train = split.train
    assert sorted(zip(train.users.tolist(), train.items.tolist())) == [(0, 1), (0, 3), (0, 4), (1, 5), (2, 7)]
    assert np.all(np.diff(train.timestamps) >= 0)  # training part in time order
    assert train.n_users == 3 and train.n_items == 10 and train.user_ids == data.user_ids
    assert split.record()["n_holdout_pairs"] == 3 and split.record()["n_holdout_users"] == 2


def test_random_split_is_seeded_and_keeps_the_fraction_per_user() -> None:
    data = synthetic_interactions(50, 40, 3000, seed=1)
    a = split_holdout(data, 0.25, "auto", seed=3)
    assert a.method == "random"  # synthetic data has no times
    b = split_holdout(data, 0.25, "random", seed=3)
    c = split_holdout(data, 0.25, "random", seed=4)
    assert np.array_equal(a.holdout, b.holdout) and not np.array_equal(a.holdout, c.holdout)
    n = np.bincount(data.users, minlength=50)
    held = np.bincount(a.holdout[:, 0], minlength=50) + 0
    trained = np.bincount(a.train.users, minlength=50)
    # every interaction is in exactly one part, save repeats of training pairs (dropped from the holdout)
    assert np.array_equal(trained + held + np.bincount(_repeat_users(data, a), minlength=50), n)
    assert np.array_equal(trained, n - held_out_counts(n, 0.25))
    train_pairs = set(zip(a.train.users.tolist(), a.train.items.tolist()))
    assert not train_pairs & set(map(tuple, a.holdout.tolist()))  # never trained on
    assert len(set(map(tuple, a.holdout.tolist()))) == len(a.holdout)


def _repeat_users(data: TrainingData, split: object) -> np.ndarray:
    """Users of held-out interactions that were dropped as repeats (recomputed by hand)."""
    held_rows = held_out_counts(np.bincount(data.users, minlength=data.n_users), split.fraction)  # type: ignore[attr-defined]
    kept = np.bincount(split.holdout[:, 0], minlength=data.n_users)  # type: ignore[attr-defined]
    return np.repeat(np.arange(data.n_users), held_rows - kept)


def test_repeats_of_training_pairs_leave_the_holdout() -> None:
    data = _data([0, 0, 0, 0], [7, 1, 7, 2], [1, 2, 9, 8])  # item 7 again at the latest time
    split = split_holdout(data, 0.5, "time", seed=0)  # holds out times 9 and 8: items 7 (repeat) and 2
    assert split.holdout.tolist() == [[0, 2]] and split.n_repeats_dropped == 1


def test_refusals() -> None:
    data = _data([0, 0], [1, 2])
    with pytest.raises(InputError, match="time column"):
        split_holdout(data, 0.5, "time")
    with pytest.raises(InputError, match="between 0 and 1"):
        split_holdout(data, 1.0, "random")


# ------------------------------------------------------------------------ time columns


def test_time_columns_of_every_log_kind(tmp_path: Path) -> None:
    inter = tmp_path / "a.inter"
    inter.write_text("user_id:token\titem_id:token\ttimestamp:float\nu1\ti1\t30.5\nu2\ti2\t10\n\ti3\t99\nu1\ti2\t20\n")
    d = read_interactions(inter, times="split")
    assert d.timestamps.tolist() == [30.5, 10.0, 20.0]  # the row without a user is dropped, as from the pairs
    csv = tmp_path / "b.csv"
    csv.write_text("user,item,when\n1,5,2024-01-02T00:00:00\n2,6,2024-01-01T00:00:00\n")
    d = read_interactions(csv, time_col="when")
    assert d.timestamps.tolist() == [1704153600e9, 1704067200e9] and d.description["time_col"] == "when"
    dat = tmp_path / "ratings.dat"
    dat.write_text("1::10::5::978300760\n1::20::3::978302109\n2::10::4::978301968\n")
    assert read_interactions(dat, times="split").timestamps.tolist() == [978300760, 978302109, 978301968]
    plain = tmp_path / "c.csv"
    plain.write_text("user_id,item_id\n1,2\n1,3\n")
    assert read_interactions(plain, times="split").timestamps is None  # no time column: random split


# ------------------------------------------------------------- checkpoint round trip


def _udata(path: Path) -> dict[int, list[tuple[int, int]]]:
    """A u.data log in shuffled time order; returns each user's (time, item) pairs."""
    rng = np.random.default_rng(5)
    by_user: dict[int, list[tuple[int, int]]] = {}
    rows = []
    for user in range(1, 13):
        n = int(rng.integers(1, 9))
        items = rng.choice(np.arange(100, 140), size=n, replace=False)
        times = rng.choice(np.arange(880_000_000, 880_001_000), size=n, replace=False)
        by_user[user] = sorted(zip(times.tolist(), items.tolist()))
        rows += [f"{user}\t{i}\t3\t{t}" for t, i in zip(times.tolist(), items.tolist())]
    rng.shuffle(rows)
    path.write_text("\n".join(rows) + "\n")
    return by_user


def test_retrain_stores_the_time_split_and_check_loads_it(tmp_path: Path) -> None:
    log = tmp_path / "u.data"
    by_user = _udata(log)
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--holdout-fraction", "0.3", "--epochs", "1",
                                   "--batch-size", "8", "--dim", "4", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "Held out (time split, fraction 0.3)" in res.output
    ck = torch.load(out, weights_only=True)
    assert ck["config"]["holdout"]["split"] == "time" and ck["config"]["holdout"]["time_col"] == "timestamp"
    bundle = load_model(out, LoadOptions())
    held, trained = bundle.holdout_pairs, bundle.train_pairs
    assert held is not None and trained is not None
    item_ids = np.asarray(bundle.item_ids)
    got = {(int(held.user_ids[u]), int(item_ids[r])) for u, r in zip(held.user_index, held.item_rows)}
    expected = set()
    for user, events in by_user.items():
        h = int(held_out_counts(np.array([len(events)]), 0.3)[0])
        expected |= {(user, item) for _, item in events[len(events) - h:]}  # the latest h by time
    assert got == expected and len(got) == len(held)
    train_set = {(int(trained.user_ids[u]), int(item_ids[r])) for u, r in zip(trained.user_index, trained.item_rows)}
    assert not got & train_set and len(got) + len(train_set) == sum(map(len, by_user.values()))
    assert int(bundle.item_frequencies.sum()) == len(train_set)  # frequencies count the training part only


def test_loader_checks_the_recorded_holdout(tmp_path: Path) -> None:
    out = tmp_path / "m.pt"
    res = CliRunner().invoke(cli, ["retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "200",
                                   "--holdout-fraction", "0.2", "--epochs", "1", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "random split" in res.output
    ck = torch.load(out, weights_only=True)
    assert ck["holdout_pairs"].dtype == torch.int64 and ck["holdout_pairs"].shape[1] == 2
    ck["holdout_pairs"][0, 1] = 10  # beyond the 10-item table
    torch.save(ck, tmp_path / "bad.pt")
    with pytest.raises(ModelLoadError, match="holdout_pairs row 0"):
        load_model(tmp_path / "bad.pt", LoadOptions())
    del ck["holdout_pairs"]
    torch.save(ck, tmp_path / "none.pt")
    assert load_model(tmp_path / "none.pt", LoadOptions()).holdout_pairs is None


def test_results_md_counts_trained_and_held_out_interactions_of_a_known_split() -> None:
    """experiment mitigations' results.md: the interactions trained on exclude the held-out
    ones, the two add up to the log, and the evaluated pairs are told apart from them."""
    from auditor.report.mitigation_summary import to_markdown
    from auditor.train.experiments import ExperimentSizes
    from auditor.mitigation.experiment import MitigationResult

    #                user 0: 5 at times 1-5    user 1: 5 at times 1-5   user 2: one
    data = _data([0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 2], [1, 2, 3, 1, 4, 5, 6, 7, 8, 5, 9],
                 [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1])
    split = split_holdout(data, 0.4, "time", seed=0)
    # floor(0.4 * 5) = 2 latest of users 0 and 1, none of user 2: items 1, 4 and 8, 5 held out;
    # 1 (user 0) and 5 (user 1) repeat a training pair, so two pairs are evaluated.
    record = split.record()
    assert (record["n_train_interactions"], record["n_holdout_interactions"]) == (7, 4)
    assert (record["n_holdout_pairs"], record["n_holdout_users"], record["n_repeats_dropped"]) == (2, 2, 2)
    assert sorted(split.holdout.tolist()) == [[0, 4], [1, 8]]
    run = {"seed": 0, "k": 10, **{key: record[key] for key in (
        "n_train_interactions", "n_holdout_interactions", "n_holdout_pairs", "n_holdout_users", "n_repeats_dropped")}}
    nan = {"mean": float("nan"), "std": float("nan")}
    row = {"name": "reference", "label": "reference", "kind": "reference", "model": "reference", "config": {},
           "runs": [run], "summary": {m: nan for m in ("ndcg", "recall", "head_share_1pct", "gini", "spearman")}}
    description = {"kind": "file", "path": "x", "format": "csv", "user_col": "u", "item_col": "i",
                   "n_users": 3, "n_items": 10, "n_interactions": 11}
    md = to_markdown(MitigationResult(ExperimentSizes(epochs=1), [0], 0.4, "time", (0.5,), [row], description))
    assert "3 users, 10 items, 11 interactions" in md and "1 epoch per run" in md
    assert ("Holdout: the latest 0.4 of each user's interactions, never trained on (seed 0: 7 interactions "
            "trained on, 4 held out; 2 distinct held-out (user, item) pairs of 2 users evaluated, 2 repeats of a "
            "training pair left out).") in md
    assert "None" not in md and "| n/a | n/a |" in md  # nothing measured: n/a, never None or nan


def test_users_whose_held_out_interactions_all_repeat_are_counted_and_said(tmp_path: Path) -> None:
    """User 0 holds out item 7 again (a repeat: dropped, user 0 emptied); user 1 holds out
    item 3 (kept); user 2 has one interaction (holds none out, not counted). The record
    counts 2 interactions held out, 1 pair kept, 1 repeat, 1 user emptied, and check of a
    checkpoint recording it says all four numbers beside the accuracy."""
    from auditor.loading.recorded_split import recorded_split_notes

    data = _data([0, 0, 0, 1, 1, 2], [7, 1, 7, 2, 3, 4], [1, 2, 9, 1, 5, 3])
    split = split_holdout(data, 0.5, "time", seed=0)
    assert split.holdout.tolist() == [[1, 3]]
    record = split.record()
    assert (record["n_holdout_interactions"], record["n_holdout_pairs"], record["n_repeats_dropped"],
            record["n_users_without_holdout"]) == (2, 1, 1, 1)
    notes = recorded_split_notes({"holdout": record}, "m.pt (recorded holdout)")
    assert notes == ("m.pt (recorded holdout): the split took 2 interactions out of training (fraction 0.5), but 1 of "
                     "them repeats one of the user's training pairs (or an earlier held-out one) and is left out, so 1 "
                     "distinct held-out pair is evaluated; 1 user with two or more interactions kept no held-out "
                     "pair and is not evaluated",)
    assert recorded_split_notes({"holdout": {**record, "n_repeats_dropped": 0}}, "m.pt") == ()
    assert recorded_split_notes({"holdout": {**record, "n_repeats_dropped": "2"}}, "m.pt") == ()  # not a count
    assert recorded_split_notes(None, "m.pt") == ()


@pytest.mark.slow
def test_check_of_a_retrained_checkpoint_says_what_its_split_dropped(tmp_path: Path) -> None:
    out = tmp_path / "rt.pt"
    made = CliRunner().invoke(cli, ["retrain", "--data", "synthetic", "--n-users", "60", "--n-items", "40",
                                    "--n-interactions", "1500", "--epochs", "1", "--dim", "4", "--threads", "1",
                                    "--holdout-fraction", "0.2", "-q", "-o", str(out)])
    assert made.exit_code == 0, made.output
    record = torch.load(out, weights_only=False)["config"]["holdout"]
    held = torch.load(out, weights_only=False)["holdout_pairs"].numpy()
    # Every user emptied by the repeats is a user with no stored held-out pair (the converse
    # need not hold: stored pairs count distinct pairs, the rule counts interactions).
    assert record["n_users_without_holdout"] <= 60 - np.unique(held[:, 0]).size
    assert record["n_repeats_dropped"] > 0 and record["n_users_without_holdout"] > 0
    report = tmp_path / "r.json"
    checked = CliRunner().invoke(cli, ["check", str(out), "--no-probes", "--bootstrap", "0", "-q", "--json", str(report)])
    assert checked.exit_code in (0, 3), checked.output
    import json
    warnings = json.loads(report.read_text())["warnings"]
    said = [w for w in warnings if "the split took" in w]
    assert len(said) == 1 and f"{record['n_repeats_dropped']:,} of them repeat" in said[0]
    assert f"so {record['n_holdout_pairs']:,} distinct held-out pairs" in said[0]
    emptied = record["n_users_without_holdout"]
    assert f"; {emptied:,} user{'s' if emptied != 1 else ''} with two or more interactions kept no" in said[0]


def test_retrain_words_its_split_as_check_does(tmp_path: Path) -> None:
    """QA retrain F4: retrain's summary counts the interactions the split took out of training
    (2) apart from the distinct pairs evaluated (1), in check's own sentence, not "1 interactions"
    held out and "1 repeats of training pairs" (the dropped row repeats a training pair here;
    one repeating an earlier held-out row is counted the same)."""
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id,timestamp\n0,7,1\n0,1,2\n0,7,9\n1,2,1\n1,3,5\n2,4,3\n")
    res = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--holdout-fraction", "0.5", "--epochs", "1",
                                   "--batch-size", "2", "--dim", "4", "--threads", "1", "-o", str(tmp_path / "m.pt")])
    assert res.exit_code == 0, res.output
    assert ("Held out (time split, never trained on): the split took 2 interactions out of training (fraction 0.5), "
            "but 1 of them repeats one of the user's training pairs (or an earlier held-out one) and is left out, so 1 "
            "distinct held-out pair is evaluated; 1 user with two or more interactions kept no held-out pair and is "
            "not evaluated.") in res.output
    assert "repeats of training pairs" not in res.output and "1 users" not in res.output


def _both_routes(tmp_path: Path) -> dict[str, tuple[dict[str, Any], str]]:
    """One retrain split checked by both routes: its recorded holdout, and the same split as
    a --holdout file (user 0's held-out item 7 repeats a training pair; user 1's item 3 does
    not; user 2's single interaction is never held out): route -> (JSON accuracy, output)."""
    log = tmp_path / "log.csv"
    log.write_text("user_id,item_id,timestamp\n0,7,1\n0,1,2\n0,7,9\n1,2,1\n1,3,5\n2,4,3\n")
    model = tmp_path / "m.pt"
    made = CliRunner().invoke(cli, ["retrain", "--data", str(log), "--holdout-fraction", "0.5", "--epochs", "1",
                                    "--batch-size", "2", "--dim", "4", "--threads", "1", "-q", "-o", str(model)])
    assert made.exit_code == 0, made.output
    (tmp_path / "train.csv").write_text("user_id,item_id\n0,7\n0,1\n1,2\n2,4\n")
    (tmp_path / "hold.csv").write_text("user_id,item_id\n0,7\n1,3\n")
    reports = {}
    for route, extra in (("recorded", []), ("file", ["--interactions", str(tmp_path / "train.csv"),
                                                      "--holdout", str(tmp_path / "hold.csv")])):
        out = tmp_path / f"{route}.json"
        res = CliRunner().invoke(cli, ["check", str(model), *extra, "-k", "2", "--no-probes", "--bootstrap", "0",
                                       "--json", str(out)])
        assert res.exit_code in (0, 3), res.output
        reports[route] = (json.loads(out.read_text())["accuracy"], " ".join(res.output.split()))
    return reports


def test_both_check_routes_name_their_repeat_convention(tmp_path: Path) -> None:
    """QA retrain F8: on the same split, the recorded route drops user 0's held-out item 7 (a
    repeat of a training pair) while a --holdout file keeps it as a miss, so the file route
    evaluates 2 users, user 0 at NDCG 0, and its NDCG is half the recorded route's; each report
    names its convention beside the figures."""
    reports = _both_routes(tmp_path)
    (recorded, said_recorded), (file, said_file) = reports["recorded"], reports["file"]
    assert (recorded["n_users_evaluated"], file["n_users_evaluated"]) == (1, 2)
    for scoring in ("dot", "cosine"):
        assert file["at"]["2"][scoring]["ndcg"] == pytest.approx(recorded["at"]["2"][scoring]["ndcg"] / 2)
    assert recorded["repeats"] == "held-out repeats of a training pair dropped by the recorded split, not evaluated"
    assert file["repeats"] == ("held-out repeats of a training pair kept as misses for every row, as RecBole counts "
                               "them (never hit: a served list that re-serves one is scored as served, that slot a miss)")
    for accuracy, said, dropped in ((recorded, said_recorded, "without a table row"),
                                    (file, said_file, "held-out interactions dropped")):
        assert accuracy["protocol"].endswith("; " + accuracy["repeats"])
        assert f"{dropped}; {accuracy['repeats']})" in said  # the section's title line


def test_both_check_routes_count_the_same_held_out_interactions(tmp_path: Path) -> None:
    """QA retrain N4 and N1: the split took 2 interactions out of training (one per user of
    users 0 and 1), one of them (0, 7) a repeat of a training pair. Both routes read 2
    held-out interactions; the recorded route dropped the repeat (1 distinct pair evaluated),
    the file route keeps it as a miss (2 pairs); the recorded route's title counts the
    repeat it dropped, as the split's own sentence does, never "0 dropped" beside it."""
    reports = _both_routes(tmp_path)
    (recorded, said_recorded), (file, said_file) = reports["recorded"], reports["file"]
    counts = ("n_holdout_interactions", "n_dropped", "n_repeats_dropped", "n_pairs_evaluated")
    assert [recorded[key] for key in counts] == [2, 0, 1, 1]
    assert [file[key] for key in counts] == [2, 0, 0, 2]
    assert ("1 held-out users (1 of 2 held-out interactions dropped: 1 repeating a training pair, 0 without a "
            "table row; held-out repeats") in said_recorded
    assert "the split took 2 interactions out of training (fraction 0.5), but 1 of them repeats" in said_recorded
    assert "0 held-out interactions dropped" not in said_recorded
    assert "2 held-out users (0 held-out interactions dropped; held-out repeats of a training pair kept" in said_file
    # Equal counts do not make the figures comparable: diff still flags the conventions.
    compared = CliRunner().invoke(cli, ["diff", str(tmp_path / "recorded.json"), str(tmp_path / "file.json")])
    assert compared.exit_code == 0, compared.output
    assert "accuracy.repeats" in compared.output and "accuracy.n_holdout_interactions" not in compared.output
