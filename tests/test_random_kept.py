"""QA13 diffapi F3: the first report rendered in a process (``render_outputs(..., "json")``)
moved Python's global ``random`` state: every format registers the console renderer, whose
first import of rich draws ``random.getrandbits(24)`` (``rich/style.py``). A library call leaves
it as found (auditor.environment.import_rich, in auditor.report before any walker)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

RENDER = """
import json, random, sys
random.seed(1)  # before any of popaudit is imported: the audit and the render, cold, draw nothing
imported_before = "rich.style" in sys.modules
from pathlib import Path
from auditor import AuditConfig, run_audit
from auditor.plugins import get_plugin_manager
from auditor.plugins.renderers import render_outputs
result = run_audit(AuditConfig(model=Path("sample_data/biased.pt"), interactions=Path("sample_data/interactions.parquet"),
                               ks=(10,), bootstrap=0, probes=False))
render_outputs(result, [("json", Path(sys.argv[1]))], get_plugin_manager())
print(json.dumps({"draw": random.random(), "imported_before": imported_before, "imported": "rich.style" in sys.modules}))
"""

IMPORT = """
import json, random, sys
random.seed(1)
import auditor.report.console
print(json.dumps({"draw": random.random(), "imported": "rich.style" in sys.modules}))
"""


def _run(code: str, *args: str) -> dict[str, object]:
    done = subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=300, check=True)
    return dict(json.loads(done.stdout.strip().splitlines()[-1]))


def unmoved() -> float:
    """The first draw after seed 1 with nothing between (0.134364...)."""
    return random.Random(1).random()


def test_the_first_json_render_leaves_the_global_random_state_as_found(tmp_path: Path) -> None:
    seen = _run(RENDER, str(tmp_path / "report.json"))
    assert seen == {"draw": unmoved(), "imported_before": False, "imported": True}  # was 0.569204 (rich's draw)
    assert abs(unmoved() - 0.13436424411240122) < 1e-15


def test_importing_a_walker_that_brings_rich_leaves_it_as_found() -> None:
    assert _run(IMPORT) == {"draw": unmoved(), "imported": True}
