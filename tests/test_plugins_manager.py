"""The plugin manager: loading files, misspelled hooks, errors that name the plugin."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from auditor import hookspecs
from auditor.errors import ModelLoadError, PluginError
from auditor.plugins import (
    BUILTIN_PLUGINS,
    call_hook,
    collect_condition_evidence,
    collect_measures,
    compute_measures,
    describe_plugins,
    get_plugin_manager,
    hook_names,
    hook_results,
    load_plugin_file,
)
from auditor.result import Condition

ROOT = Path(__file__).resolve().parents[1]


def write_plugin(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text("from auditor.hookspecs import hookimpl\n" + textwrap.dedent(body))
    return path


MEASURE = """
class Measure:
    def __init__(self, name, value):
        self.name, self.description, self.value = name, "a test measure", value
    def compute(self, bundle, stats, result):
        if self.value == "boom":
            raise ZeroDivisionError("division by zero in measure")
        return self.value
"""


def test_builtins_are_registered_and_named() -> None:
    pm = get_plugin_manager(entry_points=False)
    names = [info.name for info in describe_plugins(pm)]
    assert names == [f"builtin:{m.rsplit('.', 2)[-2]}" for m in BUILTIN_PLUGINS]
    assert all(info.builtin and info.kind == "builtin" for info in describe_plugins(pm))
    loading = next(i for i in describe_plugins(pm) if i.module == "auditor.loading.builtin")
    assert loading.hooks == ("popaudit_load_model",)


def test_file_plugin_hooks_are_listed_and_called(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "two",
        MEASURE
        + """
@hookimpl
def popaudit_measures():
    return [Measure("m_one", 1.5), Measure("m_two", 2.0)]
""",
    )
    pm = get_plugin_manager([path], entry_points=False)
    info = next(i for i in describe_plugins(pm) if i.kind == "file")
    assert info.name == f"file:{path}" and info.path == str(path) and info.hooks == ("popaudit_measures",)
    # The built-in measures come through the same hook, after the plugins' own.
    assert collect_measures(pm).audit_names == ["m_one", "m_two", "item_bias_spearman"]
    assert compute_measures(collect_measures(pm), None, None, None) == {"m_one": 1.5, "m_two": 2.0, "item_bias_spearman": None}
    # The same file twice is registered once.
    pm2 = get_plugin_manager([path, tmp_path / "." / "two.py"], entry_points=False)
    assert sum(1 for i in describe_plugins(pm2) if i.kind == "file") == 1


def test_plugin_file_is_imported_once_while_unchanged(tmp_path: Path) -> None:
    path = write_plugin(tmp_path, "once", "COUNT = [0]\nCOUNT[0] += 1\n")
    first = load_plugin_file(path)
    assert load_plugin_file(path) is first
    path.write_text(path.read_text() + "\nEXTRA = 1\n")
    second = load_plugin_file(path)
    assert second is not first and second.EXTRA == 1


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            "@hookimpl\ndef popaudit_load_modle(path, options):\n    return None\n",
            r"popaudit_load_modle, which is not a popaudit hook \(did you mean popaudit_load_model\?\)",
        ),
        (
            "def popaudit_load_modle(path, options):\n    return None\n",
            r"popaudit_load_modle, which is not a popaudit hook \(did you mean popaudit_load_model\?\)",
        ),
        (
            "def popaudit_measures():\n    return []\n",
            r"defines popaudit_measures without @hookimpl",
        ),
        (
            "@hookimpl\ndef popaudit_load_model(path, options, extra):\n    return None\n",
            r"invalid hook implementation.*extra",
        ),
    ],
    ids=["marked-misspelled", "unmarked-misspelled", "unmarked-known", "bad-argument"],
)
def test_misspelled_or_invalid_hooks_name_the_plugin(tmp_path: Path, body: str, message: str) -> None:
    path = write_plugin(tmp_path, "bad", body)
    with pytest.raises(PluginError, match=message) as info:
        get_plugin_manager([path], entry_points=False)
    assert f"file:{path}" in str(info.value)


def test_specname_and_imported_names_are_not_flagged(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "ok",
        """
from auditor.plugins import hook_names as popaudit_hook_names  # imported, not defined here

@hookimpl(specname="popaudit_measures")
def my_measures():
    return []
