"""Hostile plugins and checkpoints from the retrain QA's third round: a list or audit measure
that writes through ``torch.from_numpy`` of a lent array (N1), ``--plugin`` given to retrain
or experiment (N2: refused before the file is imported), a plugin's own 'read-only' error
(N3)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from .corpus import EXIT_ERROR, EXIT_OK, EXIT_USAGE, Built, Case, Outcome, params, run_case, strict_json
from .test_plugins import MEASURE, _list_measure, _plugin

_THROUGH_TORCH = r"changed, in place, the array '{array}' popaudit lends it read-only, through a view that ignores " \
                 r"numpy's read-only flag \(torch\.from_numpy"
CASES = [
    Case("list-measure-normalises-the-table-through-torch",
         _list_measure("unit", "num2", "import torch; t = torch.from_numpy(context.item_table); "
                                       "t /= t.norm(dim=1, keepdim=True); return lambda slots: 1.0"), EXIT_ERROR,
         r"plugin 'file:plug\.py' \(hook popaudit_measures, list measure 'unit'\) "
         + _THROUGH_TORCH.format(array=r"context\.item_table")),
    Case("list-measure-zeroes-the-lists-through-torch",
         _list_measure("zl", "num2", "import torch; return lambda slots: float(torch.as_tensor(slots.lists).zero_().sum())"),
         EXIT_ERROR, r"list measure 'zl'\) " + _THROUGH_TORCH.format(array=r"slots\.lists")),
    Case("measure-halves-the-bundle-table-through-torch",
         _plugin("import torch\n" + MEASURE.format(name="m", value="float(torch.from_numpy(bundle.item_table).mul_(0.5).sum())")),
         EXIT_ERROR, r"plugin 'file:plug\.py' \(hook popaudit_measures \(measure 'm'\)\) "
         + _THROUGH_TORCH.format(array=r"bundle\.item_table")),
]


SIDE_EFFECT = "open(__file__ + '.imported', 'w').close()\n"
"""A plugin file that leaves a mark when it is imported."""
TYPO = "from auditor.hookspecs import hookimpl\n@hookimpl\ndef popaudit_measurez():\n    return []\n"
"""A plugin file pluggy refuses (a hook that is not popaudit's) when it is imported."""
SMALL = ("--n-users", "30", "--n-items", "30", "--n-interactions", "200", "--epochs", "1", "-o", "r.pt")


def _not_imported(d: Path, outcome: Outcome) -> None:
    assert not (d / "plug.py.imported").exists(), "the refused plugin file was imported"
    assert not (d / "r.pt").exists()


# N2: retrain and experiment refuse --plugin before any plugin file is imported: the same
# usage error whatever the file (before: its code ran, a broken file gave exit 1).
_REFUSED = r"--plugin does not apply to {command}: "
CASES += [
    Case("retrain-plugin-is-refused-unimported", _plugin(SIDE_EFFECT, *SMALL, command="retrain", check=_not_imported),
         EXIT_USAGE, _REFUSED.format(command="retrain")),
    Case("retrain-plugin-with-a-bad-hook-is-refused", _plugin(TYPO, *SMALL, command="retrain"), EXIT_USAGE,
         _REFUSED.format(command="retrain"), absent=r"popaudit_measurez"),
    Case("retrain-plugin-missing-file-is-refused", _plugin(None, *SMALL, command="retrain"), EXIT_USAGE,
         _REFUSED.format(command="retrain"), absent=r"not found"),
    Case("experiment-plugin-is-refused-unimported",
         _plugin(SIDE_EFFECT, "conditions", "--seeds", "1", *SMALL, command="experiment", check=_not_imported),
         EXIT_USAGE, _REFUSED.format(command="experiment conditions")),
    Case("experiment-plugin-with-a-bad-hook-is-refused",
         _plugin(TYPO, "lr-sweep", "--seeds", "1", *SMALL, command="experiment"), EXIT_USAGE,
         _REFUSED.format(command="experiment lr-sweep"), absent=r"popaudit_measurez"),
]

# N3: a plugin's own error that mentions 'read-only' keeps its text (before: said as a write
# to a lent array, its text lost); numpy's own read-only errors are still said as such.
CASES += [
    Case("measure-raises-its-own-read-only-error",
         _plugin(MEASURE.format(name="m", value="(_ for _ in ()).throw(ValueError('/srv/cache is mounted read-only'))")),
         EXIT_ERROR, r"failed in hook popaudit_measures \(measure 'm'\): ValueError: /srv/cache is mounted read-only",
         absent=r"lends it read-only"),
]


def _no_recorded(*keys: str) -> object:
    """A small retrained checkpoint whose config has ``keys`` removed (the optimizer state kept)."""

    def build(d: Path) -> Built:
        popaudit = Path(sys.executable).parent / "popaudit"
        subprocess.run([str(popaudit), "retrain", *SMALL[:-1], "full.pt", "--optimizer", "adam", "-q"], cwd=d, check=True)
        checkpoint = torch.load(d / "full.pt", weights_only=False)
        for key in keys:
            checkpoint["config"].pop(key)
        torch.save(checkpoint, d / "model.pt")
        return Built(["check", "model.pt", "--format", "json", "-o", "r.json", "-q"], outputs=["r.json"],
                     check=_c1_still_violated)

    return build


def _c1_still_violated(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["conditions"]["C1"]["status"] == "violated"  # from the saved Adam state
    said = [w for w in report["warnings"] if w.startswith("probe update could not run")]
    assert said == ["probe update could not run: the checkpoint's config records no 'optimizer': the update probe "
                    "steps the item tower with the optimizer training used and cannot rebuild it (the conditions "
                    "still read the declared --optimizer and --lr)"], report["warnings"]


# N4: a popaudit checkpoint whose config records no optimizer: the probe says so (before: KeyError: 'optimizer').
CASES += [
    Case("checkpoint-config-without-optimizer", _no_recorded("optimizer"), EXIT_OK, None, absent=r"KeyError",
         timeout=120),
]

DECLARES_C5_HOLDS = """from auditor.hookspecs import hookimpl
from auditor.result import Condition
@hookimpl
def popaudit_condition_evidence(bundle):
    return {"C5": Condition("growth", "holds", "the author says so")}
"""


def _declared_over_measured(d: Path) -> Built:
    """A retrained checkpoint at a small rate (C5 measured violated: the projection and the
    table) and a plugin declaring C5 holds."""
    popaudit = Path(sys.executable).parent / "popaudit"
    subprocess.run([str(popaudit), "retrain", *SMALL[:-1], "m.pt", "--lr", "0.001", "-q"], cwd=d, check=True)
    (d / "plug.py").write_text(DECLARES_C5_HOLDS)
    return Built(["check", "m.pt", "--plugin", "plug.py", "--format", "json", "-o", "r.json", "-q"], outputs=["r.json"],
                 check=_measured_c5_stands)


def _measured_c5_stands(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    c5 = report["conditions"]["C5"]
    assert c5["status"] == "violated" and c5["details"]["decided_by"] == "projection and table", c5  # before: holds
    assert c5["details"]["declared"]["status"] == "holds", c5
    assert any(w.startswith("C5: plugin 'file:plug.py' declares it holds, but popaudit's numeric probe measured it "
                            "violated; the measurement stands") for w in report["warnings"]), report["warnings"]


# N5: a C5 measured through the probe's growth outranks a declaration, as C2–C4's do.
CASES += [Case("plugin-declares-c5-holds-against-measured-growth", _declared_over_measured, EXIT_OK, None, timeout=120)]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_retrain_qa3(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
