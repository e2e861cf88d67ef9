"""Hostile ``popaudit batch`` manifests: columns that try to grant trust or pick a
cluster, paths that escape, broken files, outputs that would overwrite an input."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor.cli import cli

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    EXIT_USAGE,
    FAST,
    Built,
    Case,
    Outcome,
    fifo,
    log,
    no_dev_full,
    params,
    parquet,
    run_case,
    symlink,
    table,
    write,
)

NEVER_OVERWRITES = r"popaudit never overwrites an input"
NOT_ALLOWED = r"manifest m\.{suffix}: column '{column}' is not allowed: .*{flag}"


def _nothing_audited(d: Path, _outcome: Any) -> None:
    assert not (d / "r.parquet").exists(), "a row was audited"


def _batch(manifest: str | bytes | dict[str, list[Any]] | None, *extra: str, name: str = "m.csv",
           outputs: tuple[str, ...] = (), check: Any = None, make: Any = None, quiet: bool = True) -> Any:
    """The valid table and log, the manifest ``name`` (CSV text/bytes, or columns written
    as Parquet), ``make(d)``, then ``batch m.csv -o r.parquet --interactions log.parquet``
    (with -q unless ``quiet`` is false: the console summary is then printed)."""

    def build(d: Path) -> Built:
        table(d)
        log(d)
        if isinstance(manifest, dict):
            parquet(d, name, manifest)
        elif manifest is not None:
            write(d, name, manifest)
        if make is not None:
            make(d)
        args = ["batch", name, *extra]
        if "-o" not in extra:
            args += ["-o", "r.parquet"]
        fast = FAST if quiet else tuple(a for a in FAST if a != "-q")
        return Built([*args, "--interactions", "log.parquet", *fast], outputs=outputs, check=check)

    return build


def _results(*statuses: str, no: str | None = None) -> Any:
    """Check r.parquet: one row per manifest row with these statuses; no error cell holds ``no``."""

    def check(d: Path, outcome: Outcome) -> None:
        rows = pq.read_table(d / "r.parquet").to_pylist()
        assert [r["status"] for r in rows] == list(statuses), rows
        for row in rows:
            if row["status"] == "error":
                assert row["error"], row
                assert no is None or no not in row["error"], row["error"]

    return check


RESULTS = ("r.parquet",)


def _columns_ignored(d: Path, outcome: Outcome) -> None:
    """A lists-only row's model settings are named as its manifest's columns (``alpha``, ``k``-style), the training
    settings and the options too, in one warning (QA batchlists F9b)."""
    import json

    rows = pq.read_table(d / "r.parquet").to_pylist()
    assert [r["status"] for r in rows] == ["ok"], rows
    warnings = json.loads(rows[0]["report_json"])["warnings"]
    said = [w for w in warnings if " ignored: they apply to a model" in w]
    assert said == [w for w in said if w.startswith("max_queries, no_probes, bootstrap, optimizer, lr, alpha ignored")], \
        warnings
    assert len(said) == 1 and "alphas" not in said[0], warnings


def _etc_passwd(column: str, cell: str) -> Any:
    header = "model,interactions" if column == "interactions" else "model"
    line = f"items.npy,{cell}" if column == "interactions" else cell
    return _batch(f"{header}\n{line}\n", outputs=RESULTS, check=_results("error", no="root:"))


def _no_etc_passwd() -> str | None:
    passwd = Path("/etc/passwd")
    readable = passwd.is_file() and os.access(passwd, os.R_OK)
    return None if readable and "root:" in passwd.read_text(errors="replace") else "no /etc/passwd with a root entry"


def _foreign_resume(d: Path) -> Built:
    """A results file written for manifest a/m.csv, resumed with manifest b/m.csv whose
    row 0 has the same model cell (items.npy) but names another file."""
    log(d)
    for sub, seed in (("a", 0), ("b", 5)):
        (d / sub).mkdir()
        table(d / sub, seed=seed)
        write(d / sub, "m.csv", "model\nitems.npy\n")
    first = CliRunner().invoke(cli, ["batch", str(d / "a" / "m.csv"), "-o", str(d / "r.parquet"),
                                     "--interactions", str(d / "log.parquet"), *FAST])
    assert first.exit_code == 0, first.output
    before = (d / "r.parquet").read_bytes()

    def unchanged(d: Path, outcome: Outcome) -> None:
        assert (d / "r.parquet").read_bytes() == before, "the refused --resume rewrote the results file"

    return Built(["batch", "b/m.csv", "-o", "r.parquet", "--resume", "--interactions", "log.parquet", *FAST],
                 outputs=RESULTS, check=unchanged)


def _special_manifest(path: str) -> Any:
    def build(d: Path) -> Built:
        table(d)
        log(d)
        return Built(["batch", path, "-o", "r.parquet", *FAST])

    return build


def _fifo_manifest(d: Path) -> Built:
    fifo(d, "m.csv")
    return Built(["batch", "m.csv", "-o", "r.parquet", *FAST])


def _links(d: Path) -> None:
    symlink(d, "alias.csv", "m.csv")
    symlink(d, "log-link.parquet", "log.parquet")
    write(d, "p.py", "X = 1\n")


def _held_out(d: Path) -> None:
    log(d, "ho.parquet")
    write(d, "tr.jsonl", '{"my": "precious trace"}\n')


def _onnx_external(d: Path) -> None:
    """onnx/model.onnx whose item table lives in its external data file onnx/model.data."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    (d / "onnx").mkdir()
    table = numpy_helper.from_array(np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32), "item_embedding")
    graph = helper.make_graph([helper.make_node("Gather", ["item_embedding", "item_id"], ["vec"])], "g",
                              [helper.make_tensor_value_info("item_id", TensorProto.INT64, [None])],
                              [helper.make_tensor_value_info("vec", TensorProto.FLOAT, [None, 4])], [table])
    onnx.save_model(helper.make_model(graph), str(d / "onnx" / "model.onnx"), save_as_external_data=True,
                    all_tensors_to_one_file=True, location="model.data", size_threshold=0)


