"""A plugin writer's output read back and checked against the input (auditor/mitigation/verify.py),
on a hand-computed table: rows [3, 4], [0, 0], [1, 0] at alpha 0.5 must become
[3, 4] * 5^-0.5, [0, 0] and [1, 0], norms 5 -> sqrt(5), 0 -> 0, 1 -> 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from auditor.config import LoadOptions
from auditor.errors import PluginError
from auditor.mitigation.verify import verify_written
from auditor.model import ModelBundle
from auditor.plugin_api import ModelFormat, RowNorms
from auditor.plugins import get_plugin_manager

SOURCE = np.array([[3.0, 4.0], [0.0, 0.0], [1.0, 0.0]], dtype=np.float32)
RULE = np.array([[3.0 / 5**0.5, 4.0 / 5**0.5], [0.0, 0.0], [1.0, 0.0]])
BEFORE = np.array([5.0, 0.0, 1.0])


def test_the_message_names_the_format_without_an_owner(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"^the writer of format 'toy' wrote a 3 x 1 table"):
        _verify(tmp_path, RULE[:, :1])


def _verify(tmp_path: Path, written: np.ndarray, after: np.ndarray | None = None) -> None:
    path = tmp_path / "out.tmp"
    path.write_bytes(b"rows")
    fmt = ModelFormat("toy", "toy", (".toy",),
                      read=lambda p, o: ModelBundle(source=p, format="toy", item_table=written.astype(np.float32)))
    source = ModelBundle(source=tmp_path / "in.toy", format="toy", item_table=SOURCE.copy())
    claimed = np.linalg.norm(written, axis=1) if after is None else after
    verify_written(get_plugin_manager(), fmt, path, source, 0.5, RowNorms(BEFORE, claimed), LoadOptions(),
                   tmp_path / "o.toy")


def test_the_rule_within_a_narrow_dtype_passes(tmp_path: Path) -> None:
    _verify(tmp_path, RULE)
    _verify(tmp_path, RULE.astype(np.float16).astype(np.float64))  # float16 rounding: 2^-11 of a norm
    nudged = RULE.copy()
    nudged[0] *= 1.005  # 0.5% of its norm: within the 1% a bfloat16 table may round by
    _verify(tmp_path, nudged)


@pytest.mark.parametrize(("change", "said"), [
    (lambda t: t * np.array([[1.02], [1.0], [1.0]]), r"wrote row 0 as \[1\.368, 1\.825\], not the rule's "
                                                     r"k\*\|k\|\^\(alpha-1\) = \[1\.342, 1\.789\] \(1 such rows"),
    (lambda t: t + np.array([[0.0, 0.0], [1e-3, 0.0], [0.0, 0.0]]), r"wrote row 1 as \[0\.001, 0\], not the rule's"),
    (lambda t: SOURCE.astype(np.float64), r"wrote row 0 as \[3, 4\], not the rule's .* \(1 such rows"),
    (lambda t: t[:, :1], r"wrote a 3 x 1 table, but check reads a 3 x 2 table"),
    (lambda t: np.where(np.arange(3)[:, None] == 2, np.inf, t), r"cannot read \(item table in .*o\.toy has 1 row with "
                                                                 r"NaN or infinite values \(rows 2\)\)"),
])
def test_another_table_is_refused(tmp_path: Path, change: object, said: str) -> None:
    with pytest.raises(PluginError, match=said):
        _verify(tmp_path, change(RULE.copy()))  # type: ignore[operator]


def test_norms_the_writer_did_not_write_are_refused(tmp_path: Path) -> None:
    claimed = np.array([5**0.5 * 1.001, 0.0, 1.0])  # the rows are right; the after-norm of row 0 is 0.1% off
    with pytest.raises(PluginError, match=r"wrote row 0 with norm 2\.23607 after the rescaling, but reports 2\.2383 \(the sidecar would record norms that were not written\)"):
        _verify(tmp_path, RULE, claimed)


def test_an_empty_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "out.tmp"
    path.write_bytes(b"")
    fmt = ModelFormat("toy", "toy", (".toy",), read=lambda p, o: None)
    source = ModelBundle(source=tmp_path / "in.toy", format="toy", item_table=SOURCE.copy())
    with pytest.raises(PluginError, match=r"wrote nothing \(an empty file\); nothing is written"):
        verify_written(get_plugin_manager(), fmt, path, source, 0.5, RowNorms(BEFORE, BEFORE), LoadOptions(), path)
