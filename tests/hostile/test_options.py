"""Hostile option values and output paths: out-of-range numbers, gates, and outputs that
would overwrite an input, write to special files, or land where nothing can be written."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from .corpus import (
    EXIT_ERROR,
    EXIT_GATE,
    EXIT_OK,
    EXIT_USAGE,
    N_ITEMS,
    Built,
    Case,
    Outcome,
    check_args,
    no_dev_full,
    params,
    run_case,
    standard,
    strict_json,
    symlink,
    table,
    unwritable_folder,
    write,
)

NEVER_OVERWRITES = r"is the input file given as {given}; popaudit never overwrites an input"


def _uneven_log(d: Path) -> None:
    """The standard log's items, each user trained on a share of popular items of their own."""
    top = N_ITEMS - 1  # trained 4 times by every user: the most popular item
    pairs = [(u, i) for u in range(5) for i in [top] * 4 + list(range(u + 1))]
    pq.write_table(pa.table({"user_id": [u for u, _ in pairs], "item_id": [i for _, i in pairs]}), d / "log.parquet")


def _earlier_report(d: Path) -> None:
    """The report an earlier run wrote, which a run ending in an error must leave as it is."""
    (d / "report.json").write_text('{"previous_run": true}\n')


def _check(*extra: str, outputs: tuple[str, ...] = (), must_exist: tuple[str, ...] = (), check: Any = None,
           make: Any = None, outside: tuple[Path, ...] = ()) -> Any:
    """The valid table and log, ``make(d)`` for more files, then ``check`` with ``extra``."""

    def build(d: Path) -> Built:
        standard(d)
        if make is not None:
            make(d)
        return Built(check_args("items.npy", *extra), outputs=outputs, must_exist=must_exist, check=check,
                     outside=outside)

    return build


def _mitigate(*extra: str, out: str = "o.npy", make: Any = None, outputs: tuple[str, ...] = (), check: Any = None) -> Any:
    """The valid table and log, ``make(d)``, then ``mitigate items.npy -o OUT`` with ``extra``."""

    def build(d: Path) -> Built:
        standard(d)
        if make is not None:
            make(d)
        return Built(["mitigate", "items.npy", "-o", out, *extra], outputs=outputs, must_exist=outputs, check=check)

    return build


def _float16_items(d: Path) -> None:
    """The standard table stored in float16."""
    np.save(d / "items.npy", np.load(d / "items.npy").astype(np.float16))


def _rounding_said(d: Path, outcome: Outcome) -> None:
    """The sidecar says the float16 rounding may move the ranking, and how to measure it."""
    warnings = strict_json(d / "o.npy.popaudit.json")["warnings"]
    assert any(w.startswith("stored as float16, the output's table rounds the rescaled rows, so dot serving of it may "
                            "not rank as check's alpha_0.5 of the input does (the rounding moves the rows' norms from "
                            "||k||^0.5 by up to ") and "popaudit check o.npy" in w for w in warnings), warnings


def _retrain(*extra: str) -> Any:
    def build(d: Path) -> Built:
        return Built(["retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "100", "--epochs", "1",
                      *extra, "-o", "model.pt"])

    return build


def _ids(d: Path) -> None:
    write(d, "ids.txt", "".join(f"{i}\n" for i in range(10)))


def _cancelling_history(d: Path) -> None:
    """Items 0 (1, 0) and 1 (-2, 0) of user 0: their mean is (-0.5, 0), but rescaled to
    unit rows (alpha 0) they cancel, so the cosine output's audit would not query user 0."""
    _five_items(d)
    # Ten untrained items after them, so the default K=10 is below every user's candidates
    # (a K that holds every candidate judges no trade-off: mitigate-auto-every-k-saturated).
    filler = np.array([[0.1, -0.1]], dtype=np.float32) * np.arange(1, 11, dtype=np.float32)[:, None]
    np.save(d / "items.npy", np.vstack([np.load(d / "items.npy"), filler]))


def _five_items(d: Path) -> None:
    np.save(d / "items.npy", np.array([[1, 0], [-2, 0], [0, 1], [0, 3], [1, 1]], dtype=np.float32))
    pq.write_table(pa.table({"user_id": [0, 0, 1, 1, 2, 2], "item_id": [0, 1, 2, 3, 0, 2]}), d / "log.parquet")
    pq.write_table(pa.table({"user_id": [0, 1, 2], "item_id": [2, 0, 1]}), d / "held.parquet")


def _links(d: Path) -> None:
    _ids(d)
    symlink(d, "report.json", "items.npy")
    symlink(d, "report.html", "log.parquet")
    symlink(d, "ids-link.txt", "ids.txt")
    os.link(d / "ids.txt", d / "hard.md")


def _same_via_link(d: Path) -> None:
    symlink(d, "alias.json", "r.json")


def _one_norm(d: Path) -> None:
    """The standard table rescaled to one norm (what mitigate --alpha 0 writes): ρ undefined."""
    table = np.load(d / "items.npy").astype(np.float64)
    np.save(d / "items.npy", (table / np.linalg.norm(table, axis=1, keepdims=True)).astype(np.float32))


def _norms_rise(d: Path) -> None:
    """The standard table with row i's norm i + 1: norms follow the log's frequencies (ρ = 1)."""
    rows = np.load(d / "items.npy").astype(np.float64)
    rows *= (np.arange(1, N_ITEMS + 1) / np.linalg.norm(rows, axis=1))[:, None]
    np.save(d / "items.npy", rows.astype(np.float32))


def _partly_unit(d: Path) -> None:
    """The standard table with its 8 least frequent rows at unit norm (float32 noise apart) and
    the 2 most frequent at 1.5: a plateau of one norm beside rescaled rows (QA report F4)."""
    rows = np.load(d / "items.npy").astype(np.float64)
    rows /= np.linalg.norm(rows, axis=1, keepdims=True)
    rows[-2:] *= 1.5
    np.save(d / "items.npy", rows.astype(np.float32))


def _class_plateaus_f16(d: Path) -> None:
    """QA measures F1's model stored in float16: 30 items whose norm is 0.5 + 0.4·log1p(frequency),
    classes of 9, 5, 5 and 3 items sharing one norm, which f16 rounding spreads by 3.5e-4."""
    rng = np.random.default_rng(7)
    p = 1 / np.arange(1, 31) ** 0.9
    lists = [rng.choice(30, size=rng.integers(2, 7), replace=False, p=p / p.sum()) for _ in range(25)]
    for seen in lists:  # the QA's holdout draw, which the rows' random state follows
        rng.choice(np.setdiff1d(np.arange(30), seen))
    items = np.concatenate(lists)
    rows = rng.normal(size=(30, 6))
    rows *= ((0.5 + 0.4 * np.log1p(np.bincount(items, minlength=30))) / np.linalg.norm(rows, axis=1))[:, None]
    np.save(d / "items.npy", rows.astype(np.float16))
    users = np.repeat(np.arange(25), [len(seen) for seen in lists])
    pq.write_table(pa.table({"user_id": users, "item_id": items}), d / "log.parquet")


