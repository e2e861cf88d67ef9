"""Hostile output paths: symlinks planted where a report or a sidecar goes, a symlinked
figure folder, FIFOs nobody reads, a full device. An output replaces a link (never what
it points at), figures never go through a link, a FIFO without a reader is refused
instead of hanging, and a failed write is one Error: line (issue #23, items 5, 7, 8)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from .corpus import (
    EXIT_ERROR,
    EXIT_OK,
    FAST,
    Built,
    Case,
    Outcome,
    check_args,
    fifo,
    no_dev_full,
    params,
    run_case,
    standard,
    strict_json,
    symlink,
    write,
)

VICTIM = "victim.txt"
SECRET = "precious content that must survive\n"


def _victim(d: Path) -> None:
    write(d, VICTIM, SECRET)
    (d / "keep").mkdir()
    write(d, "keep/inside.txt", SECRET)


def _replaced(link: str, kind: str = "json") -> Any:
    """``link`` is now a regular file holding the report; the victim is untouched (the
    corpus checks every other file byte for byte)."""

    def check(d: Path, outcome: Outcome) -> None:
        path = d / link
        assert path.is_file() and not path.is_symlink(), f"{link} is still a link"
        if kind == "json":
            assert strict_json(path)["schema_version"] == 1
        elif kind == "parquet":
            assert pq.read_table(path).num_rows == 1
        else:
            assert path.stat().st_size > 0

    return check


def _check_case(link: str, target: str, *extra: str, kind: str = "json", replaced: bool = True) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        symlink(d, link, target)
        figures = ("r_files", "r_files/*") if kind == "md" else ()
        return Built(check_args("items.npy", *extra), outputs=((link,) if replaced else ()) + figures,
                     replaced=(link,) if replaced else (), check=_replaced(link, kind) if replaced else None)

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
        files = {out, f"{out}.popaudit.json"}
        return Built(["mitigate", "items.npy", "--alpha", "0.5", "-o", out], outputs=tuple(files),
                     replaced=(link,), check=_replaced(link, "bytes"))

    return build


def _batch_case(flag: str, link: str, kind: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        _victim(d)
        write(d, "m.csv", "model\nitems.npy\n")
        symlink(d, link, VICTIM)
        args = ["batch", "m.csv", "--interactions", "log.parquet", *FAST]
        args += ["-o", link] if flag == "-o" else ["-o", "r.parquet", flag, link]
        return Built(args, outputs=("r.parquet", link), replaced=(link,), check=_replaced(link, kind))

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
        if kind == "symlink":  # replaced by the journal, then removed with it: the victim stays
            return Built(args, outputs=("r.parquet",), replaced=(JOURNAL,), must_exist=("r.parquet",),
                         check=lambda folder, _: None if not (folder / JOURNAL).exists() else pytest.fail("journal left"))
        return Built(args, outputs=("r.parquet",))

    return build


JOURNAL = ".r.parquet.journal"
NO_READER = r"cannot write pipe: it is a FIFO \(named pipe\) that no process is reading"
CASES = [
    Case("json-symlink-to-victim", _check_case("r.json", VICTIM, "--json", "r.json"), EXIT_OK, None),
    Case("output-symlink-to-victim", _check_case("r.txt", VICTIM, "-o", "r.txt", kind="text"), EXIT_OK, None),
    Case("html-symlink-to-victim", _check_case("r.html", VICTIM, "--html", "r.html", kind="html"), EXIT_OK, None),
    Case("markdown-symlink-to-victim", _check_case("r.md", VICTIM, "--markdown", "r.md", kind="md"), EXIT_OK, None),
    Case("json-symlink-into-folder", _check_case("r.json", "keep/inside.txt", "--json", "r.json"), EXIT_OK, None),
    Case("json-dangling-symlink", _check_case("r.json", "nowhere/created.txt", "--json", "r.json"), EXIT_OK, None),
    Case("json-symlink-to-dev-null", _check_case("null.json", "/dev/null", "--json", "null.json", replaced=False),
         EXIT_OK, None),
    Case("markdown-figure-folder-symlink", _markdown_folder_link, EXIT_ERROR,
         r"cannot write the files of --markdown r\.md into r_files: it is a symbolic link \(to keep\), and popaudit "
         r"never writes through a link it was not given"),
    Case("mitigate-sidecar-symlink", _mitigate_case("o.npy", "o.npy.popaudit.json", VICTIM), EXIT_OK, None),
    Case("mitigate-output-symlink", _mitigate_case("o.npy", "o.npy", VICTIM), EXIT_OK, None),
    Case("batch-results-symlink", _batch_case("-o", "r.parquet", "parquet"), EXIT_OK, None),
    Case("batch-html-symlink", _batch_case("--html", "s.html", "html"), EXIT_OK, None),
    Case("json-fifo-no-reader", _fifo_output("--json"), EXIT_ERROR, NO_READER, process=True, timeout=60),
    Case("html-fifo-no-reader", _fifo_output("--html"), EXIT_ERROR, NO_READER, timeout=30),
    Case("markdown-fifo-no-reader", _fifo_output("--markdown"), EXIT_ERROR, NO_READER, timeout=30),
    Case("output-fifo-no-reader", _fifo_output("-o", "--format", "json"), EXIT_ERROR, NO_READER, timeout=30),
    Case("batch-journal-symlink-to-victim", _journal_planted("symlink"), EXIT_OK, None),
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

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_output(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 15
