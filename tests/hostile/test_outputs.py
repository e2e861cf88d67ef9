"""Hostile output paths: symlinks planted where a report or a sidecar goes, a symlinked
figure folder, FIFOs nobody reads, a full device, a descriptor not open. An output that
is a symlink is refused (neither written through nor replaced: F12, the /dev/stdout link
replaced when stdout was a file), figures never go through a link, a FIFO without a
reader is refused instead of hanging, batch results never share stdout with the summary,
and a failed write is one Error: line (issue #23, items 5, 7, 8)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from .corpus import (
    EXIT_ERROR,
    EXIT_GATE,
    EXIT_OK,
    EXIT_USAGE,
    FAST,
    Built,
    Case,
    check_args,
    fifo,
    no_dev_full,
    params,
    run_case,
    standard,
    symlink,
    write,
)

VICTIM = "victim.txt"
SECRET = "precious content that must survive\n"


def _victim(d: Path) -> None:
    write(d, VICTIM, SECRET)
    (d / "keep").mkdir()
    write(d, "keep/inside.txt", SECRET)


def _check_case(link: str, target: str, *extra: str) -> Any:
    """``check`` writing an output named by ``link``, a symlink to ``target``."""

    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        symlink(d, link, target)
        return Built(check_args("items.npy", *extra))

    return build


def _markdown_folder_link(d: Path) -> Built:
    standard(d)
    _victim(d)
    symlink(d, "r_files", "keep")  # the folder the figures of r.md would go to
    return Built(check_args("items.npy", "--markdown", "r.md"))


def _mitigate_case(out: str, link: str, target: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        symlink(d, link, target)
        return Built(["mitigate", "items.npy", "--alpha", "0.5", "-o", out])

    return build


def _batch_case(flag: str, link: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        write(d, "m.csv", "model\nitems.npy\n")
        symlink(d, link, VICTIM)
        args = ["batch", "m.csv", "--interactions", "log.parquet", *FAST]
        args += ["-o", link] if flag == "-o" else ["-o", "r.parquet", flag, link]
        return Built(args)

    return build


def _batch_text_name(name: str) -> Any:
    """``batch -o`` a name that promises text (an existing file there must stay as it is):
    the results are Parquet, whose bytes a CSV or JSON reader takes for garbage (QA8 scale F2)."""

    def build(d: Path) -> Built:
        standard(d)
        write(d, "m.csv", "model\nitems.npy\n")
        write(d, name, "row,model\n0,earlier.npy\n")
        return Built(["batch", "m.csv", "--interactions", "log.parquet", *FAST, "-o", name])

    return build


def _onnx_data_output(d: Path) -> Built:
    """``check`` of an ONNX model whose table is in onnx/model.data, its JSON report
    aimed at that data file."""
    from .test_manifests import _onnx_external

    standard(d)
    _onnx_external(d)
    return Built(check_args("onnx/model.onnx", "--json", "onnx/model.data"))


def _batch_stdout(flag: str, stream: str = "/dev/stdout") -> Any:
    """A batch output on ``stream`` while the summary (stdout) or progress (stderr) is printed there too (no -q)."""

    def build(d: Path) -> Built:
        standard(d)
        write(d, "m.csv", "model\nitems.npy\n")
        args = ["batch", "m.csv", "--interactions", "log.parquet", "--bootstrap", "0", "--no-probes"]
        args += ["-o", stream] if flag == "-o" else ["-o", "r.parquet", flag, stream]
        return Built(args)

    return build


def _unquiet_check(*extra: str) -> Any:
    """``check`` without -q: its --format report goes to stdout beside ``extra``'s output."""

    def build(d: Path) -> Built:
        standard(d)
        return Built(["check", "items.npy", "--interactions", "log.parquet", "--bootstrap", "0", "--no-probes", *extra])

    return build


def _fifo_output(flag: str, *extra: str, command: str = "check") -> Any:
    def build(d: Path) -> Built:
        standard(d)
        fifo(d, "pipe")
        if command == "batch":
            write(d, "m.csv", "model\nitems.npy\n")
            return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST, flag, "pipe"],
                         outputs=("r.parquet",))
        return Built(check_args("items.npy", flag, "pipe", *extra))

    return build


def _full(command: list[str]) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        write(d, "m.csv", "model\nitems.npy\n")
        return Built(command)

    return build


def _journal_planted(kind: str) -> Any:
    """Something planted under the name of the results journal (``.r.parquet.journal``):
    a symlink to a file the user keeps, or a FIFO nobody reads."""

    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        write(d, "m.csv", "model\nitems.npy\n")
        if kind == "symlink":
            symlink(d, JOURNAL, VICTIM)
        else:
            fifo(d, JOURNAL)
        args = ["batch", "m.csv", "--interactions", "log.parquet", *FAST, "-o", "r.parquet"]
        return Built(args, outputs=("r.parquet",))

    return build


