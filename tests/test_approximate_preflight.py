"""An approximate index asked for where it will not pay off is said before it is built
(QA scale F3: at 300k items x 2,000 queries IVF took 58 s of CPU and HNSW 199 s against
exact search's 2 s, and the tool said so only afterwards)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli
from auditor.retrieval.approximate import (
    HNSW_BUILD_QUERIES, IVF_TRAIN_PASSES, index_cost, ivf_lists, preflight_note,
)


def test_the_estimate_by_hand() -> None:
    n, q, d = 300_000, 2_000, 32
    exact = 2.0 * n * q * d
    # HNSW: two builds of 13,000 queries' worth each, and the recall check's 1,000 exact queries.
    assert index_cost("hnsw", n, q, d) / exact == (2 * HNSW_BUILD_QUERIES + 1000) / q == 13.5
    nlist = round(4 * math.sqrt(n))  # 2,191 lists, 140,224 training points
    assert ivf_lists(n) == (nlist, math.ceil(nlist / 8))
    ivf = 2 * (2.0 * d * nlist * (IVF_TRAIN_PASSES * 64 * nlist + n)) + 2.0 * n * 1000 * d
    assert index_cost("ivf", n, q, d) == ivf
    (note,) = preflight_note("hnsw", n, q, d)
    assert note.startswith("index hnsw will likely be slower than exact search here: building its two indexes "
                           "(300,000 items x 32 dims) and checking its recall cost about 14x or more exact search "
                           "of the 2,000 queries (estimated; an index pays off only from about 27,000 queries")
    assert "about 7x or more" in preflight_note("ivf", n, q, d)[0]
    # Enough queries: the index pays off and nothing is said; a tiny run is not worth a note.
    assert preflight_note("hnsw", n, 30_000, d) == [] and preflight_note("ivf", n, 20_000, d) == []
    assert preflight_note("hnsw", 2_000, 500, 16) == []


def test_check_says_it_before_the_build(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    n_items, n_users, dim = 100_000, 300, 16
    np.savez(tmp_path / "m.npz", item_embedding=rng.standard_normal((n_items, dim)).astype(np.float32),
             user_embedding=rng.standard_normal((n_users, dim)).astype(np.float32))
    pq.write_table(pa.table({"user_id": rng.integers(0, n_users, 3000), "item_id": rng.integers(0, n_items, 3000)}),
                   tmp_path / "log.parquet")
    args = ["check", str(tmp_path / "m.npz"), "--interactions", str(tmp_path / "log.parquet"), "--no-probes",
            "--bootstrap", "0", "-k", "10", "--json", str(tmp_path / "r.json"), "--index", "ivf"]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 0, result.output
    err = " ".join(result.stderr.split())
    said = re.search(r"Warning: --index ivf will likely be slower than exact search here: building its two indexes "
                     r"\(100,000 items x 16 dims\) and checking its recall cost about (\d+)x or more", err)
    assert said is not None, err
    n_queries = 300  # every user of the log is queried
    assert int(said.group(1)) == round(index_cost("ivf", n_items, n_queries, dim) / (2.0 * n_items * n_queries * dim))
    assert err.index("will likely be slower") < err.index("Wrote the JSON report")
    # auto stays exact at this size and says nothing of the kind.
    auto = CliRunner().invoke(cli, args[:-2])
    assert auto.exit_code == 0 and "will likely be slower" not in auto.stderr