""",
    )
    pm = get_plugin_manager([path], entry_points=False)
    assert next(i for i in describe_plugins(pm) if i.kind == "file").hooks == ("popaudit_measures",)


def test_missing_and_broken_files(tmp_path: Path) -> None:
    with pytest.raises(PluginError, match=r"plugin file not found: .*nope\.py"):
        get_plugin_manager([tmp_path / "nope.py"], entry_points=False)
    broken = write_plugin(tmp_path, "broken", "import not_a_module_anywhere\n")
    with pytest.raises(PluginError, match=r"broken\.py failed to import: ModuleNotFoundError"):
        get_plugin_manager([broken], entry_points=False)
    text = tmp_path / "notes.txt"
    text.write_text("x")
    with pytest.raises(PluginError, match="not a Python file"):
        get_plugin_manager([text], entry_points=False)


def test_exception_in_hook_names_plugin_and_hook(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "raiser",
        """
def helper(path):
    raise KeyError("state_dict")

@hookimpl
def popaudit_load_model(path, options):
    return helper(path)
""",
    )
    pm = get_plugin_manager([path], entry_points=False)
    with pytest.raises(PluginError) as info:
        call_hook(pm, "popaudit_load_model", path=tmp_path / "m.pt", options=None)
    message = str(info.value)
    assert f"plugin 'file:{path}' failed in hook popaudit_load_model: KeyError: 'state_dict'" == message
    assert isinstance(info.value.__cause__, KeyError)


def test_audit_error_in_plugin_keeps_class_and_gains_plugin_name(tmp_path: Path) -> None:
    path = write_plugin(
        tmp_path,
        "refuser",
        """
from auditor.errors import ModelLoadError

@hookimpl
def popaudit_load_model(path, options):
    raise ModelLoadError(f"{path}: table 'items' is missing")
""",
    )
    pm = get_plugin_manager([path], entry_points=False)
    with pytest.raises(ModelLoadError) as info:
        call_hook(pm, "popaudit_load_model", path=Path("m.pt"), options=None)
    assert str(info.value) == f"plugin 'file:{path}' (hook popaudit_load_model): m.pt: table 'items' is missing"


def test_call_hook_unknown_hook_is_plugin_error() -> None:
    pm = get_plugin_manager(entry_points=False)
    with pytest.raises(PluginError, match="no such hook: popaudit_nothing"):
        call_hook(pm, "popaudit_nothing")


def test_hook_results_and_measure_validation(tmp_path: Path) -> None:
    first = write_plugin(tmp_path, "first", MEASURE + "@hookimpl\ndef popaudit_measures():\n    return [Measure('dup', 1.0)]\n")
    second = write_plugin(tmp_path, "second", MEASURE + "@hookimpl\ndef popaudit_measures():\n    return [Measure('dup', 2.0)]\n")
    pm = get_plugin_manager([first, second], entry_points=False)
    # pluggy calls the last registered first.
    assert [r.plugin for r in hook_results(pm, "popaudit_measures")] == [
        f"file:{second}", f"file:{first}", "builtin:metrics"
    ]
    with pytest.raises(PluginError, match=r"measure 'dup' is defined by both plugin .*second.* and plugin .*first"):
        collect_measures(pm)

    not_list = write_plugin(tmp_path, "notlist", "@hookimpl\ndef popaudit_measures():\n    return 3\n")
    with pytest.raises(PluginError, match=r"notlist\.py' returned int from hook popaudit_measures; expected a list"):
        collect_measures(get_plugin_manager([not_list], entry_points=False))
    no_compute = write_plugin(tmp_path, "nocompute", "@hookimpl\ndef popaudit_measures():\n    return ['x']\n")
    with pytest.raises(PluginError, match=r"lacks name, description, compute"):
        collect_measures(get_plugin_manager([no_compute], entry_points=False))
    boom = write_plugin(tmp_path, "boom", MEASURE + "@hookimpl\ndef popaudit_measures():\n    return [Measure('m', 'boom')]\n")
    with pytest.raises(PluginError, match=r"plugin '.*boom\.py' failed in hook popaudit_measures \(measure 'm'\): ZeroDivisionError"):
        compute_measures(collect_measures(get_plugin_manager([boom], entry_points=False)), None, None, None)


def test_condition_evidence_is_merged_with_its_source(tmp_path: Path) -> None:
    a = write_plugin(
        tmp_path,
        "a",
        """
from auditor.result import Condition

@hookimpl
def popaudit_condition_evidence(bundle):
    return {"C3": Condition("non-shared parameters", "violated", "shared Linear")}
""",
    )
    b = write_plugin(
        tmp_path,
        "b",
        """
@hookimpl
def popaudit_condition_evidence(bundle):
    return {"C3": {"name": "non-shared parameters", "status": "holds", "evidence": "rows"},
            "C2": {"name": "parameter-linear encoder", "status": "holds", "evidence": "linear"}}