JOURNAL = ".r.parquet.journal"
NO_READER = r"cannot write pipe: it is a FIFO \(named pipe\) that no process is reading"
LINK = r"cannot write {}: it is a symbolic link \(to {}\), and popaudit neither writes through a link nor replaces it"
CASES = [
    Case("json-symlink-to-victim", _check_case("r.json", VICTIM, "--json", "r.json"), EXIT_ERROR,
         LINK.format(r"r\.json", r"victim\.txt")),
    Case("output-symlink-to-victim", _check_case("r.txt", VICTIM, "-o", "r.txt"), EXIT_ERROR,
         LINK.format(r"r\.txt", r"victim\.txt")),
    Case("html-symlink-to-victim", _check_case("r.html", VICTIM, "--html", "r.html"), EXIT_ERROR,
         LINK.format(r"r\.html", r"victim\.txt")),
    Case("markdown-symlink-to-victim", _check_case("r.md", VICTIM, "--markdown", "r.md"), EXIT_ERROR,
         LINK.format(r"r\.md", r"victim\.txt")),
    Case("json-symlink-into-folder", _check_case("r.json", "keep/inside.txt", "--json", "r.json"),
         EXIT_ERROR, LINK.format(r"r\.json", r"keep/inside\.txt")),
    Case("json-dangling-symlink", _check_case("r.json", "nowhere/created.txt", "--json", "r.json"),
         EXIT_ERROR, LINK.format(r"r\.json", r"nowhere/created\.txt")),
    Case("json-symlink-to-folder", _check_case("r.json", "keep", "--json", "r.json"),
         EXIT_USAGE, r"Invalid value for '--json': File 'r\.json' is a directory"),
    Case("json-descriptor-not-open", _check_case("unused", VICTIM, "--json", "/dev/fd/9"), EXIT_ERROR,
         r"cannot write /dev/fd/9: it names descriptor 9, which is not open", process=True, timeout=60),
    Case("json-is-onnx-external-data", _onnx_data_output, EXIT_ERROR,
         r"--json onnx/model\.data is the input file given as the external data of the model; popaudit never overwrites"),
    # In a process (stdout a pipe): in-process, pytest's capture makes stdout a file, and a
    # product that renamed onto /dev/stdout would replace the machine's link (QA F12).
    Case("batch-results-named-csv", _batch_text_name("results.csv"), EXIT_USAGE,
         r"-o results\.csv: the batch results are a Parquet file, not CSV text.*name it results\.parquet"),
    Case("batch-results-named-json-gz", _batch_text_name("out.JSON.gz"), EXIT_USAGE,
         r"-o out\.JSON\.gz: the batch results are a Parquet file, not JSON text.*name it out\.parquet"),
    Case("batch-results-named-parquet-txt", _batch_text_name("r.parquet.txt"), EXIT_USAGE,
         r"-o r\.parquet\.txt: the batch results are a Parquet file, not plain text.*name it r\.parquet \("),
    Case("batch-results-on-stdout-beside-summary", _batch_stdout("-o"), EXIT_USAGE,
         r"-o /dev/stdout is standard output, where the summary is printed too; pass -q", process=True, timeout=60),
    Case("batch-html-on-stdout-beside-summary", _batch_stdout("--html"), EXIT_USAGE,
         r"--html /dev/stdout is standard output, where the summary is printed too; pass -q", process=True, timeout=60),
    Case("check-json-on-stdout-beside-console", _unquiet_check("--json", "/dev/stdout"), EXIT_USAGE,
         r"--json /dev/stdout is standard output, where the console report is printed too; pass -q",
         process=True, timeout=60),
    Case("check-markdown-on-stdout-beside-json-format", _unquiet_check("--format", "json", "--markdown", "/dev/stdout"),
         EXIT_USAGE,
         r"--markdown /dev/stdout is standard output, where the json report is printed too; pass -q",
         process=True, timeout=60),
    # ... and one on stderr while progress and messages are printed there (no -q): the same policy.
    Case("check-markdown-on-stderr-beside-progress", _unquiet_check("--markdown", "/dev/stderr"), EXIT_USAGE,
         r"--markdown /dev/stderr is standard error, where progress and messages are printed too; pass -q",
         process=True, timeout=60),
    Case("check-output-on-stderr-beside-progress", _unquiet_check("--format", "json", "-o", "/dev/fd/2"), EXIT_USAGE,
         r"-o /dev/fd/2 is standard error, where progress and messages are printed too; pass -q",
         process=True, timeout=60),
    Case("batch-html-on-stderr-beside-progress", _batch_stdout("--html", "/dev/stderr"), EXIT_USAGE,
         r"--html /dev/stderr is standard error, where progress and messages are printed too; pass -q",
         process=True, timeout=60),
    Case("json-symlink-to-dev-null", _check_case("null.json", "/dev/null", "--json", "null.json"),
         EXIT_OK, None),
    Case("markdown-figure-folder-symlink", _markdown_folder_link, EXIT_ERROR,
         r"cannot write the files of --markdown r\.md into r_files: it is a symbolic link \(to keep\), and popaudit "
         r"never writes through a link it was not given"),
    Case("mitigate-sidecar-symlink", _mitigate_case("o.npy", "o.npy.popaudit.json", VICTIM), EXIT_ERROR,
         LINK.format(r"o\.npy\.popaudit\.json", r"victim\.txt")),
    Case("mitigate-output-symlink", _mitigate_case("o.npy", "o.npy", VICTIM), EXIT_ERROR,
         LINK.format(r"o\.npy", r"victim\.txt")),
    Case("batch-results-symlink", _batch_case("-o", "r.parquet"), EXIT_ERROR, LINK.format(r"r\.parquet", r"victim\.txt")),
    Case("batch-html-symlink", _batch_case("--html", "s.html"), EXIT_ERROR, LINK.format(r"s\.html", r"victim\.txt")),
    Case("json-fifo-no-reader", _fifo_output("--json"), EXIT_ERROR, NO_READER, process=True, timeout=60),
    Case("html-fifo-no-reader", _fifo_output("--html"), EXIT_ERROR, NO_READER, timeout=30),
    Case("markdown-fifo-no-reader", _fifo_output("--markdown"), EXIT_ERROR, NO_READER, timeout=30),
    Case("output-fifo-no-reader", _fifo_output("-o", "--format", "json"), EXIT_ERROR, NO_READER, timeout=30),
    Case("batch-journal-symlink-to-victim", _journal_planted("symlink"), EXIT_ERROR,
         LINK.format(r"\.r\.parquet\.journal", r"victim\.txt")),
    Case("batch-journal-fifo", _journal_planted("fifo"), EXIT_ERROR,
         r"cannot write \.r\.parquet\.journal \(the results journal\): something other than a regular file"
         r".*remove it or choose another output", process=True, timeout=60),
    Case("batch-html-fifo-no-reader", _fifo_output("--html", command="batch"), EXIT_ERROR, NO_READER, process=True,
         timeout=60),
    Case("retrain-dev-full", _full(["retrain", "--n-users", "20", "--n-items", "10", "--n-interactions", "100",
                                    "--epochs", "1", "-o", "/dev/full"]), EXIT_ERROR,
         r"cannot write /dev/full: the write failed \(.*\); is the disk full", skip=no_dev_full),
    Case("batch-results-dev-full", _full(["batch", "m.csv", "-o", "/dev/full", "--interactions", "log.parquet",
                                          *FAST]), EXIT_ERROR, r"cannot write /dev/full: .*No space left", skip=no_dev_full),
]


