"""Hostile model formats from ``--plugin`` files (``popaudit_model_formats``): malformed
records, readers and writers that fail or return junk. Each is one ``Error:`` line naming
the plugin; no input changes and nothing half-written is left."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from .corpus import EXIT_ERROR, Built, Case, check_args, params, run_case, standard, write

FORMAT = '''
from auditor.hookspecs import hookimpl
from auditor.plugin_api import ModelFormat

def read(path, options):
    {read}

def write_(job):
    {write}

@hookimpl
def popaudit_model_formats():
    return [{record}]
'''


def _plugin(record: str, read: str = "return None", write_: str = "return None") -> str:
    return FORMAT.format(record=record, read=read, write=write_)


def _check(record: str, read: str = "return None", model: str = "items.npy") -> Any:
    def build(d: Path) -> Built:
        standard(d)
        write(d, "items.toy", b"TOY1 not a table")
        write(d, "fmt.py", _plugin(record, read))
        return Built(check_args(model, "--plugin", "fmt.py"))

    return build


def _mitigate(write_: str) -> Any:
    def build(d: Path) -> Built:
        standard(d)
        write(d, "fmt.py", _plugin('ModelFormat("toy", "toy", (".toy",), read=read, write=write_)',
                                   "import numpy as np; from auditor.model import ModelBundle\n    "
                                   "return ModelBundle(source=path, format='toy', item_table=np.ones((3, 2), 'f4'))",
                                   write_))
        write(d, "items.toy", b"TOY1")
        return Built(["mitigate", "items.toy", "--alpha", "0.5", "-o", "o.toy", "--plugin", "fmt.py"])

    return build


CASES = [
    Case("plugin-format-takes-a-builtin-name", _check('ModelFormat("npy", "mine", (".mine",), read=read)'),
         EXIT_ERROR, r"two model formats are named 'npy': one from popaudit \(built-in\), one from plugin 'file:fmt\.py'"),
    Case("plugin-format-without-reader", _check('ModelFormat("toy", "toy", (".toy",))'), EXIT_ERROR,
         r"plugin 'file:fmt\.py' returned .* from hook popaudit_model_formats: it has no reader \(read\)"),
    Case("plugin-format-claims-nothing", _check('ModelFormat("toy", "toy", read=read)'), EXIT_ERROR,
         r"nothing tells its files apart: give suffixes, magic bytes or a sniff"),
    Case("plugin-format-reader-raises", _check('ModelFormat("toy", "toy", (".toy",), read=read)',
                                               "raise ValueError('bad toy')", "items.toy"),
         EXIT_ERROR, r"plugin 'file:fmt\.py' failed in hook popaudit_model_formats: ValueError: bad toy"),
    Case("plugin-format-reader-returns-junk", _check('ModelFormat("toy", "toy", (".toy",), read=read)',
                                                     "return 'a table'", "items.toy"),
         EXIT_ERROR, r"the reader of plugin 'file:fmt\.py''s format 'toy' returned str for .*items\.toy, not a ModelBundle"),
    Case("plugin-format-writer-raises", _mitigate("raise OSError('disk full')"), EXIT_ERROR,
         r"plugin 'file:fmt\.py' failed in hook popaudit_model_formats: OSError: disk full"),
    Case("plugin-format-writer-returns-junk", _mitigate("return 42"), EXIT_ERROR,
         r"the writer of plugin 'file:fmt\.py''s format 'toy' returned int, not an auditor\.loading\.formats\.Written"),
]


@pytest.mark.parametrize("case", params(CASES))
def test_plugin_formats(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