def _html_escaped(d: Path, outcome: Outcome) -> None:
    page = (d / "s.html").read_text()
    assert "<script>alert(1)</script>" not in page and "<img src=x onerror" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page


def _label_literal(d: Path, outcome: Outcome) -> None:
    labels = [r["label"] for r in pq.read_table(d / "r.parquet").to_pylist()]
    assert labels == ["[/bold]", "[bold red]styled[/]"], labels


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def _killed_run_left(tmp: Path) -> None:
    """What a batch killed with SIGKILL leaves in $TMPDIR: its pool folder (with the
    forkserver's socket path in it) and a spill file, both named with its pid."""
    pid = _dead_pid()
    pool = tmp / f"pymp-popaudit-{pid}-abc123"
    pool.mkdir()
    (pool / "listener-xyz").write_bytes(b"")
    (tmp / f"popaudit-table-{pid}-q1w2e3.npy").write_bytes(b"\x93NUMPY")


def _after_a_kill(d: Path) -> Built:
    table(d)
    log(d)
    write(d, "m.csv", "model\nitems.npy\n")
    return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST], outputs=RESULTS,
                 in_tmp=_killed_run_left)


CASES = [
    Case("stale-pool-folder-and-spill-removed", _after_a_kill, EXIT_OK, None, process=True, timeout=120),
    Case("trust-pickle-column-csv", _batch("model,trust_pickle\nitems.npy,true\n"), EXIT_ERROR,
         NOT_ALLOWED.format(suffix="csv", column="trust_pickle", flag="--trust-pickle")),
    Case("trust-pickle-column-parquet", _batch({"model": ["items.npy"], "trust_pickle": [True]}, name="m.parquet"),
         EXIT_ERROR, NOT_ALLOWED.format(suffix="parquet", column="trust_pickle", flag="--trust-pickle")),
    Case("scheduler-column", _batch("model,scheduler\nitems.npy,tcp://203.0.113.9:8786\n"), EXIT_ERROR,
         NOT_ALLOWED.format(suffix="csv", column="scheduler", flag="--scheduler")),
    Case("plugins-column", _batch("model,plugins\nitems.npy,evil.py\n", make=lambda d: write(
        d, "evil.py", "raise SystemExit('plugin code ran')\n")), EXIT_ERROR,
         NOT_ALLOWED.format(suffix="csv", column="plugins", flag="--plugin")),
    Case("model-is-etc-passwd", _etc_passwd("model", "/etc/passwd"), EXIT_OK, None,
         stderr=r"row 0 \(/etc/passwd\) failed: ", absent=r"root:", skip=_no_etc_passwd),
    Case("model-escapes-to-etc-passwd", _etc_passwd("model", "../../../../../../../../../etc/passwd"), EXIT_OK, None,
         stderr=r"row 0 \(\.\./.*etc/passwd\) failed: ", absent=r"root:", skip=_no_etc_passwd),
    Case("interactions-is-etc-passwd", _etc_passwd("interactions", "/etc/passwd"), EXIT_OK, None,
         stderr=r"row 0 \(items\.npy\) failed: ", absent=r"root:", skip=_no_etc_passwd),
    Case("duplicate-columns", _batch("model,model\nitems.npy,items.npy\n"), EXIT_ERROR,
         r"manifest m\.csv: column\(s\) 'model' appear more than once"),
    Case("empty-manifest", _batch(""), EXIT_ERROR, r"manifest m\.csv.*[Ee]mpty"),
    Case("header-only-manifest", _batch("model\n"), EXIT_ERROR, r"manifest m\.csv has no rows"),
    Case("no-model-column", _batch("label,path\nx,items.npy\n"), EXIT_ERROR,
         r"manifest m\.csv has no 'model' column; columns found: label, path"),
    Case("nul-in-header", _batch(b"model\x00,label\nitems.npy,x\n"), EXIT_ERROR, r"manifest m\.csv has no 'model' column"),
    Case("latin1-model-cell", _batch(b"model,label\ncaf\xe9.npy,x\n"), EXIT_ERROR,
         r"m\.csv.*column 'model' is not valid UTF-8"),
    Case("rows-name-missing-files", _batch("model,interactions\nnope.npy,\nitems.npy,gone.parquet\nitems.npy,\n",
                                          outputs=RESULTS, check=_results("error", "error", "ok")), EXIT_OK, None,
         stderr=r"row 0 \(nope\.npy\) failed: .*not found.*nope\.npy.*row 1 \(items\.npy\) failed: .*not found.*gone\.parquet"),
    Case("row-model-dev-zero-and-empty-cell", _batch('model\n/dev/zero\n""\nitems.npy\n', outputs=RESULTS,
                                                     check=_results("error", "error", "ok")), EXIT_OK, None,
         stderr=r"row 0 \(/dev/zero\) failed: .*character device.*row 1 \(no model\) failed: .*model cell is empty"),
    Case("bad-cells-named-as-the-manifest-spells-them",
         _batch('model,k,alpha,--max-queries\nitems.npy,"10,abc",,\nitems.npy,,2,\nitems.npy,,,-3\n', outputs=RESULTS,
                check=_results("error", "error", "error")), EXIT_OK, None,
         stderr=r"row 0 \(items\.npy\) failed: InputError: column 'k': expected an integer, got 'abc'.*"
                r"row 1 \(items\.npy\) failed: InputError: column 'alpha': must be a number >= 0 and <= 1, got 2\.0.*"
                r"row 2 \(items\.npy\) failed: InputError: column '--max-queries': must be an integer",
         absent=r"column '(ks|alphas|max_queries)'"),
    # Two α that one scoring name would file alike: the row fails naming both (the option: a usage error).
    Case("alpha-cell-two-values-one-name",
         _batch('model,alpha\nitems.npy,"0.3,0.3000001"\nitems.npy,"0.3,0.300001"\n', outputs=RESULTS,
                check=_results("error", "ok")), EXIT_OK, None,
         stderr=r"row 0 \(items\.npy\) failed: InputError: column 'alpha': 0\.3 and 0\.3000001 both name the scoring "
                r"alpha_0\.3 "),
    Case("alpha-option-two-values-one-name", _batch("model\nitems.npy\n", "--alpha", "0.3", "--alpha", "0.3000001",
                                                    check=_nothing_audited), EXIT_USAGE,
         r"Error: --alpha 0\.3 and 0\.3000001 both name the scoring alpha_0\.3 "),
    # QA F7: a row's messages name settings as its manifest spells them, never as the
    # command's flags (rows were built under the CLI's spelling); a float bound reads 1e+30.
    Case("row-settings-named-as-columns-not-flags",
         _batch("model,device,index,Item-Key,lr\nitems.npy,tpu,,,\nitems.npy,,faiss,,\nitems.npy,,,,1e31\n",
                outputs=RESULTS, check=_results("error", "error", "error")), EXIT_OK, None,
         stderr=r"row 0 \(items\.npy\) failed: InputError: column 'device': device must be one of cpu, auto, cuda, "
                r"got 'tpu'.*row 1 \(items\.npy\) failed: InputError: column 'index': index must be one of .*got "
                r"'faiss'.*row 2 \(items\.npy\) failed: InputError: column 'lr': must be a number > 0 and <= 1e\+30, "
                r"got 1e\+31",
         absent=r"--device|--index|1,000,000,000"),
    # --rank-by is checked before any row is audited, against the names --fail-on takes
    # (the manifest's K included): a usage error with the closest names, not the results'
    # thousands of column names after the whole batch, and nothing written.
    Case("rank-by-misspelled", _batch("model,k\nitems.npy,5\n", "--rank-by", "spearmann", "--html", "s.html"),
         EXIT_USAGE, r"invalid --rank-by 'spearmann': not a metric this run measures \(did you mean 'spearman'",
         absent=r"head_share_1pct_dot@|numeric columns"),
    Case("rank-by-k-no-row-asks-for", _batch("model,k\nitems.npy,5\n", "--rank-by", "head_share_1pct_ratio@7"),
         EXIT_USAGE, r"invalid --rank-by 'head_share_1pct_ratio@7'.*\(did you mean 'head_share_1pct_ratio@5'.*"
                     r"at K = 5\b"),
    # A gate at a K no row asks for is well-formed: exit 1 before any row is audited, saying what would measure it
    Case("fail-on-k-no-row-asks-for", _batch("model,k\nitems.npy,5\n", "--fail-on", "head_share_1pct_ratio@7>1",
                                             check=_nothing_audited),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on head_share_1pct_ratio@7>1: K=7 was not asked for \(add 7 to "
                     r"the k cells of row 0 \(a row's k cell overrides -k for that row\)\)$", absent=r"add -k"),
    # Every row's k cell decides (QA batchlists F2): -k reaches no row, so its advice would change nothing; said
    # before any audit runs even though the default -k asks for K=100.
    Case("fail-on-k-cells-override", _batch("model,k\nitems.npy,5\nitems.npy,3\n", "-k", "100", "--fail-on",
                                            "gini_dot@100>0.5", check=_nothing_audited),
         EXIT_ERROR, r"K=100 was not asked for \(add 100 to the k cells of rows 0, 1 \(a row's k cell overrides -k"),
    # A row without a cell takes -k, a row with one does not (QA batchlists F2b): the advice names both, so that it
    # works as printed for this manifest.
    Case("fail-on-k-a-row-takes-the-option", _batch("model,k\nitems.npy,5\nitems.npy,\n", "-k", "5",
                                                     "--fail-on", "gini_dot@7>0.5", check=_nothing_audited),
         EXIT_ERROR, r"K=7 was not asked for \(add -k 7 \(row 1 has no k cell; -k replaces the cut-offs measured now "
                     r"\(5\), so pass them all: -k 5 -k 7\) and add 7 to the k cells of row 0 "
                     r"\(a row's k cell overrides -k for that row\)\)$"),
    # -k replaces the default cut-offs of every row without a cell (QA accuracy F2, second round): its advice gives
    # the whole list, the default 10 and 100 another gate reads for row 1 kept, not a bare "add -k 20".
    Case("fail-on-k-a-row-keeps-its-defaults", _batch("model,k\nitems.npy,10\nitems.npy,\n", "--fail-on",
                                                      "gini_dot@20>0.5", "--fail-on", "gini_dot@100>0.5",
                                                      check=_nothing_audited),
         EXIT_ERROR, r"K=20 was not asked for \(add -k 20 \(row 1 has no k cell; -k replaces the cut-offs measured "
                     r"now \(10, 100\), so pass them all: -k 10 -k 100 -k 20\) and add 20 to the k cells of row 0 "),
    # The same for --alpha: the default grid (0.25, 0.5, 0.75) of a row without an alpha cell is kept in the advice,
    # also where the manifest has k cells but no alpha column at all.
    Case("fail-on-alpha-a-row-keeps-the-grid", _batch("model,alpha\nitems.npy,0.5\nitems.npy,\n", "--fail-on",
                                                      "gini_alpha_0.3@10>0.5", check=_nothing_audited),
         EXIT_ERROR, r"α=0\.3 was not asked for \(add --alpha 0\.3 \(row 1 has no alpha cell; --alpha replaces the α "
                     r"measured now \(0\.25, 0\.5, 0\.75\), so pass them all: --alpha 0\.25 --alpha 0\.5 --alpha "
                     r"0\.75 --alpha 0\.3\) and add 0\.3 to the alpha cells of row 0 "),
    Case("fail-on-alpha-k-cells-only", _batch("model,k\nitems.npy,10\n", "--fail-on", "gini_alpha_0.3@10>0.5",
                                              check=_nothing_audited),
         EXIT_ERROR, r"α=0\.3 was not asked for \(add --alpha 0\.3; --alpha replaces the α measured now \(0\.25, "
                     r"0\.5, 0\.75\), so pass them all: --alpha 0\.25 --alpha 0\.5 --alpha 0\.75 --alpha 0\.3\)$"),
    # -k asks for the gate's K but row 0's cell does not: refused before any audit, naming row 0's cell only.
    Case("fail-on-k-one-cell-lacks-it", _batch("model,k\nitems.npy,5\nitems.npy,\nitems.npy,\"5,7\"\n", "-k", "7",
                                               "--fail-on", "gini_dot@7>0.5", check=_nothing_audited),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on gini_dot@7>0\.5: K=7 was not asked for \(add 7 to the k cells "
                     r"of row 0 \(a row's k cell overrides -k for that row\)\)$", absent=r"add -k|row 2"),
    # A served-lists gate: a row without lists can reach no K (said, not advised a K); the K of the rows with lists
    # is checked against them when they are audited, and said so. Only the rows that lack the K are named.
    Case("fail-on-served-k-rows-without-lists", _batch(
        "model,recommendations,k\nitems.npy,,5\n,recs.csv,\"3,5\"\n,recs.csv,3\n", "-k", "3", "--fail-on",
        "gini_served@5>0.5", check=_nothing_audited, make=lambda d: write(d, "recs.csv", "user_id,item_id,rank\n0,3,1\n")),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on gini_served@5>0\.5: no served lists were given for row 0 \(pass "
                     r"the recommendations column\); K=5 was not asked for \(add 5 to the k cells of row 2 \(a row's k cell "
                     r"overrides -k for that row\)\); whether a row's served lists hold K=5 items is known when it is "
                     r"audited", absent=r"rows? 1|add -k"),
    Case("lists-row-model-settings-named-by-column", _batch(
        "model,recommendations,k,max_queries,alpha,optimizer,lr\n,recs.csv,3,100,0.3,adam,0.01\n", outputs=RESULTS,
        make=lambda d: write(d, "recs.csv", "user_id,item_id,rank\n0,3,1\n"), check=_columns_ignored), EXIT_OK, None),
    # Batch has no --recommendations: the reason names the manifest column (QA batchlists F3).
    # A row whose gate figure is missing, or a row that failed, never passes a gate (QA batchlists F7): exit 1,
    # each named with its reason, as check of that row exits 1.
    Case("fail-on-a-row-without-the-figure", _batch("model,recommendations,k\nitems.npy,,3\n,recs.csv,3\n",
                                                    "--fail-on", "spearman>0.99", outputs=RESULTS,
                                                    make=lambda d: write(d, "recs.csv", "user_id,item_id,rank\n0,3,1\n")),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on spearman>0\.99: not measured in 1 of the 2 audited rows "
                     r"\(row 1 \(no model\): frequency–norm not measured: no model"),
    Case("fail-on-a-failed-row", _batch("model\nitems.npy\nmissing.npy\n", "-k", "3", "--fail-on", "spearman>0.99",
                                        outputs=RESULTS),
         EXIT_ERROR, r"^Error: cannot evaluate --fail-on: 1 row failed \(row 1 \(missing\.npy\)\): no gate can pass a "
                     r"row that was not audited$"),
    # Known from the manifest: refused before any audit (QA batchlists F2b).
    Case("fail-on-served-without-lists-column", _batch("model\nitems.npy\n", "-k", "5", "--fail-on",
                                                       "gini_served@5>0.5", check=_nothing_audited),
         EXIT_ERROR, r"no served lists were given for row 0 \(pass the recommendations column\)$",
         absent=r"--recommendations"),
    Case("rank-by-a-manifest-k", _batch("model,k\nitems.npy,5\n", "--rank-by", "head_share_1pct_ratio@5",
                                        outputs=RESULTS, check=_results("ok")), EXIT_OK, None),
    Case("row-interactions-fifo", _batch("model,interactions\nitems.npy,pipe.parquet\n", outputs=RESULTS,
                                         make=lambda d: fifo(d, "pipe.parquet"), check=_results("error")),
         EXIT_OK, None, stderr=r"row 0 \(items\.npy\) failed: .*pipe\.parquet is a FIFO"),
    Case("label-html-injection", _batch('model,label\nitems.npy,<script>alert(1)</script>\n'
                                        'items.npy,"<img src=x onerror=alert(2)>"\n', "--html", "s.html",
                                        outputs=("r.parquet", "s.html"), check=_html_escaped), EXIT_OK, None),
    Case("output-is-manifest", _batch("model\nitems.npy\n", "-o", "m.csv"), EXIT_ERROR,
         r"the results file m\.csv would overwrite the manifest"),
    Case("output-is-manifest-via-link", _batch("model\nitems.npy\n", "-o", "alias.csv", make=_links), EXIT_ERROR,
         r"alias\.csv would overwrite the manifest"),
    Case("html-is-manifest", _batch("model\nitems.npy\n", "-o", "r.parquet", "--html", "m.csv"), EXIT_ERROR,
         r"--html m\.csv is the input file given as the manifest; " + NEVER_OVERWRITES),
    Case("output-is-row-model", _batch("model\nitems.npy\n", "-o", "items.npy"), EXIT_ERROR,
         r"-o items\.npy is the input file given as the model of manifest row 0; " + NEVER_OVERWRITES),
    Case("output-is-row-log-via-link", _batch("model,interactions\nitems.npy,log-link.parquet\n", "-o", "log-link.parquet",
                                              make=_links), EXIT_ERROR, r"-o log-link\.parquet .*" + NEVER_OVERWRITES),
    Case("output-is-default-log", _batch("model\nitems.npy\n", "-o", "log.parquet"), EXIT_ERROR,
         r"-o log\.parquet is the input file given as --interactions; " + NEVER_OVERWRITES),
    Case("output-is-default-holdout", _batch("model\nitems.npy\n", "-o", "ho.parquet", "--holdout", "ho.parquet",
                                             make=_held_out), EXIT_ERROR,
         r"-o ho\.parquet is the input file given as --holdout; " + NEVER_OVERWRITES),
    Case("html-is-row-holdout", _batch("model,holdout\nitems.npy,ho.parquet\n", "--html", "ho.parquet", make=_held_out),
         EXIT_ERROR, r"--html ho\.parquet is the input file given as the holdout of manifest row 0; " + NEVER_OVERWRITES),
    Case("html-is-row-trace", _batch("model,trace\nitems.npy,tr.jsonl\n", "--html", "tr.jsonl", make=_held_out),
         EXIT_ERROR, r"--html tr\.jsonl is the input file given as the trace of manifest row 0; " + NEVER_OVERWRITES),
    Case("output-is-onnx-external-data", _batch("model\nonnx/model.onnx\n", "-o", "onnx/model.data",
                                                make=_onnx_external), EXIT_ERROR,
         r"-o onnx/model\.data is the input file given as the external data of the model of manifest row 0; "
         + NEVER_OVERWRITES),
    Case("html-under-a-file-refused-before-any-audit", _batch("model\nitems.npy\n", "--html", "notes.txt/x.html",
                                                              make=lambda d: write(d, "notes.txt", "notes\n"),
                                                              check=_nothing_audited), EXIT_ERROR,
         r"cannot create folder notes\.txt for notes\.txt/x\.html: notes\.txt is a file, not a folder"),
    Case("resume-from-dev-null", _batch("model\nitems.npy\n", "-o", "/dev/null", "--resume", check=_nothing_audited),
         EXIT_ERROR, r"--resume continues the results file -o names; /dev/null is no file to read them back from"),
    Case("output-is-plugin", _batch("model\nitems.npy\n", "-o", "p.py", "--plugin", "p.py", make=_links), EXIT_ERROR,
         r"-o p\.py is the input file given as --plugin; " + NEVER_OVERWRITES),
    Case("output-is-folder", _batch("model\nitems.npy\n", "-o", "out", make=lambda d: (d / "out").mkdir()), EXIT_USAGE,
         r"'-o' / '--output': File 'out' is a directory"),
    Case("resume-from-garbage-results", _batch("model\nitems.npy\n", "--resume", make=lambda d: write(
        d, "r.parquet", "not parquet\n")), EXIT_ERROR, r"r\.parquet is not a readable Parquet results file"),
    Case("fifo-manifest", _fifo_manifest, EXIT_ERROR, r"manifest m\.csv is a FIFO \(named pipe\)", process=True,
         timeout=30),
    Case("dev-zero-manifest", _special_manifest("/dev/zero"), EXIT_ERROR, r"manifest /dev/zero is a character device",
         process=True, timeout=30),
    Case("folder-manifest", _special_manifest("."), EXIT_USAGE, r"'MANIFEST': File '\.' is a directory"),
    Case("missing-manifest", _special_manifest("nope.csv"), EXIT_ERROR, r"manifest not found: nope\.csv"),
    Case("garbage-parquet-manifest", _batch(b"PAR1\x00\x01garbage", name="m.parquet"), EXIT_ERROR,
         r"cannot read manifest m\.parquet as Parquet"),
    Case("html-dev-full", _batch("model\nitems.npy\n", "-o", "r.parquet", "--html", "/dev/full", outputs=RESULTS),
         EXIT_ERROR, r"cannot write /dev/full", skip=no_dev_full),
    Case("label-rich-markup", _batch("model,label\nitems.npy,[/bold]\nitems.npy,[bold red]styled[/]\n", "-k", "10",
                                     outputs=RESULTS, check=_label_literal, quiet=False),
         EXIT_OK, None, stdout=r"\[/bold\].*\[bold red\]styled\[/\]"),
    Case("resume-with-results-of-another-manifest", _foreign_resume, EXIT_ERROR,
         r"results file r\.parquet was written for manifest .*a/m\.csv, not for b/m\.csv"),
    Case("nul-byte-in-model-cell", _batch(b"model,label\nitems.npy\x00,x\n"), EXIT_ERROR,
         r"m\.csv.*column 'model'.*(NUL|null byte)"),
    Case("nul-byte-in-interactions-cell", _batch(b"model,interactions\nitems.npy,\nitems.npy,log\x00.parquet\n"),
         EXIT_ERROR, r"m\.csv.*column 'interactions', row 1.*(NUL|null byte)"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_manifest(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 20