""",
    )
    pm = get_plugin_manager([a, b], entry_points=False)
    declared = collect_condition_evidence(pm, bundle=None)
    # b is registered last, so pluggy asks it first: its C3 wins, a's is reported.
    assert declared.conditions["C3"] == Condition("non-shared parameters", "holds", "rows", {"source": f"file:{b}"})
    assert declared.conditions["C2"].status == "holds"
    assert len(declared.warnings) == 1 and "declared violated" in declared.warnings[0]

    bad = write_plugin(tmp_path, "bad", "@hookimpl\ndef popaudit_condition_evidence(bundle):\n    return {'C9': None}\n")
    with pytest.raises(PluginError, match="unknown condition 'C9'"):
        collect_condition_evidence(get_plugin_manager([bad], entry_points=False), bundle=None)
    status = write_plugin(
        tmp_path,
        "status",
        "from auditor.result import Condition\n@hookimpl\ndef popaudit_condition_evidence(bundle):\n"
        "    return {'C1': Condition('plain SGD', 'maybe', 'x')}\n",
    )
    with pytest.raises(PluginError, match="status 'maybe'"):
        collect_condition_evidence(get_plugin_manager([status], entry_points=False), bundle=None)


def test_broken_entry_point_names_itself(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist = tmp_path / "broken_ep-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-ep\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[popaudit]\nbroken = popaudit_missing_module_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(PluginError, match=r"entry point 'broken' \(popaudit_missing_module_xyz, package broken-ep\) failed to load: ModuleNotFoundError"):
        get_plugin_manager()


def test_plugin_paths_from_argv() -> None:
    from auditor.cli._group import plugin_paths_from_argv

    argv = ["check", "m.pt", "--plugin", "a.py", "--plugin=b.py", "-k", "10", "--", "--plugin", "c.py"]
    assert plugin_paths_from_argv(argv) == (Path("a.py"), Path("b.py"))


def test_every_hook_is_documented_in_plugins_readme() -> None:
    readme = (ROOT / "plugins" / "README.md").read_text(encoding="utf-8")
    tree = ast.parse((ROOT / "auditor" / "hookspecs.py").read_text(encoding="utf-8"))
    specs = [n.name for n in tree.body if isinstance(n, ast.FunctionDef) and n.name.startswith("popaudit_")]
    assert sorted(specs) == list(hook_names()) and len(specs) >= 6
    for name in specs:
        # A heading for the hook followed by a description paragraph of some substance.
        match = re.search(rf"^### `{name}\(.*?\)`\n(.+?)(?=\n### |\n## |\Z)", readme, re.S | re.M)
        assert match, f"{name} has no '### `{name}(...)`' section in plugins/README.md"
        assert len(match.group(1).split()) >= 25, f"{name}'s description in plugins/README.md is too short"
        assert getattr(hookspecs, name).__doc__, f"{name} has no docstring"


def test_help_imports_no_plugin() -> None:
    """``popaudit --help`` builds no manager with the built-ins and imports no plugin file."""
    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "import auditor.plugins\n"
        "from auditor.cli import cli\n"
        "before = set(sys.modules)\n"
        "calls = []\n"
        "real = auditor.plugins.get_plugin_manager\n"
        "def spy(*args, **kwargs):\n"
        "    calls.append(kwargs.get('builtins', True))\n"
        "    return real(*args, **kwargs)\n"
        "auditor.plugins.get_plugin_manager = spy\n"
        "result = CliRunner().invoke(cli, ['--help'])\n"
        "assert result.exit_code == 0, result.output\n"
        "assert 'plugins' in result.output and 'check' in result.output\n"
        "new = set(sys.modules) - before\n"
        "print(sorted(m for m in new if m in %r or m.startswith('popaudit_plugin_')), True in calls)\n"
        % (BUILTIN_PLUGINS,)
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[] False"


def test_a_keyboard_interrupt_is_ctrl_c_only_where_sigint_can_arrive() -> None:
    """Where SIGINT has a handler, a KeyboardInterrupt in plugin code may be the user's
    Ctrl-C and goes on; where it is ignored (the child check and mitigate run plugin code
    in) only code raised it, so it is the plugin's failure, named like any other."""
    import signal

    from auditor.plugins.manager import reraise_interrupt

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            reraise_interrupt(KeyboardInterrupt())
        reraise_interrupt(ValueError("not an interrupt"))  # anything else is never re-raised here
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        reraise_interrupt(KeyboardInterrupt())  # returns: the caller attributes it to the plugin
    finally:
        signal.signal(signal.SIGINT, previous)
