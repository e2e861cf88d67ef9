"""docs/diff.md's worked example is what the commands it shows print: the Markdown block,
the gate lines on stderr, and the counts its prose quotes (the prose said 93 figures
towards less bias where the example's lead said 94)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.wording import BETTER_WORDS, WORSE_WORDS

ROOT = Path(__file__).resolve().parent.parent
DOC = (ROOT / "docs" / "diff.md").read_text(encoding="utf-8")
_EXAMPLE = DOC.split("### Worked example", 1)[1]
_FENCE_END = _EXAMPLE.index("````", _EXAMPLE.index("````markdown") + 1)
SECTION = _EXAMPLE[:_EXAMPLE.find("\n## ", _FENCE_END)]
"""The worked example up to the next section (the headings inside its Markdown block skipped)."""


def example_markdown() -> str:
    """The ````markdown block of the worked example."""
    match = re.search(r"````markdown\n(.*?)````", SECTION, re.S)
    assert match, "docs/diff.md's worked example has no ````markdown block"
    return match.group(1)


def example_commands() -> list[list[str]]:
    """The worked example's bash block, one argument list per command (continuations joined)."""
    match = re.search(r"```bash\n(.*?)```", SECTION, re.S)
    assert match, "docs/diff.md's worked example has no bash block"
    lines = match.group(1).replace("\\\n", " ").splitlines()
    return [shlex.split(line) for line in lines if line.strip()]


def test_the_prose_quotes_the_counts_of_the_example() -> None:
    lead = example_markdown().split("\n\n")[1]
    counts = {words: int(n) for n, words in re.findall(r"(\d+) ([a-z]+ [a-z]+)", lead)}
    prose = re.search(r"\((\d+) figures better, (\d+)\s+worse\)", SECTION)
    assert counts and prose, "the example's lead or the prose's figure counts are missing"
    better, worse = (sum(counts.get(w, 0) for w in words) for words in (BETTER_WORDS, WORSE_WORDS))
    assert prose.groups() == (str(better), str(worse))
    shown_worse = re.search(r"### Worse \((\d+) figures\)", example_markdown())
    shown_better = re.search(r"### Better \((\d+) figures\)", example_markdown())
    assert shown_worse and shown_better and (int(shown_better.group(1)), int(shown_worse.group(1))) == (better, worse)


def test_the_worked_example_is_what_its_commands_print(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the example's commands as written (sample_data/ read from the repository; about 2 s)."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data")
    commands = example_commands()
    assert [c[:2] for c in commands] == [["popaudit", "mitigate"], ["popaudit", "check"], ["popaudit", "check"],
                                         ["popaudit", "diff"]]
    for command in commands[:-1]:
        ran = CliRunner().invoke(cli, command[1:], catch_exceptions=False)
        assert ran.exit_code == 0, ran.output
    ran = CliRunner().invoke(cli, commands[-1][1:], catch_exceptions=False)
    prints = re.search(r"prints \(exit (\d+); stderr: (.*?)\):", SECTION, re.S)
    assert prints, "the example does not say what the diff exits with and prints on stderr"
    assert ran.exit_code == int(prints.group(1)), ran.output
    for line in re.findall(r"`([^`]+)`", prints.group(2)):
        assert line in ran.stderr.splitlines()
    assert ran.stdout == example_markdown()
