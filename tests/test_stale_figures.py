"""A Markdown report written again into the same path leaves no figure of the earlier run
beside it (QA F6): popaudit's own figure files that this run does not draw are removed
once its files are in place; anything else in the folder is left alone."""

from __future__ import annotations

import os
from pathlib import Path

from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import render_outputs, stale_figures, write_all
from auditor.report.figures import FIGURE_NAMES
from report_samples import bare_result, full_result


def test_a_second_run_with_fewer_figures_removes_the_earlier_ones(tmp_path: Path) -> None:
    pm = get_plugin_manager(())
    folder = tmp_path / "r_files"
    folder.mkdir()
    for name in FIGURE_NAMES:  # a full earlier run, every figure
        (folder / f"{name}.png").write_bytes(b"old")
    (folder / "notes.txt").write_text("mine")  # not popaudit's: kept
    (folder / "training.png").unlink()
    os.symlink(tmp_path / "elsewhere.png", folder / "training.png")  # a link: never removed or followed
    written = render_outputs(full_result(), [("markdown", tmp_path / "r.md")], pm)
    drawn = {p.name for p in written if p.parent == folder}
    assert drawn and drawn < {f"{name}.png" for name in FIGURE_NAMES}
    left = {p.name for p in folder.iterdir()}
    assert left == drawn | {"notes.txt", "training.png"}
    assert all((folder / name).read_bytes() != b"old" for name in drawn)
    # bare: no figure at all; every earlier one goes
    render_outputs(bare_result(), [("markdown", tmp_path / "r.md")], pm)
    assert {p.name for p in folder.iterdir()} == {"notes.txt", "training.png"}

def test_stale_figures_are_only_popaudits_names_beside_markdown_reports(tmp_path: Path) -> None:
    folder = tmp_path / "r_files"
    folder.mkdir()
    for name in ("head_share", "tradeoff", "norm_by_decile"):
        (folder / f"{name}.png").write_bytes(b"old")
    (folder / "other.png").write_bytes(b"user")
    files = {tmp_path / "r.md": b"# r", folder / "norm_by_decile.png": b"new"}
    assert sorted(p.name for p in stale_figures([("markdown", tmp_path / "r.md")], files)) == [
        "head_share.png", "tradeoff.png"]
    assert stale_figures([("json", tmp_path / "r.md"), ("markdown", None)], files) == []
    write_all(files, remove=stale_figures([("markdown", tmp_path / "r.md")], files))
    assert sorted(p.name for p in folder.iterdir()) == ["norm_by_decile.png", "other.png"]
    assert (folder / "norm_by_decile.png").read_bytes() == b"new"
