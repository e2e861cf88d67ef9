"""A plugin loader that does not record the pickle globals (``ModelBundle.replaced_globals``
None: not recorded, plugins/README.md): the report says so under ``not_measured`` and the
``unsafe_globals`` gate fails (exit 1) with that reason, naming the plugin, never a false
``--trust-pickle`` (QA plugins F2)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from auditor.cli import cli
from auditor.gate_reasons import why_unmeasured

LOADER = '''
from pathlib import Path
import numpy as np
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle

@hookimpl
def popaudit_load_model(path, options):
    if Path(path).suffix != ".qat":
        return None
    return ModelBundle(source=Path(path), format="qa_table", item_table=np.load(str(path) + ".npy"))
'''


@pytest.fixture()
def model(tmp_path: Path) -> Path:
    (tmp_path / "loader.py").write_text(LOADER)
    path = tmp_path / "m.qat"
    path.write_bytes(b"qa")
    rng = np.random.default_rng(0)
    np.save(tmp_path / "m.qat.npy", rng.normal(size=(30, 4)).astype(np.float32))
    return path


def test_an_unrecorded_plugin_loader_is_named_in_the_gate_reason(model: Path) -> None:
    plugin = model.parent / "loader.py"
    result = CliRunner().invoke(cli, ["check", str(model), "--plugin", str(plugin), "--no-retrieval", "--no-probes",
                                      "--bootstrap", "0", "-q", "--json", str(model.parent / "r.json"),
                                      "--fail-on", "unsafe_globals>0"])
    assert result.exit_code == 1, result.output
    error = result.stderr
    assert "cannot evaluate --fail-on unsafe_globals>0" in error and "--trust-pickle" not in error
    assert "plugin 'file:" in error and "loader.py" in error and "does not record the globals" in error


def test_the_reason_of_an_older_report_and_of_a_full_unpickle() -> None:
    # A report without the recorded reason (written before it was): the one case the built-in loader left.
    assert "unpickled in full" in why_unmeasured("unsafe_globals", {"replaced_globals": None, "not_measured": {}})
    said = {"replaced_globals": None, "not_measured": {"replaced_globals": "the model ('x') was read by plugin 'p'"}}
    assert why_unmeasured("unsafe_globals", said) == "the model ('x') was read by plugin 'p'"
