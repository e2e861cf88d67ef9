"""Served lists beside a model whose queries are sampled (``--max-queries``, QA "Served F2"):
the lists are a record of what was served, so they are graded over every eligible user's
list, not the sample's (``served.head_share_every_list``, auditor/retrieval/served.py
``graded_shares``, every list of the file as lists alone), with a warning that counts the lists
sampled out of their other figures. Their severity is the same whatever ``--seed`` draws, and the same as alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from auditor.cli import cli
from served_head_lists import K, N_USERS, write_head_lists

SAMPLE = 10


@pytest.fixture()
def files(tmp_path: Path) -> tuple[Path, float, float]:
    """Item 0 trained by 24 of 40 users (6% of 400 interactions, the top 1%); half the users are
    served item 0 first, half no head item: 20 of 200 slots, 10% (1.67x, +4 points: moderate)."""
    return write_head_lists(tmp_path)


def _check(*args: str) -> tuple[int, dict[str, object]]:
    result = CliRunner().invoke(cli, ["check", *args, "--recommendations", "recs.csv", "--interactions", "train.csv",
                                      "-k", str(K), "--no-probes", "--bootstrap", "0", "-q", "--max-queries",
                                      str(SAMPLE), "--fail-on", "severity_level>=2", "--json", "r.json"],
                                catch_exceptions=False)
    return result.exit_code, json.loads(Path("r.json").read_text())


@pytest.mark.parametrize("seed", [str(seed) for seed in range(8)])
def test_the_served_lists_grade_over_every_list_whatever_the_sample(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch, seed: str,
) -> None:
    folder, served, log = files
    monkeypatch.chdir(folder)
    assert (served, log) == (pytest.approx(0.10), pytest.approx(0.06))  # 1.67x and +4 points: moderate
    code, alone = _check()
    assert code == 3 and alone["verdict"]["severity"] == "moderate"  # type: ignore[index]
    code, report = _check("model.pt", "--seed", seed)
    verdict, section = report["verdict"], report["served"]
    assert section["head_share_every_list"] == {str(K): pytest.approx(served)}  # type: ignore[index]
    # the model's own serving grades none, so the lists' grade is the verdict: old code read the sample's share
    # (8% to 16% by seed: moderate or high)
    assert (verdict["severity"], verdict["graded_by"], code) == ("moderate", "served", 3)  # type: ignore[index]
    assert f"top-1% most popular items {100 * served:.1f}% of their top-{K} slots" in verdict["summary"]  # type: ignore[index]
    warned = [w for w in report["warnings"] if "sampled" in w]  # type: ignore[attr-defined]
    assert warned == [f"the severity grades the served lists of recs.csv by the lists-only rule over all {N_USERS} "
                      "lists, as lists alone do (served.head_share_every_list); the lists of "
                      f"{N_USERS - SAMPLE} users sampled out (the model's queries were sampled: {SAMPLE} of {N_USERS} "
                      "users) are in none of the served scoring's per-K figures (its list measures, overlaps and "
                      f"accuracy beside the model's), which are over the {SAMPLE} queried users' lists: adding the "
                      "model never drops a list from the grade"]


def test_without_sampling_the_grade_is_the_served_scorings_figure(files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(files[0])
    result = CliRunner().invoke(cli, ["check", "model.pt", "--recommendations", "recs.csv", "--interactions",
                                      "train.csv", "-k", str(K), "--no-probes", "-q", "--json", "r.json"])
    report = json.loads(Path("r.json").read_text())
    assert result.exit_code == 0 and report["served"]["head_share_every_list"] == {str(K): pytest.approx(files[1])}
    assert report["served"]["n_graded_apart"] == 0 and not [w for w in report["warnings"] if "grades the" in w]
    assert report["retrieval"]["at"][str(K)]["served"]["head_share_1pct"] == pytest.approx(files[1])


def test_the_warning_counts_sampled_users_with_a_zero_vector(
    files: tuple[Path, float, float], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Users whose vector is zero are sampled all the same and their lists lined up as rows (QA "Served N2"):
    the warning counts all SAMPLE sampled users' lists, not only the queried ones (old: '7 of 40 users')."""
    folder = files[0]
    monkeypatch.chdir(folder)
    weights = torch.load("model.pt")
    weights["user_embedding.weight"][:10] = 0  # 10 of the 40 users are served nothing by the model
    torch.save(weights, "model.pt")
    drawn_zero = 0
    for seed in ("0", "1", "2"):
        _, report = _check("model.pt", "--seed", seed)
        zero = [w for w in report["warnings"] if "query vectors are zero" in w]  # type: ignore[attr-defined]
        drawn_zero += len(zero)
        sampled = [w for w in report["warnings"] if "sampled:" in w]  # type: ignore[attr-defined]
        assert len(sampled) == 1 and f"sampled: {SAMPLE} of {N_USERS} users)" in sampled[0], sampled
        assert sampled[0].endswith(f"over the {SAMPLE} queried users' lists: adding the model never drops a list "
                                   "from the grade"), sampled[0]
        share = report["retrieval"]["at"][str(K)]["served"]["head_share_1pct"]  # type: ignore[index]
        assert share * SAMPLE * K == pytest.approx(round(share * SAMPLE * K))  # whole slots of all SAMPLE lists
    assert drawn_zero  # some sample held zero-vector users