def _to_full_stdout(*args: str, diff: bool = False, outputs: tuple[str, ...] = ()) -> Any:
    """A command whose output goes to stdout, a file on a disk that fills up: the standard
    table and log (``check``), or two small reports (``diff``)."""

    def build(d: Path) -> Built:
        standard(d)
        for name, rho in (("base.json", 0.5), ("new.json", 0.7)):
            write(d, name, json.dumps({"schema_version": 1, "tool": {"name": "popaudit", "version": "0.1.0"},
                                       "inputs": {}, "frequency_norm": {"spearman": rho, "pearson_log": 0.4},
                                       "retrieval": None, "verdict": {"severity": "low"}}))
        return Built(["diff", "base.json", "new.json", *args] if diff else list(args), outputs=outputs)

    return build


STDOUT_FULL = r"^Error: cannot write stdout: File too large\n$"
"""A report on stdout cut short by a full disk (F2): one Error: line, exit 1."""

CASES += [
    # A report on stdout is the output asked for: a disk that fills up under `> audit.json`
    # is exit 1, never a cut report behind exit 0 or 3 (QA11 report F2).
    Case("stdout-full-check-json", _to_full_stdout(*check_args("items.npy", "--format", "json")), EXIT_ERROR,
         STDOUT_FULL, stdout_limit=2048, timeout=60),
    Case("stdout-full-check-markdown", _to_full_stdout(*check_args("items.npy", "--format", "markdown")), EXIT_ERROR,
         STDOUT_FULL, stdout_limit=1024, timeout=60),
    Case("stdout-full-check-console", _to_full_stdout("check", "items.npy", "--interactions", "log.parquet",
                                                      "--bootstrap", "0", "--no-probes"),
         EXIT_ERROR, r"^Error: cannot write stdout: File too large\n$", absent=r"Next:|Wrote", stdout_limit=512,
         timeout=60),
    Case("stdout-full-check-gate-tripped", _to_full_stdout(*check_args("items.npy", "--format", "json", "--fail-on",
                                                                       "severity_level>=0")),
         EXIT_ERROR, STDOUT_FULL, stdout_limit=2048, timeout=60),
    Case("stdout-full-diff-json", _to_full_stdout("--format", "json", diff=True), EXIT_ERROR, STDOUT_FULL,
         stdout_limit=512, timeout=60),
    Case("stdout-full-plugins-json", lambda d: Built(["plugins", "--json"]), EXIT_ERROR, STDOUT_FULL,
         stdout_limit=256, timeout=60),
    Case("stdout-full-plugins-table", lambda d: Built(["plugins"]), EXIT_ERROR, STDOUT_FULL, absent="OSError",
         stdout_limit=256, timeout=60),
]

