"""Hostile model formats from ``--plugin`` files (``popaudit_model_formats``): malformed
records, readers and writers that fail or return junk. Each is one ``Error:`` line naming
the plugin; no input changes and nothing half-written is left."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
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
         EXIT_ERROR, r"plugin 'file:fmt\.py', format 'toy': its reader \(read\) failed on items\.toy: ValueError: bad toy"),
    Case("plugin-format-reader-returns-junk", _check('ModelFormat("toy", "toy", (".toy",), read=read)',
                                                     "return 'a table'", "items.toy"),
         EXIT_ERROR, r"the reader of plugin 'file:fmt\.py''s format 'toy' returned str for .*items\.toy, not a ModelBundle"),
    Case("plugin-format-writer-raises", _mitigate("raise OSError('disk full')"), EXIT_ERROR,
         r"plugin 'file:fmt\.py', format 'toy': its writer \(write\) failed rescaling items\.toy: OSError: disk full"),
    Case("plugin-format-writer-returns-junk", _mitigate("return 42"), EXIT_ERROR,
         r"the writer of plugin 'file:fmt\.py''s format 'toy' returned int, not an auditor\.loading\.formats\.Written"),
]



# What a writer wrote is read back by the format's own reader and checked against the
# input as check reads it (rows, finite values, the rule, the norms it reports): a writer
# that writes something else is refused, naming the plugin, and nothing is renamed into
# place (no output, no sidecar claiming what was not written, no temp file).
NPY_FORMAT = '''
import numpy as np
from auditor.hookspecs import hookimpl
from auditor.model import ModelBundle
from auditor.plugin_api import ModelFormat, RowNorms, Written

def read(path, options):
    with open(path, "rb") as fh:
        return ModelBundle(source=path, format="toy", item_table=np.load(fh, allow_pickle=False))

def write_(job):
    with open(job.source, "rb") as fh:
        table = np.load(fh, allow_pickle=False).astype(np.float64)
    before = np.linalg.norm(table, axis=1)
    out = table * (before ** (job.alpha - 1))[:, None]
    after = np.linalg.norm(out, axis=1)
    {body}
    with open(job.target, "wb") as fh:
        np.save(fh, out.astype(np.float32))
    return Written(RowNorms(before, after), "float32")

@hookimpl
def popaudit_model_formats():
    return [ModelFormat("toy", "toy", (".toy",), read=read, write=write_)]
'''
WRITER = r"the writer of plugin 'file:fmt\.py''s format 'toy' "


def _npy_format(body: str, *extra: str, outputs: tuple[str, ...] = (), target: str = "o.toy") -> Any:
    """A .npy table under the plugin suffix .toy, mitigated into ``target`` by a writer that
    does ``body`` after computing the right rows (``out``) and norms (``before``, ``after``)."""

    def build(d: Path) -> Built:
        standard(d)
        buffer = io.BytesIO()
        np.save(buffer, np.load(d / "items.npy"))
        write(d, "items.toy", buffer.getvalue())
        write(d, "fmt.py", NPY_FORMAT.format(body=body))
        return Built(["mitigate", "items.toy", "--alpha", "0.5", "-o", target, "--plugin", "fmt.py", *extra],
                     outputs=outputs, must_exist=outputs)

    return build


CASES += [
    Case("plugin-writer-writes-fewer-rows", _npy_format("out = out[:-3]"), EXIT_ERROR,
         WRITER + r"wrote a 7 x 4 table, but check reads a 10 x 4 table from the model; nothing is written"),
    Case("plugin-writer-writes-a-nan-row", _npy_format("out[2] = np.nan"), EXIT_ERROR,
         WRITER + r"wrote a table check cannot read \(item table in o\.toy has 1 row with NaN or infinite values "
                  r"\(rows 2\)\); nothing is written"),
    Case("plugin-writer-writes-nothing", _npy_format("return Written(RowNorms(before, after), 'float32')"),
         EXIT_ERROR, WRITER + r"wrote nothing \(an empty file\); nothing is written"),
    Case("plugin-writer-returns-no-norms", _npy_format("return Written(None, 'float32')"), EXIT_ERROR,
         WRITER + r"returned a Written whose norms is NoneType, not an auditor\.plugin_api\.RowNorms"),
    Case("plugin-writer-returns-short-norms", _npy_format("return Written(RowNorms(before[:2], after), 'float32')"),
         EXIT_ERROR, WRITER + r"returned a Written whose norms\.before holds 2 rows but check reads 10"),
    Case("plugin-writer-reports-other-norms", _npy_format("after = after * 2"), EXIT_ERROR,
         WRITER + r"wrote row 0 with norm [0-9.]+ after the rescaling, but reports [0-9.]+ \(the sidecar would "
                  r"record norms that were not written\); nothing is written"),
    Case("plugin-writer-writes-the-input-unscaled", _npy_format("out = table"), EXIT_ERROR,
         WRITER + r"wrote row 0 as \[.*\], not the rule's k\*\|k\|\^\(alpha-1\) = \[.*\] \(10 such rows"),
    Case("plugin-writer-os-exit-0", _npy_format("__import__('os')._exit(0)"), EXIT_ERROR,
         r"mitigate with plugins ended without finishing \(exit status 0\): plugin code ended the process "
         r"\(os\._exit, a signal, a crash in native code\); nothing is written", timeout=60),
    # The folders made for OUT go too: a refused run leaves no trace.
    Case("plugin-writer-os-exit-into-new-folders", _npy_format("__import__('os')._exit(0)", target="new/sub/o.toy"),
         EXIT_ERROR, r"plugin code ended the process .*; nothing is written", timeout=60),
    Case("plugin-writer-sleeps-past-timeout", _npy_format("__import__('time').sleep(600)", "--plugin-timeout", "3"),
         EXIT_ERROR, r"mitigate with plugins did not finish within 3 s \(the plugin time limit\) and was stopped; "
                     r"nothing is written", timeout=60),
    Case("plugin-writer-stores-float16", _npy_format("out = out.astype(np.float16)\n    "
                                                     "after = np.linalg.norm(out.astype(np.float64), axis=1)",
                                                     outputs=("o.toy", "o.toy.popaudit.json")), 0, None),
]


# Plugins QA F10: a writer's claims about what it wrote are not recorded as fact: the
# sidecar has the dtype read back and the rows layout check reads, the claims in warnings.
def _claims_recorded_as_read(d: Path, outcome: Any) -> None:
    import json

    side = json.loads((d / "o.toy.popaudit.json").read_text())
    assert (side["dtype"], side["layout"]) == ("float32", "rows"), side
    assert any("reported dtype 'bfloat16'" in w for w in side["warnings"]), side["warnings"]


def _lying_writer(d: Path) -> Built:
    built = _npy_format("with open(job.target, 'wb') as fh:\n        np.save(fh, out.astype(np.float32))\n    "
                        "return Written(RowNorms(before, after), 'bfloat16', layout='columns')",
                        outputs=("o.toy", "o.toy.popaudit.json"))(d)
    return Built(built.args, outputs=built.outputs, must_exist=built.must_exist, check=_claims_recorded_as_read)


CASES += [
    Case("plugin-writer-claims-another-dtype-and-layout", _lying_writer, 0, None),
]


@pytest.mark.parametrize("case", params(CASES))
def test_plugin_formats(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
