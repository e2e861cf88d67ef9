"""What the command line's cheap paths load: an error before any work imports neither
numpy nor torch nor the plugin manager (issue 25: error paths in a blink)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def test_missing_model_error_loads_no_numpy_torch_or_plugins(tmp_path: Path) -> None:
    script = (
        "import sys\n"
        "from auditor.cli import main\n"
        f"sys.argv = ['popaudit', 'check', {str(tmp_path / 'missing.pt')!r}]\n"
        "try:\n"
        "    main()\n"
        "except SystemExit as e:\n"
        "    code = e.code\n"
        "heavy = sorted(m for m in ('numpy', 'torch', 'pyarrow', 'scipy', 'auditor.plugins.manager') if m in sys.modules)\n"
        "print('EXIT', code, 'HEAVY', heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert "EXIT 1 HEAVY []" in out.stdout, out.stdout + out.stderr[-2000:]
    assert "Error: model file not found" in out.stderr
