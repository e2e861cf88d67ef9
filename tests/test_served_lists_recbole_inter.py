"""Served lists alone against a RecBole ``.inter`` (Served F1, docs/served-lists.md, "A
RecBole .inter").

Without a checkpoint the run's split cannot be reproduced (it needs the run's config), so
the whole ``.inter`` is the training log: its test interactions count as training. The
audit says so once, and does not call the test hits a list holds "re-served training
items". The same lists beside the checkpoint (which splits the file as RecBole did) and
alone against the training part only give the same popularity figures; alone against the
whole file they give the whole file's, computed here with numpy.
"""

from __future__ import annotations

import gzip
import shutil
from pathlib import Path

import numpy as np
import pytest

from auditor.audit import run_audit
from auditor.config import AuditConfig, LoadOptions
from auditor.loading import load_model
from auditor.loading.recbole_split import RecBoleSplit, recbole_split
from auditor.result import AuditResult

DATA = Path(__file__).parent / "data" / "recbole"
INTER, MODEL = DATA / "eval.inter", DATA / "BPR-eval.pth"
K = 10
WHOLE = "is a RecBole .inter read whole as the training log"


@pytest.fixture(scope="module")
def split() -> RecBoleSplit:
    config = load_model(MODEL, LoadOptions()).config
    assert config is not None
    return recbole_split(config, INTER)


def _lists(split: RecBoleSplit, path: Path) -> np.ndarray:
    """Every test user's list of 10: their test items first, then items they neither trained
    on nor validated, in one fixed order (so no list holds a training item); returns the
    (user row, item row) of each slot, RecBole's internal ids."""
    seen = set(zip(split.train.users.tolist(), split.train.items.tolist())) | set(
        zip(split.valid.users.tolist(), split.valid.items.tolist()))
    order = np.random.default_rng(3).permutation(np.arange(1, split.n_items))
    slots, lines = [], ["user_id,item_id,rank"]
    for user in np.unique(split.test.users):
        chosen = list(dict.fromkeys(split.test.items[split.test.users == user].tolist()))[:K]
        chosen += [int(i) for i in order if (int(user), int(i)) not in seen and int(i) not in chosen][:K - len(chosen)]
        for rank, item in enumerate(chosen, 1):
            slots.append((int(user), item))
            lines.append(f"{split.user_ids[user]},{split.item_ids[item]},{rank}")
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return np.asarray(slots)


def _audit(tmp_path: Path, interactions: Path, model: Path | None = None) -> AuditResult:
    fast = {} if model is None else {"bootstrap": 0, "probes": False}  # lists alone would say they are ignored
    return run_audit(AuditConfig(model=model, interactions=interactions, recommendations=tmp_path / "recs.csv",
                                 ks=(K,), **fast))


def _counts(split: RecBoleSplit, *parts: str) -> np.ndarray:
    items = np.concatenate([getattr(split, p).items for p in parts])
    return np.bincount(items, minlength=split.n_items).astype(float)


def test_lists_alone_say_a_whole_inter_is_read_as_training(tmp_path: Path, split: RecBoleSplit) -> None:
    slots = _lists(split, tmp_path / "recs.csv")
    whole = _audit(tmp_path, INTER)
    assert whole.served is not None
    said = [w for w in whole.warnings if WHOLE in w]
    assert len(said) == 1 and whole.warnings[0] == said[0]
    assert "validation and test interactions count as training" in said[0] and "Pass the checkpoint as model, beside interactions and recommendations" in said[0]
    # Every list holds its user's test items: held-out hits, never called re-served training items.
    n_users = len(np.unique(slots[:, 0]))
    assert not any("lists re-serve" in w for w in whole.warnings)
    assert any(w.startswith(f"{n_users} of the {n_users} served lists hold some items their user has in the training "
                            "log, a RecBole .inter read whole") and "may be held-out hits" in w for w in whole.warnings)
    # Known answer: ARP and the log's head share over every row of the file with an item
    # (train, valid and test: the one row without an item is dropped by both), counted here.
    cells = [line.split("\t")[1] for line in INTER.read_text().splitlines()[1:]]
    tokens, counts = np.unique([c for c in cells if c], return_counts=True)
    assert counts.sum() == len(split.train) + len(split.valid) + len(split.test)
    of = dict(zip(tokens.tolist(), counts.tolist()))
    served = [of[str(split.item_ids[item])] for item in slots[:, 1]]
    assert whole.served.at[K].served["arp"] == pytest.approx(np.mean(served))
    assert whole.served.head_share_log == pytest.approx(_head_share(counts.astype(float)))


def test_the_training_part_alone_gives_the_checkpoints_figures(tmp_path: Path, split: RecBoleSplit) -> None:
    """Equal popularity figures exactly when both routes count the same training interactions."""
    slots = _lists(split, tmp_path / "recs.csv")
    train = tmp_path / "fake.train.inter"  # RecBole's benchmark name for a training part: no warning
    rows = [f"{split.user_ids[u]}\t{split.item_ids[i]}" for u, i in zip(split.train.users, split.train.items)]
    train.write_text("user_id:token\titem_id:token\n" + "\n".join(rows) + "\n", encoding="utf-8")
    alone, beside = _audit(tmp_path, train), _audit(tmp_path, INTER, MODEL)
    assert alone.served is not None
    assert not any(WHOLE in w for w in alone.warnings + beside.warnings)
    counts = _counts(split, "train")
    assert alone.served.at[K].served["arp"] == pytest.approx(counts[slots[:, 1]].mean())
    mine, theirs = alone.flat_metrics(), beside.flat_metrics()
    for name in ("arp", "novelty"):
        assert mine[f"{name}_served@{K}"] == pytest.approx(theirs[f"{name}_served@{K}"]), name


def test_other_logs_are_not_said_to_be_read_whole(tmp_path: Path, split: RecBoleSplit) -> None:
    """The same rows as a CSV, or the .inter renamed as RecBole's training part: no warning,
    and a list that holds its user's logged items re-serves them, as ever."""
    _lists(split, tmp_path / "recs.csv")
    csv = tmp_path / "log.csv"
    csv.write_text("user_id,item_id\n" + "\n".join(
        line.split("\t")[0] + "," + line.split("\t")[1] for line in INTER.read_text().splitlines()[1:]) + "\n")
    renamed = tmp_path / "eval.train.inter"
    shutil.copyfile(INTER, renamed)
    gzipped = tmp_path / "eval.train.inter.gz"  # read decompressed, as its name says: still the training part
    gzipped.write_bytes(gzip.compress(INTER.read_bytes()))
    for log in (csv, renamed, gzipped):
        result = _audit(tmp_path, log)
        assert not any(WHOLE in w or "read whole" in w for w in result.warnings), log
        assert any("served lists re-serve some of their user's training items" in w for w in result.warnings), log


def _head_share(popularity: np.ndarray) -> float:
    """The top-1% items' share of the popularity, ties at the cut included (max(1, floor(n/100)) items)."""
    cut = np.sort(popularity)[::-1][max(1, popularity.size // 100) - 1]
    return float(popularity[popularity >= cut].sum() / popularity.sum())