READER_GONE = r"^stdout closed by its reader after 0 of \d+ bytes: the report was not read whole\n"
"""A reader that closed the pipe before the report (``| true``): said, not a failed run."""

CASES += [
    # A reader that closed the pipe chose to read no more: the gate still decides the exit
    # code (0 or 3) and its line is still printed (QA11 verification N2).
    Case("stdout-reader-gone-check-gate-tripped",
         _to_full_stdout(*check_args("items.npy", "--format", "json", "--fail-on", "severity_level>=0")),
         EXIT_GATE, None, stderr=READER_GONE + r"gate severity_level>=0: .*\(TRIPPED\)", stdout_gone="reader",
         timeout=60),
    Case("stdout-reader-gone-check-passes", _to_full_stdout(*check_args("items.npy", "--format", "json")),
         EXIT_OK, None, stderr=READER_GONE + "$", stdout_gone="reader", timeout=60),
    Case("stdout-reader-gone-plugins-json", lambda d: Built(["plugins", "--json"]), EXIT_OK, None,
         stderr=READER_GONE + "$", stdout_gone="reader", timeout=60),
    # Descriptor 1 closed (`>&-`, a daemon): no traceback; a run that writes nothing to
    # stdout succeeds, one that must is one Error: line (N3).
    Case("stdout-closed-check-report-to-file", _to_full_stdout(*check_args("items.npy", "--format", "json", "-o",
                                                                           "r.json"), outputs=("r.json",)),
         EXIT_OK, None, stderr=r"^$", stdout_gone="closed", timeout=60),
    Case("stdout-closed-check-json", _to_full_stdout(*check_args("items.npy", "--format", "json")), EXIT_ERROR,
         r"^Error: cannot write stdout: Bad file descriptor\n$", absent="Traceback", stdout_gone="closed", timeout=60),
    Case("stdout-closed-diff", _to_full_stdout(diff=True), EXIT_ERROR,
         r"^Error: cannot write stdout: Bad file descriptor\n$", absent="Traceback|OSError", stdout_gone="closed",
         timeout=60),
    Case("stdout-closed-diff-to-file", _to_full_stdout("-q", "-o", "d.md", diff=True, outputs=("d.md",)), EXIT_OK, None,
         stderr=r"^$", stdout_gone="closed", timeout=60),
    Case("stdout-closed-plugins", lambda d: Built(["plugins"]), EXIT_ERROR,
         r"^Error: cannot write stdout: Bad file descriptor\n$", absent="Traceback|OSError", stdout_gone="closed",
         timeout=60),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_output(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 15


def test_render_outputs_from_python_never_replaces_an_input(tmp_path: Path) -> None:
    """The library's ``render_outputs`` refuses the audit's own files as ``check`` does
    (QA Api F1): a Markdown report over the log, whose figures would go beside it, writes
    nothing and leaves the log and the table byte for byte."""
    import hashlib

    from auditor import AuditConfig, run_audit
    from auditor.errors import InputError
    from auditor.plugins import get_plugin_manager
    from auditor.plugins.renderers import render_outputs

    standard(tmp_path)
    files = sorted(tmp_path.iterdir())
    before = [hashlib.sha256(p.read_bytes()).hexdigest() for p in files]
    result = run_audit(AuditConfig(model=tmp_path / "items.npy", interactions=tmp_path / "log.parquet",
                                   bootstrap=0, probes=False))
    with pytest.raises(InputError, match=r"log\.parquet is the input file given as interactions"):
        render_outputs(result, [("markdown", tmp_path / "log.parquet")], get_plugin_manager())
    assert sorted(tmp_path.iterdir()) == files
    assert [hashlib.sha256(p.read_bytes()).hexdigest() for p in files] == before
