"""The ``--queries`` option's type: a mistyped word is a usage error (exit 2), not a missing file."""

from __future__ import annotations

from typing import Any

import click

from auditor.config import QUERY_SOURCES
from auditor.query_source import mistyped_query_source


class QuerySource(click.ParamType):  # type: ignore[type-arg]  # generic in recent click only
    """One of :data:`~auditor.config.QUERY_SOURCES`, or a path (checked when read)."""

    name = "users|history|auto|PATH"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        problem = mistyped_query_source(value, QUERY_SOURCES)
        if problem is not None:
            self.fail(problem, param, ctx)
        return value