def _one_norm_subnormal(d: Path) -> None:
    """The one-norm table times 2^-130, float32 subnormals (an exact power-of-two scaling)."""
    _one_norm(d)
    np.save(d / "items.npy", np.load(d / "items.npy") * np.float32(2.0**-130))


def _bias_model_rowless_users(d: Path) -> Built:
    """An item-bias model whose user table has rows for 3 of the log's 5 users (QA measures F3)."""
    import torch

    standard(d)
    items = np.load(d / "items.npy")
    users = np.random.default_rng(1).normal(size=(3, items.shape[1])).astype(np.float32)
    bias = np.log1p(np.arange(1.0, N_ITEMS + 1)).astype(np.float32)
    torch.save({"user_embedding.weight": torch.tensor(users), "item_embedding.weight": torch.tensor(items),
                "item_bias.weight": torch.tensor(bias)}, d / "model.pt")
    write(d, "uids.txt", "0\n1\n2\n")
    return Built(check_args("model.pt", "--user-ids", "uids.txt", "-k", "3", "--json", "r.json"), outputs=("r.json",),
                 must_exist=("r.json",), check=_rowless_served_by_bias)


def _rowless_sample(bias: bool) -> Any:
    """The item-bias model (or the same without its bias) and a sample of one query that draws
    a rowless user (seed 0: the 5th of the 5 eligible users, after the 3 with a row)."""

    def build(d: Path) -> Built:
        built = _bias_model_rowless_users(d)
        if not bias:
            import torch

            state = torch.load(d / "model.pt")
            del state["item_bias.weight"]
            torch.save(state, d / "model.pt")
        return Built([*built.args, "--max-queries", "1", "--seed", "0"], outputs=("r.json",),
                     check=_one_query_by_bias if bias else None)

    return build


def _one_query_by_bias(d: Path, outcome: Outcome) -> None:
    retrieval = strict_json(d / "r.json")["retrieval"]
    assert retrieval["n_queries"] == 1 and retrieval["n_zero_queries"] == 0, retrieval


def _rowless_served_by_bias(d: Path, outcome: Outcome) -> None:
    """The 2 rowless users are zero queries, served [0, 1] by the bias as zero rows are: queried."""
    retrieval = strict_json(d / "r.json")["retrieval"]
    assert retrieval["n_queries"] == 5 and retrieval["n_zero_queries"] == 0, retrieval  # was 3: served nothing
    assert retrieval["population"]["n_unmatched_log_users"] == 2, retrieval["population"]
    said = [w for w in strict_json(d / "r.json")["warnings"] if "no row in the user table" in w]
    assert len(said) == 1 and "a model with an item bias ranks the items for them by the bias alone" in said[0], said


def _f32s_rho(d: Path, outcome: Outcome) -> None:
    """scipy's ρ and τ with each class of 3 or more items at one norm, the float32 figures."""
    figures = strict_json(d / "r.json")["frequency_norm"]
    assert abs(figures["spearman"] - 0.99976908) < 1e-8 and abs(figures["kendall"] - 0.99733688) < 1e-8, figures


def _all_seen_users(d: Path) -> None:
    """The standard log (each user has 2 candidates) plus 5 users trained on every item (none)."""
    users = np.r_[np.arange(55) % 5, np.repeat(np.arange(5, 10), N_ITEMS)]
    items = np.r_[np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1)), np.tile(np.arange(N_ITEMS), 5)]
    pq.write_table(pa.table({"user_id": users, "item_id": items}), d / "log.parquet")


def _all_seen_not_saturated(d: Path, outcome: Outcome) -> None:
    """Users without a candidate saturate no K and count in no share (QA measures F1)."""
    retrieval = strict_json(d / "r.json")["retrieval"]
    assert retrieval["n_no_candidates"] == 5 and retrieval["n_queries"] == 10, retrieval
    assert retrieval["saturated"] == {"1": False} and retrieval["n_saturated"] == {"1": 0}, retrieval  # was True, 5


