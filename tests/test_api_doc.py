"""docs/api.md cannot rot: its Python examples run, in order, on the bundled sample, and
each prints exactly the output the page shows after it."""

from __future__ import annotations

import contextlib
import io
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOC = ROOT / "docs" / "api.md"
BLOCK = re.compile(r"^```(python|text)\n(.*?)^```$", re.S | re.M)


def examples() -> list[tuple[str, str | None]]:
    """(code, the output shown after it, or None when the page shows none)."""
    blocks = BLOCK.findall(DOC.read_text(encoding="utf-8"))
    pairs: list[tuple[str, str | None]] = []
    for kind, body in blocks:
        if kind == "python":
            pairs.append((body, None))
        else:
            assert pairs and pairs[-1][1] is None, "an output block must follow a python block"
            pairs[-1] = (pairs[-1][0], body)
    return pairs


def test_the_page_has_examples_with_outputs() -> None:
    pairs = examples()
    assert len(pairs) >= 5 and sum(out is not None for _, out in pairs) >= 4
    assert "from auditor import AuditConfig, AuditResult, run_audit" in pairs[0][0]


def test_every_example_runs_and_prints_what_the_page_shows(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sample_data").symlink_to(ROOT / "sample_data", target_is_directory=True)
    monkeypatch.chdir(tmp_path)  # the page's paths are relative to the repository root
    namespace: dict[str, object] = {"__name__": "api_doc"}
    for number, (code, shown) in enumerate(examples(), 1):
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            exec(compile(code, f"docs/api.md example {number}", "exec"), namespace)  # noqa: S102 - the doc's own code
        assert printed.getvalue() == (shown or ""), f"example {number} printed:\n{printed.getvalue()}"
    assert (tmp_path / "report.html").stat().st_size > 10_000
    assert sorted(os.listdir(tmp_path)) == ["report.html", "report.json", "sample_data"]


def test_the_readme_example_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    (code,) = [body for kind, body in BLOCK.findall((ROOT / "README.md").read_text(encoding="utf-8"))
               if kind == "python" and "run_audit" in body]
    monkeypatch.chdir(ROOT)  # it reads only the sample and writes nothing
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        exec(compile(code, "README.md example", "exec"), {"__name__": "readme"})  # noqa: S102 - the README's own code
    severity, ratio = printed.getvalue().split()
    assert severity == "moderate" and float(ratio) == pytest.approx(82.6667, abs=1e-4)


def test_the_examples_pass_mypy_strict_as_a_users_script(tmp_path: Path) -> None:
    """QA Api F7: a user's script made of the page's examples type-checks under ``mypy
    --strict`` against the shipped package (found through MYPYPATH, as a compat editable
    install finds it): Optional sections are narrowed and ``render``'s str | bytes too."""
    import subprocess
    import sys

    pytest.importorskip("mypy")
    script = tmp_path / "api_doc_examples.py"
    script.write_text("\n".join(code for code, _shown in examples()), encoding="utf-8")
    (tmp_path / "mypy.ini").write_text("[mypy]\n", encoding="utf-8")  # a user's settings, not the project's
    ran = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--config-file", str(tmp_path / "mypy.ini"),
         "--cache-dir", str(ROOT / ".mypy_cache" / "api_doc"), str(script)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "MYPYPATH": str(ROOT)}, timeout=600,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
