"""The mitigate sidecar records what a plugin writer's output reads back as, not what the
writer claims (plugins QA F10: bfloat16/columns recorded for a float32 row table)."""

from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from auditor.cli import cli
from auditor.mitigation.sidecar import sidecar_path
from test_plugins_formats import toy_plugin, toy_table, write_toy

LIAR = '''
def write_lie(job):
    told = write(job)
    return Written(told.norms, "bfloat16", layout="columns", notes=told.notes)
'''


def test_sidecar_records_the_read_back_dtype_and_layout(tmp_path: Path) -> None:
    plugin = toy_plugin(tmp_path, write="write_lie", extra=LIAR)
    model = write_toy(tmp_path / "items.toy", toy_table())
    done = CliRunner().invoke(cli, ["mitigate", str(model), "--alpha", "0.5", "-o", str(tmp_path / "out.toy"),
                                    "--plugin", str(plugin), "-q"])
    assert done.exit_code == 0, done.output
    side = json.loads(sidecar_path(tmp_path / "out.toy").read_text())
    assert side["dtype"] == "float32" and side["layout"] == "rows"  # the toy format stores float32 rows
    assert any("reported dtype 'bfloat16', but the table reads back as float32" in w for w in side["warnings"])
    assert any("reported layout 'columns'" in w for w in side["warnings"])
    honest = toy_plugin(tmp_path)  # the truthful writer: nothing to say
    done = CliRunner().invoke(cli, ["mitigate", str(model), "--alpha", "0.5", "-o", str(tmp_path / "ok.toy"),
                                    "--plugin", str(honest), "-q"])
    assert done.exit_code == 0, done.output
    side = json.loads(sidecar_path(tmp_path / "ok.toy").read_text())
    assert side["dtype"] == "float32" and not any("reported" in w for w in side["warnings"])
