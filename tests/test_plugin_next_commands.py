"""Commands popaudit prints for plugin models run as printed (plugins QA F4, F6).

F4: check's advice quoted `popaudit mitigate` for a model a plugin's loader built (a
custom tower), which mitigate refuses; it now says what does work. F6: mitigate's `Next:`
line for an output in a plugin's format carries `--plugin`, without which check cannot
read it.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from click.testing import CliRunner

from auditor.cli import cli
from auditor.loading.formats import BUILTIN_FORMATS, written_back
from auditor.plugin_api import ModelFormat

_TOWER_PLUGIN = '''
from pathlib import Path
import numpy as np
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle

@hookimpl
def popaudit_load_model(path, options):
    if Path(path).suffix != ".tower":
        return None
    data = np.load(path)
    return ModelBundle(source=Path(path), format="custom_tower", item_table=data["items"], item_key="encoder",
                       user_table=data["users"], user_key="users")
'''


def _model(folder: Path) -> None:
    """Item vectors whose norms grow with popularity, users who like popular items, a log
    and a holdout drawn from the same taste (norm-aware serving then lowers the head)."""
    rng = np.random.default_rng(3)
    n_items, dim, n_users = 300, 8, 150
    popularity = 1.0 / np.arange(1, n_items + 1) ** 0.9
    rows = rng.normal(size=(n_items, dim))
    rows *= (0.5 + 20.0 * popularity / np.linalg.norm(rows, axis=1))[:, None]
    taste = rng.normal(size=(n_users, dim))
    with open(folder / "m.tower", "wb") as f:
        np.savez(f, items=rows.astype(np.float32), users=taste.astype(np.float32))
    weights = np.exp(taste @ rows.T / 2) * popularity
    weights /= weights.sum(axis=1, keepdims=True)
    picks = np.stack([rng.choice(n_items, size=8, replace=False, p=w) for w in weights])
    users = np.repeat(np.arange(n_users), 6)
    pq.write_table(pa.table({"user_id": users, "item_id": picks[:, :6].ravel()}), folder / "train.parquet")
    held = np.repeat(np.arange(n_users), 2)
    pq.write_table(pa.table({"user_id": held, "item_id": picks[:, 6:].ravel()}), folder / "test.parquet")
    (folder / "tower.py").write_text(_TOWER_PLUGIN)


def _check(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(cli, ["check", *args, "--no-probes", "-q", "--json", "r.json"])
    assert result.exit_code == 0, result.output
    report: dict[str, Any] = json.loads(Path("r.json").read_text())
    return report


def test_which_models_mitigate_writes_back() -> None:
    assert written_back(BUILTIN_FORMATS, "npy") and written_back(BUILTIN_FORMATS, "state_dict")
    assert written_back(BUILTIN_FORMATS, "recbole") and written_back(BUILTIN_FORMATS, "safetensors")
    assert not written_back(BUILTIN_FORMATS, "custom_tower")  # a plugin loader's model
    assert not written_back(BUILTIN_FORMATS, "onnx") and not written_back(BUILTIN_FORMATS, "keras")
    plugin = ModelFormat("qae", ".qae table", (".qae",), write=lambda job: None)  # type: ignore[arg-type,return-value]
    assert written_back([plugin, *BUILTIN_FORMATS], "qae")
    assert not written_back([ModelFormat("qae", ".qae table", (".qae",)), *BUILTIN_FORMATS], "qae")


def test_advice_for_a_plugin_tower_quotes_no_mitigate_command(tmp_path: Path, monkeypatch: Any) -> None:
    _model(tmp_path)
    monkeypatch.chdir(tmp_path)
    report = _check("m.tower", "--plugin", "tower.py", "--interactions", "train.parquet", "--holdout", "test.parquet",
                    "--accuracy-tolerance", "0.01")
    assert report["inputs"]["written_back"] is False
    assert report["accuracy"]["recommended"] not in (None, "dot")  # a rescaling is recommended...
    advice = " ".join(report["verdict"]["recommendations"])
    assert "`popaudit mitigate" not in advice  # ...but no command that mitigate refuses
    assert "does not write back a 'custom_tower' model" in advice and "export the served item vectors" in advice


def test_mitigate_next_line_for_a_plugin_format_runs_as_printed(tmp_path: Path, monkeypatch: Any) -> None:
    from test_plugins_formats import toy_log, toy_plugin, toy_table, write_toy

    monkeypatch.chdir(tmp_path)
    toy_plugin(tmp_path), toy_log(tmp_path), write_toy(tmp_path / "items.toy", toy_table())
    done = CliRunner().invoke(cli, ["mitigate", "items.toy", "--alpha", "0.5", "-o", "out.toy", "--interactions",
                                    "log.parquet", "--plugin", "toy_format.py"])
    assert done.exit_code == 0, done.output
    (line,) = [x for x in done.output.splitlines() if x.startswith("Next: ")]
    words = shlex.split(line.removeprefix("Next: "))
    assert words[:3] == ["popaudit", "check", "out.toy"] and "--plugin" in words  # F6: it was missing
    checked = CliRunner().invoke(cli, [*words[1:], "--no-probes", "-q", "--json", "r.json"])
    assert checked.exit_code == 0, checked.output
    assert json.loads(Path("r.json").read_text())["inputs"]["format"] == "toy"