def _no_candidate_left(d: Path) -> None:
    """10 users, each trained on every item (items ever more often): no query has a candidate."""
    users = np.repeat(np.arange(10), N_ITEMS * (N_ITEMS + 1) // 2)
    items = np.tile(np.repeat(np.arange(N_ITEMS), np.arange(1, N_ITEMS + 1)), 10)
    pq.write_table(pa.table({"user_id": users, "item_id": items}), d / "log.parquet")


def _no_list_said(d: Path, outcome: Outcome) -> None:
    """Every list is empty: the summary says why, not 'n/a vs n/a' (QA measures N1)."""
    report = strict_json(d / "r.json")
    assert report["retrieval"]["n_no_candidates"] == report["retrieval"]["n_queries"] == 10, report["retrieval"]
    assert ("no queried user has an unseen item left (all 10 queried users trained on every item, and training items "
            "are not served; --keep-seen measures it): no list is served") in report["verdict"]["summary"]
    assert "n/a" not in report["verdict"]["summary"], report["verdict"]["summary"]


def _one_candidate_left(d: Path) -> None:
    """5 users each trained on every item but item u (one candidate: every K holds it), and 5
    trained on item 0 alone, which makes it the top-10% item: half the queries saturate at K=1."""
    users = np.r_[np.repeat(np.arange(5), N_ITEMS - 1), np.arange(5, 10)]
    items = np.concatenate([*(np.delete(np.arange(N_ITEMS), u) for u in range(5)), np.zeros(5, dtype=np.int64)])
    pq.write_table(pa.table({"user_id": users, "item_id": items}), d / "log.parquet")


def _saturated_report(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["retrieval"]["saturated"] == {str(N_ITEMS): True}, report["retrieval"]["saturated"]
    assert report["retrieval"]["n_saturated"] == {str(N_ITEMS): report["retrieval"]["n_queries"]}
    assert report["verdict"]["severity"] == "moderate" and report["verdict"]["quoted_k"] is None
    assert "the harm is not measured at K=10" in report["verdict"]["summary"]


def _one_norm_bf16(d: Path) -> Built:
    """The standard table rescaled to one norm and stored in bfloat16 (read as float32):
    its norms differ by bf16 rounding alone, so ρ is undefined, not a ρ of the noise."""
    import torch

    standard(d)
    rows = np.load(d / "items.npy").astype(np.float64)
    torch.save({"item_embedding.weight": torch.tensor(rows / np.linalg.norm(rows, axis=1, keepdims=True)).bfloat16()},
               d / "model.pt")
    return Built(check_args("model.pt", "--no-retrieval", "--fail-on", "spearman>0.5"))


def _readonly(d: Path) -> Built:
    standard(d)
    folder = unwritable_folder(d)
    if folder is None:
        pytest.skip("no folder this process cannot write to (root without a read-only file system)")
    target = folder / "popaudit-hostile-report.json"
    return Built(check_args("items.npy", "--json", str(target)), outside=() if folder.is_relative_to(d) else (target,))


def _cuda_present() -> str | None:
    """Why a case about a missing CUDA device cannot run here (None: it can)."""
    import torch

    return "a CUDA device is present" if torch.cuda.is_available() else None


def _stdout_has_report(d: Path, outcome: Outcome) -> None:
    assert "Spearman" in outcome.stdout, outcome.stdout[-2000:]


def _json_report(d: Path, outcome: Outcome) -> None:
    assert strict_json(d / "new" / "deeper" / "r.json")["schema_version"] == 1


def _old_report_kept(d: Path) -> None:
    write(d, "r.json", '{"old": "report of yesterday"}\n')


def _index_case(*extra: str) -> Any:
    """A 2,048 x 4 table and a log that names item 5,000 (past the table), then ``extra``."""

    def build(d: Path) -> Built:
        table(d, rows=2048)
        pq.write_table(pa.table({"user_id": [0, 1, 2], "item_id": [1, 2, 5000]}), d / "log.parquet")
        return Built(check_args("items.npy", *extra))

    return build


def _broken_model(d: Path) -> Built:
    standard(d)
    write(d, "broken.npy", b"\x93NUMPY garbage")
    _old_report_kept(d)
    return Built(check_args("broken.npy", "--json", "r.json", "--html", "r.html"))


CASES = [
    Case("seed-negative", _check("--seed", "-1"), EXIT_USAGE, r"'--seed': -1 is not in the range 0<=x<=18446744073709551615"),
    Case("lr-nan", _check("--lr", "nan"), EXIT_USAGE, r"'--lr': 'nan' is not a finite number"),
    Case("lr-inf", _check("--lr", "inf"), EXIT_USAGE, r"'--lr': 'inf' is not a finite number"),
    Case("lr-zero", _check("--lr", "0"), EXIT_USAGE, r"'--lr': '0' must be > 0"),
    Case("momentum-negative", _check("--momentum", "-1"), EXIT_USAGE, r"'--momentum': '-1' must be >= 0"),
    Case("weight-decay-nan", _check("--weight-decay", "nan"), EXIT_USAGE, r"'--weight-decay': 'nan' is not a finite"),
    Case("retrain-temperature-zero", _retrain("--temperature", "0"), EXIT_USAGE, r"'--temperature': '0' must be > 0"),
    Case("retrain-lr-nan", _retrain("--lr", "nan"), EXIT_USAGE, r"'--lr': 'nan' is not a finite number"),
    Case("retrain-seed-negative", _retrain("--seed", "-1"), EXIT_USAGE, r"'--seed': -1 is not in the range"),
    Case("k-zero", _check("-k", "0"), EXIT_USAGE, r"'-k' / '--k': 0 is not in the range 1<=x<=10000"),
    # A K past the catalogue (clamped to it) holds every candidate: it measures no harm, so the
    # correlation (ρ = 1) grades and the gate trips; it graded "none" and passed the gate.
    Case("k-past-catalogue-not-graded", _check("-k", "50", "--json", "r.json", "--fail-on", "severity_level>=1",
                                               make=_norms_rise, outputs=("r.json",), check=_saturated_report),
         EXIT_GATE, None, absent=r"not skewed"),
    # A dot/cosine comparison at a K holding every candidate is 1 by construction: exit 1, not a pass (QA report F1).
    Case("fail-on-ratio-at-saturated-k", _check("-k", "10", "--keep-seen", "--fail-on", "head_share_10pct_ratio@10>1.5"),
         EXIT_ERROR,
         r"head_share_10pct_ratio@10>1\.5: K=10 holds every candidate for \d+ of \d+ queries: dot and cosine serve "
         r"the same items, the ratio measures nothing; gate it at K=9, the largest K that holds fewer than every "
         r"candidate for most queries with a candidate: head_share_10pct_ratio@9 \(add -k 9\)"),
    # Users trained on every item have empty lists under every scoring: no K saturates them (QA measures F1).
    Case("users-trained-on-every-item-saturate-no-k", _check("-k", "1", "--json", "r.json", make=_all_seen_users,
                                                              outputs=("r.json",), check=_all_seen_not_saturated),
         EXIT_OK, None, absent=r"holds every candidate"),
    # No queried user has a candidate left: the summary says so and why (QA measures N1).
    Case("no-user-has-a-candidate-left", _check("-k", "1", "--json", "r.json", make=_no_candidate_left,
                                                outputs=("r.json",), check=_no_list_said),
         EXIT_OK, None, absent=r"n/a vs n/a"),
    # Where K=1 already holds every candidate for most queries, no K can be gated: never "a K below 1".
    Case("fail-on-ratio-where-no-k-grades", _check("-k", "1", "--fail-on", "head_share_10pct_ratio@1>1.5",
                                                   make=_one_candidate_left),
         EXIT_ERROR, r"K=1 holds every candidate for 5 of 10 queries: dot and cosine serve the same items, the ratio "
         r"measures nothing; no K can tell the scorings apart", absent=r"K below"),
    Case("fail-on-overlap-clamped-to-saturated-k", _check("-k", "50", "--fail-on", "overlap_dot_cosine@50<0.5"),
         EXIT_ERROR, r"clamped to 10.*K=10 holds every candidate: overlap_dot_cosine measures nothing there",
         absent=r"gate overlap_dot_cosine@10"),
    # Shares gate as fractions: a threshold in percent could never trip (QA report F2).
    Case("fail-on-share-threshold-in-percent", _check("--fail-on", "head_share_1pct_dot@10>3"), EXIT_USAGE,
         r"invalid --fail-on: 'head_share_1pct_dot@10>3': head_share_1pct_dot@10 is a fraction 0–1: 3% is 0\.03; the "
         r"threshold 3 is outside that range", absent=r"Valid metrics"),
    Case("fail-on-correlation-threshold-out-of-range", _check("--fail-on", "spearman<-1.5"), EXIT_USAGE,
         r"'spearman<-1\.5': spearman is a correlation from -1 to 1; the threshold -1\.5 is outside that range"),
    # A threshold on its range's edge where the gate could never trip, or always would (QA report N2).
    Case("fail-on-share-threshold-one-percent-on-the-edge", _check("--fail-on", "head_share_1pct_dot@10>1"), EXIT_USAGE,
         r"'head_share_1pct_dot@10>1': head_share_1pct_dot@10 is a fraction 0–1: 1% is 0\.01; it is never > 1, so the "
         r"gate could never trip", absent=r"Valid metrics"),
    Case("fail-on-fraction-below-zero-on-the-edge", _check("--fail-on", "aplt_dot@10<0"), EXIT_USAGE,
         r"'aplt_dot@10<0': aplt_dot@10 is a fraction 0–1; it is never < 0, so the gate could never trip"),
    Case("fail-on-severity-level-above-high", _check("--fail-on", "severity_level>=4"), EXIT_USAGE,
         r"'severity_level>=4': severity_level is a level 0–3 \(0 none, 1 low, 2 moderate, 3 high\); the threshold 4 "
         r"is outside that range", absent=r"gate as fractions"),
    Case("fail-on-negative-ratio", _check("--fail-on", "head_share_1pct_ratio@10<-1"), EXIT_USAGE,
         r"'head_share_1pct_ratio@10<-1': head_share_1pct_ratio@10 is a dot / cosine ratio, never below 0; the "
         r"threshold -1 is outside that range"),
    # The user groups' figures and a whole-number level are checked too (left from QA report N2).
    Case("fail-on-gap-delta-in-percent", _check("--fail-on", "gap_delta_niche_dot@10<-50"), EXIT_USAGE,
         r"'gap_delta_niche_dot@10<-50': gap_delta_niche_dot@10 is a relative change, never below -1 \(-100%\): -50% is "
         r"-0\.5; the threshold -50 is outside that range"),
    Case("fail-on-miscalibration-above-one-bit", _check("--fail-on", "miscalibration_dot@10>1"), EXIT_USAGE,
         r"miscalibration_dot@10 is a Jensen–Shannon divergence in bits, 0–1; it is never > 1"),
    Case("fail-on-severity-level-between-levels", _check("--fail-on", "severity_level==1.5"), EXIT_USAGE,
         r"'severity_level==1\.5': severity_level is a level 0–3 .*; it is never == 1\.5, so the gate could never trip"),
    # A model with no item bias is said so, not as a NaN (QA11 report F4).
    Case("fail-on-item-bias-without-a-bias", _check("--fail-on", "item_bias_spearman>0.5"), EXIT_ERROR,
         r"cannot evaluate --fail-on item_bias_spearman>0\.5: the model has no item bias \(no per-item b_i added to "
         r"its scores.*gate spearman \(the item norms\) instead", absent=r"no finite number"),
    # ARP, novelty, ACLT and counts are never below 0, PopRSP/PopREO lie in [0, 1] (QA11 report F3).
    Case("fail-on-arp-below-zero", _check("--fail-on", "arp_dot@10<0"), EXIT_USAGE,
         r"'arp_dot@10<0': arp_dot@10 is a mean training popularity .*never below 0; it is never < 0, so the gate "
         r"could never trip"),
    Case("fail-on-novelty-below-zero", _check("--fail-on", "novelty_dot@10<0"), EXIT_USAGE,
         r"'novelty_dot@10<0': novelty_dot@10 is a mean self-information .* in bits, never below 0; it is never < 0"),
    Case("fail-on-aclt-negative-threshold", _check("--fail-on", "aclt_dot@10<-1"), EXIT_USAGE,
         r"'aclt_dot@10<-1': aclt_dot@10 is a mean number of long-tail items per 10-item list, 0–10; the threshold -1 "
         r"is outside that range"),
    Case("fail-on-aclt-above-k", _check("--fail-on", "aclt_dot@10>10"), EXIT_USAGE,
         r"'aclt_dot@10>10': aclt_dot@10 is a mean number of long-tail items per 10-item list, 0–10; it is never > 10, "
         r"so the gate could never trip"),
    Case("fail-on-pop-rsp-above-one", _check("--fail-on", "pop_rsp_dot@10>1"), EXIT_USAGE,
         r"'pop_rsp_dot@10>1': pop_rsp_dot@10 is a relative standard deviation of two rates, \|a − b\| / \(a \+ b\), "
         r"0–1; it is never > 1, so the gate could never trip"),
    Case("fail-on-unsafe-globals-below-zero", _check("--fail-on", "unsafe_globals<0"), EXIT_USAGE,
         r"'unsafe_globals<0': unsafe_globals is a count, never below 0; it is never < 0, so the gate could never "
         r"trip"),
    # Unit rows tie as a plateau: their float32 noise no longer decides ρ (QA report F4).
    Case("fail-on-spearman-plateau-of-unit-rows", _check("--no-retrieval", "--fail-on", "spearman>0.5",
                                                          make=_partly_unit), EXIT_GATE, None,
         stderr=r"gate spearman>0\.5: 0\.6833 \(TRIPPED\)"),  # scipy with the 8 unit rows tied; their noise gave 0.6485
    # Measures F1: small classes of one norm in f16 tie whole, as in f32 (was 0.9849: cut at rounding gaps).
    Case("fail-on-spearman-f16-small-plateaus", _check("--no-retrieval", "--json", "r.json", "--fail-on", "spearman<0.999",
                                                        make=_class_plateaus_f16, outputs=("r.json",),
                                                        must_exist=("r.json",), check=_f32s_rho), EXIT_OK, None),
    Case("bias-model-rowless-log-users", _bias_model_rowless_users, EXIT_OK, None),
    # A sample that draws only rowless users: a bias model serves them as zero rows; any other is refused.
    Case("bias-model-sample-of-rowless-users", _rowless_sample(True), EXIT_OK, None),
    Case("sample-of-rowless-users-without-bias", _rowless_sample(False), EXIT_ERROR,
         r"none of the 1 users sampled from log\.parquet with seed 0 has a row in the user table, so none can be "
         r"queried \(a model "
         r"without an item bias serves them nothing\); raise --max-queries or pass another --seed$"),
    Case("k-negative", _check("-k", "-5"), EXIT_USAGE, r"'-k' / '--k': -5 is not in the range 1<=x<=10000"),
    Case("max-queries-zero", _check("--max-queries", "0"), EXIT_USAGE, r"'--max-queries': 0 is not in the range"),
    Case("max-memory-garbage", _check("--max-memory", "lots"), EXIT_USAGE, r"'--max-memory': 'lots' is not a memory size"),
    Case("max-memory-zero", _check("--max-memory", "0"), EXIT_USAGE, r"'--max-memory': memory size must be positive"),
    Case("format-unknown", _check("--format", "pdf"), EXIT_USAGE, r"--format: 'pdf' is not a report format"),
    Case("device-unknown", _check("--device", "tpu"), EXIT_USAGE, r"'--device': 'tpu' is not one of 'cpu', 'auto', 'cuda'"),
    Case("device-cuda-without-gpu", _check("--device", "cuda"), EXIT_ERROR,
         r"--device cuda: torch .* sees no CUDA device; use --device cpu or auto", skip=_cuda_present),
    Case("fail-on-garbage", _check("--fail-on", "garbage"), EXIT_USAGE,
         r"invalid --fail-on: 'garbage' is not 'METRIC OP NUMBER'.*Valid metrics: spearman"),
    Case("fail-on-nan-threshold", _check("--fail-on", "spearman>nan"), EXIT_USAGE, r"invalid --fail-on: 'spearman>nan'"),
    Case("fail-on-overflowing-threshold", _check("--fail-on", "spearman>1e400"), EXIT_USAGE,
         r"invalid --fail-on: 'spearman>1e400': the threshold 1e400 is not a finite number \(it overflows to inf\)"),
    Case("fail-on-inf-threshold", _check("--fail-on", "spearman<-inf"), EXIT_USAGE,
         r"invalid --fail-on: 'spearman<-inf': the threshold -inf is not a finite number; give a finite NUMBER"),
    Case("fail-on-misspelled", _check("--fail-on", "spearmn>0.5"), EXIT_USAGE, r"unknown metric 'spearmn'"),
    Case("fail-on-trips-exit-3", _check("--no-retrieval", "--fail-on", "spearman>=-1"), EXIT_GATE, None,
         stderr=r"gate spearman>=-1: .*TRIPPED"),
    Case("fail-on-unmeasured", _check("--no-retrieval", "--fail-on", "head_share_1pct_ratio@100>1.5"), EXIT_ERROR,
         r"cannot evaluate --fail-on head_share_1pct_ratio@100>1\.5: retrieval not measured: skipped with --no-retrieval$"),
    # QA accuracy F2: -k/--alpha replace their defaults; the advice names every value to pass (those measured now,
    # then each the gates name), so following it drops no gate's figure
    Case("fail-on-alpha-not-asked-names-the-whole-grid",
         _check("--fail-on", "gini_alpha_0.3@10>0.95", "--fail-on", "gini_alpha_0.4@10>0.95"), EXIT_ERROR,
         r"gini_alpha_0\.3@10>0\.95: α=0\.3 was not asked for \(add --alpha 0\.3; --alpha replaces the α measured now "
         r"\(0\.25, 0\.5, 0\.75\), so pass them all: --alpha 0\.25 --alpha 0\.5 --alpha 0\.75 --alpha 0\.3 --alpha 0\.4\)"),
    Case("fail-on-k-not-asked-names-every-k", _check("-k", "5", "--fail-on", "gini_dot@8>0.95"), EXIT_ERROR,
         r"K=8 was not asked for \(add -k 8; -k replaces the cut-offs measured now \(5\), so pass them all: "
         r"-k 5 -k 8\)$"),
    # QA13 report F3: a K past the catalogue (10 items) was advised "add -k 20", which then failed as clamped to 10;
    # the advice, said once the model is read, names the K that measures it.
    Case("fail-on-k-past-the-catalogue", _check("-k", "5", "--fail-on", "gini_dot@20>0.95"), EXIT_ERROR,
         r"gini_dot@20>0\.95: K=20 exceeds the catalogue \(10 items\), which clamps it to 10: gate gini_dot@10 \(add "
         r"-k 10; -k replaces the cut-offs measured now \(5\), so pass them all: -k 5 -k 10\)$"),
    Case("fail-on-k-past-the-catalogue-asked", _check("-k", "10", "--fail-on", "gini_dot@20>0.95"), EXIT_ERROR,
         r"K=20 exceeds the catalogue \(10 items\), which clamps it to 10: gate gini_dot@10$"),
    Case("fail-on-ratio-past-the-catalogue", _check("-k", "5", "--fail-on", "head_share_1pct_ratio@20>1"), EXIT_ERROR,
         r"K=20 exceeds the catalogue \(10 items\), which clamps it to 10, where every list holds every candidate: "
         r"head_share_1pct_ratio measures nothing there; gate "),
    Case("fail-on-undefined", _check("--no-retrieval", "--bootstrap", "0", "--fail-on", "spearman_ci_lo>0"), EXIT_ERROR,
         r"cannot evaluate --fail-on spearman_ci_lo>0: no CI without a bootstrap \(--bootstrap 0\)$"),
    # Measures F4: a correlation gate on a table of one norm (a cured model) says which gate still judges it.
    Case("fail-on-spearman-one-norm-table", _check("-k", "1", "--keep-seen", "--fail-on", "spearman>0.5", make=_one_norm), EXIT_ERROR,
         r"cannot evaluate --fail-on spearman>0\.5: every item has the same norm.*: the correlation is undefined\. "
         r"The norms carry no popularity here .*gate the verdict's grade with --fail-on 'severity_level>=1' "
         r"\(graded none on this run\) instead$"),
    Case("fail-on-spearman-bf16-one-norm-table", _one_norm_bf16, EXIT_ERROR,
         r"cannot evaluate --fail-on spearman>0\.5: every item has the same norm to within bfloat16 rounding .*: the "
         r"correlation is undefined"),
    # Measures F2: the same table scaled into subnormals has no ρ either (was its noise's, and the gate judged it).
    Case("fail-on-spearman-subnormal-one-norm-table", _check("--no-retrieval", "--fail-on", "spearman>0.3",
                                                             make=_one_norm_subnormal), EXIT_ERROR,
         r"cannot evaluate --fail-on spearman>0\.3: every item has the same norm to within float32 rounding \(the "
         r"norms span .* of entries held in subnormals \(steps of 1\.4e-45\) at 4 dimensions can make.*: the "
         r"correlation is undefined"),
    Case("fail-on-kendall-one-norm-no-retrieval", _check("--no-retrieval", "--fail-on", "kendall<0", make=_one_norm),
         EXIT_ERROR, r"cannot evaluate --fail-on kendall<0: every item has the same norm.*--fail-on "
         r"'severity_level>=1' on a run that measures retrieval \(this one graded nothing\) instead$"),
    Case("fail-on-k-not-asked", _check("-k", "5", "--fail-on", "head_share_1pct_ratio@8>1.5"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on head_share_1pct_ratio@8>1\.5: K=8 was not asked for \(add -k 8; -k replaces the "
         r"cut-offs measured now \(5\), so pass them all: -k 5 -k 8\)$"),
    Case("fail-on-k-clamped", _check("-k", "50", "--fail-on", "gini_dot@50>0.5"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on gini_dot@50>0\.5: K=50 exceeds the catalogue \(10 items\) and was clamped "
         r"to 10: its figures are filed under K=10 \(gate gini_dot@10 and add -k 10\)$"),
    # QA F8: doing what that message says is accepted (K=10 asked for, K=50 clamped onto it).
    Case("fail-on-k-clamped-as-told", _check("-k", "50", "-k", "10", "--fail-on", "gini_dot@10>0.95"), EXIT_OK, None),
    # QA F9: an α with an exponent is named, reported and gated as a plain decimal; any spelling gates it.
    Case("fail-on-alpha-exponent", _check("-k", "5", "--alpha", "0.00001", "--fail-on", "gini_alpha_1e-05@5>=0"),
         EXIT_GATE, None, stderr=r"gate gini_alpha_0\.00001@5>=0: .*TRIPPED"),
    Case("fail-on-alpha-trailing-zero", _check("-k", "5", "--alpha", "0.3", "--fail-on", "gini_alpha_0.30@5>=0"),
         EXIT_GATE, None, stderr=r"gate gini_alpha_0\.3@5>=0: .*TRIPPED"),
    # Two α that one scoring name would file alike: refused naming both, never merged into one.
    Case("alpha-two-values-one-name", _check("-k", "5", "--alpha", "0.3", "--alpha", "0.3000001"), EXIT_USAGE,
         r"Error: --alpha 0\.3 and 0\.3000001 both name the scoring alpha_0\.3 \(a scoring's α is named to six "
         r"significant digits\): give one of them"),
    Case("fail-on-dash-in-name", _check("--fail-on", "gini-dot@5>0"), EXIT_USAGE,
         r"'gini-dot@5>0' is not 'METRIC OP NUMBER'"),
    # QA F7: the gate line echoes the threshold as written.
    Case("fail-on-threshold-as-given", _check("--no-retrieval", "--fail-on", "spearman>=-1.000"), EXIT_GATE, None,
         stderr=r"gate spearman>=-1\.000: .*TRIPPED"),
    Case("fail-on-alpha-one", _check("-k", "5", "--alpha", "1", "--fail-on", "gini_alpha_1@5>0.5"), EXIT_ERROR,
         r"gini_alpha_1@5>0\.5: α=1 is dot serving, not measured apart: gate gini_dot@5 instead$"),
    Case("fail-on-holdout-not-given", _check("-k", "5", "--fail-on", "ndcg_ratio@5<1"), EXIT_ERROR,
         r"ndcg_ratio@5<1: accuracy not measured: no held-out interactions: pass --holdout PATH"),
    # The log's five users share one popular ratio: all diverse (niche and blockbuster are null).
    Case("fail-on-undefined-ratios", _check("-k", "5", "--fail-on", "gap_delta_diverse_ratio@5>1", "--fail-on",
                                            "head_share_1pct_ratio@5>1"), EXIT_ERROR,
         r"gap_delta_diverse_ratio@5>1: a ratio of two signed figures is undefined \(dot -[\d.]+, cosine -[\d.]+: it "
         r"does not say which is larger\); gate gap_delta_diverse_dot@5 and gap_delta_diverse_cosine@5 instead; "
         r"head_share_1pct_ratio@5>1: a ratio of two zeros is undefined \(dot and cosine are both 0\)"),
    # QA report F2: a gate on a figure of an input the command line does not give (a trace, served lists) is
    # refused before any audit, as a K not asked for; one without a value after the audit (a ratio of two
    # zeros) or once the inputs are read (no holdout) replaces no earlier report and writes none.
    Case("fail-on-trace-not-given", _check("-k", "5", "--json", "report.json", "--fail-on", "training_spearman>0.5",
                                           make=_earlier_report), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on training_spearman>0\.5: no training trace \(pass --trace\)$"),
    Case("fail-on-served-not-given", _check("-k", "5", "--fail-on", "head_share_1pct_served@5>0.1"), EXIT_ERROR,
         r"^Error: cannot evaluate --fail-on head_share_1pct_served@5>0\.1: no served lists were given \(pass "
         r"--recommendations\)$"),
    Case("fail-on-holdout-not-given-keeps-reports", _check(
        "-k", "5", "--json", "report.json", "--markdown", "r.md", "--fail-on", "ndcg_dot@5<1", make=_earlier_report),
        EXIT_ERROR, r"^Error: cannot evaluate --fail-on ndcg_dot@5<1: accuracy not measured: no held-out "
                    r"interactions: pass --holdout PATH .* beside their exposure$"),
    Case("fail-on-unmeasured-after-the-audit-keeps-reports", _check(
        "-k", "5", "--json", "report.json", "--html", "r.html", "--fail-on", "head_share_1pct_ratio@5>1",
        make=_earlier_report), EXIT_ERROR,
        r"^Error: cannot evaluate --fail-on head_share_1pct_ratio@5>1: a ratio of two zeros is undefined \(dot and "
        r"cosine are both 0\); gate head_share_1pct_dot@5 and head_share_1pct_cosine@5 instead\. No report was "
        r"written$"),
    # The same gate with the JSON report on stdout: stdout stays empty and the Error: line says so.
    Case("fail-on-unmeasured-after-the-audit-prints-no-report", _check(
        "-k", "5", "--format", "json", "--fail-on", "head_share_1pct_ratio@5>1"), EXIT_ERROR,
        r"^Error: cannot evaluate --fail-on head_share_1pct_ratio@5>1: a ratio of two zeros is undefined .* "
        r"instead\. No report was printed$", stdout=r"\A\Z"),
    # QA harms F4: a null group figure says why: the report's tie warning, or the group empty under the cut-offs.
    Case("fail-on-group-of-tied-users", _check("-k", "5", "--fail-on", "miscalibration_niche_dot@5>0.2"), EXIT_ERROR,
         r"miscalibration_niche_dot@5>0\.2: miscalibration_niche: all 5 users with training items share one popular "
         r"ratio \(0\.\d\d of their items popular\).*the niche and blockbuster figures are null$"),
    Case("fail-on-empty-group", _check("-k", "5", "--niche-fraction", "0.01", "--fail-on", "gap_delta_niche_dot@5<0",
                                       make=_uneven_log), EXIT_ERROR,
         r"gap_delta_niche_dot@5<0: gap_delta_niche: the niche group is empty under the cut-offs \(user groups drawn: "
         r"0 niche \(0\.0%\), .* of 5 users with training items\): a larger --niche-fraction draws users into it$"),
    # QA harms F6: cut-offs that cannot hold together are a usage error (exit 2) naming both options.
    Case("group-fractions-overlap", _check("--niche-fraction", "0.6", "--blockbuster-fraction", "0.5"), EXIT_USAGE,
         r"Error: --niche-fraction \+ --blockbuster-fraction must be at most 1, got 0\.6 \+ 0\.5$"),
    Case("group-masses-overlap", _check("--head-mass", "0.7", "--tail-mass", "0.4"), EXIT_USAGE,
         r"Error: --head-mass \+ --tail-mass must be at most 1 \(the head and the tail may not overlap\), "
         r"got 0\.7 \+ 0\.4$"),
    Case("group-one-fraction-past-the-default", _check("--blockbuster-fraction", "0.9"), EXIT_USAGE,
         r"Error: --niche-fraction \+ --blockbuster-fraction must be at most 1, got 0\.2 \+ 0\.9$"),
    Case("fail-on-k-typo", _check("-k", "5", "--fail-on", "gini_dot@05>0.5"), EXIT_USAGE, r"unknown metric 'gini_dot@05'"),
    Case("output-is-model", _check("-o", "items.npy"), EXIT_ERROR, r"-o items\.npy " + NEVER_OVERWRITES.format(given="MODEL")),
    Case("output-is-log", _check("--json", "log.parquet"), EXIT_ERROR,
         r"--json log\.parquet " + NEVER_OVERWRITES.format(given="--interactions")),
    Case("output-is-item-ids", _check("--item-ids", "ids.txt", "--html", "ids.txt", make=_ids), EXIT_ERROR,
         r"--html ids\.txt " + NEVER_OVERWRITES.format(given="--item-ids")),
    Case("output-symlink-to-model", _check("--json", "report.json", make=_links), EXIT_ERROR,
         r"--json report\.json " + NEVER_OVERWRITES.format(given="MODEL")),
    Case("output-symlink-to-log", _check("--html", "report.html", make=_links), EXIT_ERROR,
         r"--html report\.html " + NEVER_OVERWRITES.format(given="--interactions")),
    Case("output-symlink-to-item-ids", _check("--item-ids", "ids.txt", "-o", "ids-link.txt", make=_links), EXIT_ERROR,
         r"-o ids-link\.txt " + NEVER_OVERWRITES.format(given="--item-ids")),
    Case("output-hardlink-to-item-ids", _check("--item-ids", "ids.txt", "--markdown", "hard.md", make=_links),
         EXIT_ERROR, r"--markdown hard\.md " + NEVER_OVERWRITES.format(given="--item-ids")),
    Case("output-is-plugin", _check("--plugin", "p.py", "-o", "p.py", make=lambda d: write(d, "p.py", "X = 1\n")),
         EXIT_ERROR, r"-o p\.py " + NEVER_OVERWRITES.format(given="--plugin p.py")),
    Case("output-is-queries", _check("--queries", "q.npy", "--json", "q.npy",
                                     make=lambda d: shutil.copy(d / "items.npy", d / "q.npy")),
         EXIT_ERROR, r"--json q\.npy " + NEVER_OVERWRITES.format(given="--queries")),
    Case("output-dev-null", _check("-o", "/dev/null", "--json", "/dev/null"), EXIT_OK, None),
    Case("output-dev-stdout", _check("-o", "/dev/stdout", check=_stdout_has_report), EXIT_OK, None,
         process=True, timeout=60, slow=True),
    Case("json-and-html-same-path", _check("--json", "r.json", "--html", "r.json"), EXIT_ERROR,
         r"--json and --html both name r\.json; give each output its own file"),
    # Two reports on one descriptor: refused as two on one file (QA F1), whatever the spelling.
    Case("json-and-markdown-same-descriptor", _check("--json", "/dev/stdout", "--markdown", "/dev/stdout"), EXIT_ERROR,
         r"^Error: --json /dev/stdout and --markdown /dev/stdout both name descriptor 1; two reports on one stream"),
    Case("json-and-html-one-descriptor-two-names", _check("--json", "/dev/stdout", "--html", "/dev/fd/1"), EXIT_ERROR,
         r"^Error: --json /dev/stdout and --html /dev/fd/1 both name descriptor 1;.*give each output its own file"),
    Case("json-and-html-same-file-via-link", _check("--json", "r.json", "--html", "alias.json", make=_same_via_link),
         EXIT_ERROR, r"--json and --html both name alias\.json"),
    Case("output-into-missing-folder", _check("--json", "new/deeper/r.json", outputs=("new", "new/deeper", "new/deeper/r.json"),
                                              must_exist=("new/deeper/r.json",), check=_json_report), EXIT_OK, None),
    Case("output-under-a-file", _check("--json", "afile/r.json", make=lambda d: write(d, "afile", "x")), EXIT_ERROR,
         r"cannot create folder afile for afile/r\.json: afile is a file, not a folder"),
    Case("output-is-a-folder", _check("-o", "out", make=lambda d: (d / "out").mkdir()), EXIT_USAGE,
         r"'-o' / '--output': File 'out' is a directory"),
    Case("output-read-only-folder", _readonly, EXIT_ERROR, r"cannot write .*popaudit-hostile-report\.json"),
    Case("failed-run-keeps-old-report", _broken_model, EXIT_ERROR, r"cannot read broken\.npy"),
    Case("output-dev-full", _check("--json", "/dev/full"), EXIT_ERROR, r"cannot write /dev/full: No space left",
         skip=no_dev_full),
    Case("json-collides-with-markdown-figure", _check("--markdown", "r.md", "--json", "r_files/head_share.png"),
         EXIT_ERROR, r"--json and figure head_share\.png of --markdown r\.md both name r_files/head_share\.png; "
                     r"give each output its own file"),
    Case("output-with-trailing-slash", _check("-o", "newdir/"), EXIT_USAGE,
         r"'-o' / '--output': 'newdir/' names a folder, not a file"),
    # '-' is no stream here (QA F2): refused, never a file named '-' in the working folder.
    Case("output-dash", _check("--format", "json", "-o", "-"), EXIT_USAGE,
         r"'-o' / '--output': '-' is not stdin or stdout here; write to stdout with /dev/stdout"),
    Case("markdown-dash", _check("--markdown", "-"), EXIT_USAGE, r"'--markdown': '-' is not stdin or stdout here; "
         r"write to stdout with /dev/stdout, and name a file called - as \./-", absent=r"-o\b"),  # no -o was given
    Case("interactions-dash", _check("--interactions", "-"), EXIT_USAGE, r"'--interactions': '-' is not stdin or stdout"),
    Case("mitigate-output-dash", _mitigate("--alpha", "0.5", out="-"), EXIT_USAGE,
         r"'-o' / '--output': '-' is not stdin or stdout here"),
    Case("json-empty-path", _check("--json", ""), EXIT_USAGE, r"'--json': the path is empty"),
    Case("markdown-to-dev-null", _check("--markdown", "/dev/null", outside=(Path("/dev/null_files"),)), EXIT_OK, None),
    # popaudit mitigate: alpha outside [0, 1], outputs that are inputs or another format
    Case("mitigate-alpha-above-one", _mitigate("--alpha", "1.5"), EXIT_USAGE, r"Invalid value for '--alpha': '1\.5' must be <= 1"),
    Case("mitigate-alpha-nan", _mitigate("--alpha", "nan"), EXIT_USAGE, r"Invalid value for '--alpha': 'nan' is not a finite number"),
    Case("mitigate-alpha-negative", _mitigate("--alpha", "-0.5"), EXIT_USAGE, r"Invalid value for '--alpha': '-0\.5' must be >= 0"),
    # QA13 accuracy F2: a given alpha on a table stored narrower than float32 said nothing of its rounding.
    Case("mitigate-given-alpha-float16-table", _mitigate("--alpha", "0.5", make=_float16_items, check=_rounding_said,
                                                         outputs=("o.npy", "o.npy.popaudit.json")), EXIT_OK, None),
    Case("mitigate-output-is-model", _mitigate("--alpha", "0.5", out="items.npy"), EXIT_ERROR,
         r"-o items\.npy " + NEVER_OVERWRITES.format(given="MODEL")),
    Case("mitigate-output-symlink-to-model", _mitigate("--alpha", "0.5", out="report.json", make=_links), EXIT_ERROR,
         r"-o report\.json " + NEVER_OVERWRITES.format(given="MODEL")),
    Case("mitigate-sidecar-is-log", _mitigate("--alpha", "0.5", "--interactions", "o.npy.popaudit.json", out="o.npy",
                                              make=lambda d: os.rename(d / "log.parquet", d / "o.npy.popaudit.json")),
         EXIT_ERROR, r"the sidecar of -o o\.npy o\.npy\.popaudit\.json " + NEVER_OVERWRITES.format(given="--interactions")),
    Case("mitigate-output-other-format", _mitigate("--alpha", "0.5", out="o.pt"), EXIT_ERROR,
         r"-o o\.pt names a PyTorch file but items\.npy is a \.npy table"),
    Case("mitigate-auto-without-holdout", _mitigate("--alpha", "auto", "--interactions", "log.parquet"), EXIT_ERROR,
         r"--alpha auto takes the α the accuracy trade-off recommends, but accuracy was not measured \(no held-out "
         r"interactions: pass --holdout PATH"),
    Case("mitigate-auto-history-query-cancels", _mitigate("--alpha", "auto", "--interactions", "log.parquet",
                                                          "--holdout", "held.parquet", make=_cancelling_history),
         EXIT_ERROR, r"--alpha auto: rescaled by alpha 0, the training items of user 0 of log\.parquet average to a "
                     r"zero vector, .* give --alpha a number in \[0, 1\]"),
    # Every K holds every user's candidates (5 items, K=10 clamped to 5): no K can tell the scorings' head shares
    # apart, so the trade-off is not judged, and --alpha auto says why (it read "no scoring was recommended").
    Case("mitigate-auto-every-k-saturated", _mitigate("--alpha", "auto", "--interactions", "log.parquet",
                                                      "--holdout", "held.parquet", make=_five_items),
         EXIT_ERROR, r"--alpha auto: the accuracy trade-off gives no α to serve with \(The trade-off is not judged: "
                     r"the harm is not measured at K=5 \(K reaches the catalogue: every list holds every candidate\).*"
                     r"give --alpha a number in \[0, 1\]"),
    # Options read only with --alpha auto, given beside a number: refused, never silently ignored (QA accuracy F5);
    # the two with defaults only when given on the command line (their defaults with --alpha 0.5 are fine).
    Case("mitigate-number-with-accuracy-tolerance", _mitigate("--alpha", "0.5", "--accuracy-tolerance", "0.999"),
         EXIT_USAGE, r"--accuracy-tolerance is read only with --alpha auto \(--alpha 0\.5 writes that α unchecked"),
    Case("mitigate-number-with-seed", _mitigate("--alpha", "0.5", "--seed", "7"),
         EXIT_USAGE, r"--seed is read only with --alpha auto \(--alpha 0\.5 writes that α unchecked"),
    Case("mitigate-number-with-default-tolerance-given", _mitigate("--alpha", "0.5", "--accuracy-tolerance", "0.98",
                                                                   "--seed", "0"),
         EXIT_USAGE, r"--accuracy-tolerance and --seed are read only with --alpha auto"),
    Case("mitigate-into-missing-folder", _mitigate("--alpha", "0.5", out="new/o.npy",
                                                   outputs=("new", "new/o.npy", "new/o.npy.popaudit.json")),
         EXIT_OK, None, stdout=r"Next: popaudit check new/o\.npy"),
    # An approximate index over the ceiling is known from the table's shape: refused before the log is read
    # (this log names an item past the table, which would be the error otherwise).
    Case("index-ivf-over-max-memory-before-log", _index_case("--index", "ivf", "--max-memory", "40000"), EXIT_ERROR,
         r"^Error: --index ivf builds an in-memory index of the whole item table and its normalised copy \(65,536 "
         r"bytes\), more than --max-memory \(40,000 bytes\); use --index exact"),
    Case("fail-on-alpha-under-approximate-index", _check("--index", "ivf", "-k", "5", "--fail-on", "gini_alpha_0.5@5>0.5"),
         EXIT_ERROR, r"gini_alpha_0\.5@5>0\.5: alpha_0\.5 not measured: the approximate index \(--index ivf\) ranks by "
                     r"dot and cosine only; --index exact measures the norm-aware scorings$"),
    Case("index-hnsw-no-room-for-candidates", _check("--index", "hnsw", "--max-memory", "420"), EXIT_ERROR,
         r"^Error: --max-memory leaves 100 bytes beside the approximate index, less than one query's 10 candidates "
         r"need \(640 bytes\); pass a larger --max-memory .* or --index exact$"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_option(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 20
