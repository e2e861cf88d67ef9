"""popaudit's plugins: the manager (built-ins, entry points, ``--plugin`` files), calling
hooks with failures attributed, what plugins contribute to an audit, and their listing.

Built-in features register through the same hooks as third-party plugins. Nothing here
runs at import time and nothing heavy is imported, so ``popaudit --help`` stays fast.
"""

from auditor.plugins.calls import HookResult, call_hook, hook_results
from auditor.plugins.contributions import (
    DeclaredConditions,
    RegisteredMeasures,
    collect_condition_evidence,
    collect_measures,
    compute_measures,
    measure_descriptions,
)
from auditor.plugins.describe import PluginInfo, PluginKind, describe_plugins
from auditor.plugins.manager import (
    BUILTIN_PLUGINS,
    BUILTIN_PREFIX,
    ENTRY_POINT_GROUP,
    FILE_PREFIX,
    HOOK_PREFIX,
    PLUGIN_FAILURES,
    PROJECT,
    describe_failure,
    get_plugin_manager,
    hook_names,
    load_plugin_file,
    reraise_interrupt,
)

__all__ = [
    "BUILTIN_PLUGINS",
    "BUILTIN_PREFIX",
    "ENTRY_POINT_GROUP",
    "FILE_PREFIX",
    "HOOK_PREFIX",
    "PLUGIN_FAILURES",
    "PROJECT",
    "DeclaredConditions",
    "HookResult",
    "PluginInfo",
    "PluginKind",
    "RegisteredMeasures",
    "call_hook",
    "collect_condition_evidence",
    "collect_measures",
    "compute_measures",
    "describe_failure",
    "reraise_interrupt",
    "describe_plugins",
    "get_plugin_manager",
    "hook_names",
    "hook_results",
    "load_plugin_file",
    "measure_descriptions",
]
