"""A JSON report read for comparison: a regular file of bounded size, UTF-8 JSON, an object
(whether it is a popaudit report of a comparable schema is :func:`~auditor.diff.compare.diff_reports`'
call). Every failure is a :class:`~auditor.errors.ReportError` naming the file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from auditor.errors import ReportError
from auditor.io import require_regular_file

MAX_REPORT_BYTES = 256 * 2**20
"""The largest JSON report read (an audit's report is kilobytes to a few megabytes)."""


def read_report(path: Path, which: str) -> dict[str, Any]:
    """The JSON object in ``path`` (``which``: ``base`` or ``new``, for messages)."""
    path = require_regular_file(path, f"{which} report", error=ReportError)
    size = path.stat().st_size
    if size > MAX_REPORT_BYTES:
        raise ReportError(f"{which} report {path} has {size:,} bytes, more than a JSON report holds "
                          f"({MAX_REPORT_BYTES:,}); is it a popaudit JSON report?")
    with open(path, "rb") as fh:
        data = fh.read(MAX_REPORT_BYTES + 1)
    try:
        report = json.loads(data.decode("utf-8"), parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise ReportError(f"{which} report {path} is not UTF-8 text (a popaudit JSON report is)") from None
    except (json.JSONDecodeError, ValueError) as exc:
        raise ReportError(f"{which} report {path} is not JSON: {exc}") from None
    except RecursionError:
        raise ReportError(f"{which} report {path} nests too deeply to be a popaudit JSON report") from None
    if not isinstance(report, dict):
        raise ReportError(f"{which} report {path} is JSON but not an object: not a popaudit JSON report")
    return report


def _no_constant(name: str) -> Any:
    """popaudit writes null for a missing number, never NaN or Infinity."""
    raise ValueError(f"{name} is not a number JSON allows (popaudit writes null)")
