"""Where popaudit's plugins are registered, named once and importable without the plugin
machinery: ``popaudit --help`` asks whether any plugin is installed before it builds a
plugin manager (which brings pluggy, numpy and every installed plugin with it).

The manager (``auditor/plugins/manager.py``) and the CLI both read these names from here.
"""

from __future__ import annotations

from importlib.metadata import EntryPoint, entry_points

PROJECT = "popaudit"
ENTRY_POINT_GROUP = PROJECT
"""The entry-point group installed packages register plugins under (``[popaudit]``)."""


def installed_entry_points() -> tuple[EntryPoint, ...]:
    """The entry points of :data:`ENTRY_POINT_GROUP`, listed from the installed
    distributions' metadata; none of them is imported."""
    return tuple(entry_points(group=ENTRY_POINT_GROUP))
