"""Say what a hostile file tried: pickles whose placeholders stand for callables that run
code (``posix.system``, ``builtins.exec``, ``subprocess.Popen`` ...) are audited from
their tensors, never run, and named in the report's warnings and in JSON
``replaced_globals`` with a severity; ``unsafe_globals`` (how many of them run code) is a
flat metric a CI gate can refuse such files with (issue #23, item 10)."""

from __future__ import annotations

import builtins
import os
import pickle
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch

from .corpus import EXIT_GATE, EXIT_OK, FAST, Built, Case, Outcome, check_args, log, params, run_case, strict_json, write


class _Reduce:
    """Pickles as ``func(*args)``: what a malicious pickle runs when loaded."""

    def __init__(self, func: Any, *args: Any) -> None:
        self.func, self.args = func, args

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return self.func, self.args


def _marker(d: Path) -> Path:
    return d / "PWNED"


def _touch(d: Path) -> str:
    return f"touch {_marker(d)}"


def _state_dict(*payloads: Any) -> Any:
    """A usable state dict beside ``payloads`` (each ``f(d)``: an object that would run code)."""

    def make(d: Path) -> dict[str, Any]:
        state: dict[str, Any] = {"item.weight": torch.randn(10, 4, generator=torch.Generator().manual_seed(0))}
        state.update({f"extra{i}": payload(d) for i, payload in enumerate(payloads)})
        return state

    return make


def _case(make: Any, *extra: str, name: str = "model.pt", legacy: bool = False, expect: dict[str, str] | None = None,
          unsafe: int = 0) -> Any:
    def build(d: Path) -> Built:
        log(d)
        obj = make(d)
        if isinstance(obj, bytes):
            write(d, name, obj)
        else:
            torch.save(obj, d / name, _use_new_zipfile_serialization=not legacy)

        def check(folder: Path, outcome: Outcome) -> None:
            report = strict_json(folder / "r.json")
            found = {g["name"]: g["severity"] for g in report["replaced_globals"]}
            for global_name, severity in (expect or {}).items():
                assert found.get(global_name) == severity, (global_name, found)
            code = [n for n, s in found.items() if s == "runs-code"]
            assert len(code) == unsafe, found
            warned = [w for w in report["warnings"] if "would run code if the file were unpickled" in w]
            assert bool(warned) == bool(unsafe), report["warnings"]

        return Built(check_args(name, "--json", "r.json", *extra), outputs=("r.json",), markers=[_marker(d)],
                     check=check)

    return build


SYSTEM = lambda d: _Reduce(os.system, _touch(d))  # noqa: E731
EXEC = lambda d: _Reduce(builtins.exec, f"open({str(_marker(d))!r}, 'w')")  # noqa: E731
POPEN = lambda d: _Reduce(subprocess.Popen, ["touch", str(_marker(d))])  # noqa: E731
EVAL = lambda d: _Reduce(builtins.eval, "1")  # noqa: E731
LOADS = lambda d: _Reduce(pickle.loads, pickle.dumps(_Reduce(os.system, _touch(d))))  # noqa: E731


class Harmless:
    """A class pickled by reference only: replaced, but it runs no code of note."""

    def __init__(self) -> None:
        self.value = 3


def _module_pickle(d: Path) -> bytes:
    """A plain pickle of a state dict and an instance of a class from this test module."""
    state = {"item.weight": np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32), "meta": Harmless()}
    return pickle.dumps(state, protocol=4)


def _getattr_chain(d: Path) -> bytes:
    """getattr(__import__('os'), 'system')('touch MARKER'): no tensors, so it is refused."""
    return (b"c__builtin__\ngetattr\n(c__builtin__\n__import__\n(S'os'\ntRS'system'\ntR(S'"
            + _touch(d).encode() + b"'\ntR.")


CODE, INERT = "runs-code", "inert"
CASES = [
    Case("globals-posix-system", _case(_state_dict(SYSTEM), expect={"posix.system": CODE}, unsafe=1), EXIT_OK, None),
    Case("globals-builtins-exec", _case(_state_dict(EXEC), expect={"builtins.exec": CODE}, unsafe=1), EXIT_OK, None),
    Case("globals-subprocess-popen", _case(_state_dict(POPEN), expect={"subprocess.Popen": CODE}, unsafe=1),
         EXIT_OK, None),
    Case("globals-three-kinds", _case(_state_dict(SYSTEM, EXEC, POPEN, EVAL), unsafe=4,
                                      expect={"builtins.eval": CODE}), EXIT_OK, None),
    Case("globals-nested-pickle-loads", _case(_state_dict(LOADS), expect={"pickle.loads": CODE}, unsafe=1),
         EXIT_OK, None),
    Case("globals-legacy-format", _case(_state_dict(SYSTEM), legacy=True, expect={"posix.system": CODE}, unsafe=1),
         EXIT_OK, None),
    Case("globals-inert-class-only", _case(_module_pickle, name="model.pkl",
                                           expect={f"{__name__}.Harmless": INERT}), EXIT_OK, None),
    Case("globals-none-in-npy", lambda d: (log(d), np.save(d / "t.npy", np.ones((10, 4), np.float32) + np.eye(10, 4)),
                                          Built(check_args("t.npy", "--json", "r.json"), outputs=("r.json",),
                                                check=_no_globals))[-1], EXIT_OK, None),
    Case("gate-unsafe-globals-trips", _case(_state_dict(SYSTEM), "--fail-on", "unsafe_globals>0", unsafe=1,
                                            expect={"posix.system": CODE}), EXIT_GATE, None,
         stderr=r"gate unsafe_globals>0: 1 \(TRIPPED\)"),
    Case("gate-unsafe-globals-passes-inert", _case(_module_pickle, "--fail-on", "unsafe_globals>0", name="model.pkl"),
         EXIT_OK, None),
]


def _no_globals(d: Path, outcome: Outcome) -> None:
    report = strict_json(d / "r.json")
    assert report["replaced_globals"] == [], report["replaced_globals"]


def _batch_gate(d: Path) -> Built:
    log(d)
    torch.save(_state_dict(SYSTEM)(d), d / "evil.pt")
    np.save(d / "clean.npy", np.random.default_rng(0).normal(size=(10, 4)).astype(np.float32))
    write(d, "m.csv", "model\nclean.npy\nevil.pt\n")

    def check(folder: Path, outcome: Outcome) -> None:
        rows = pq.read_table(folder / "r.parquet").to_pylist()
        assert [r["unsafe_globals"] for r in rows] == [0.0, 1.0], rows

    return Built(["batch", "m.csv", "-o", "r.parquet", "--interactions", "log.parquet", *FAST,
                  "--fail-on", "unsafe_globals>0"], outputs=("r.parquet",), markers=[_marker(d)], check=check)


CASES += [
    Case("batch-gate-unsafe-globals", _batch_gate, EXIT_GATE, None,
         stderr=r"gate row 1 \(evil\.pt\): unsafe_globals>0: 1 \(TRIPPED\)"),
    Case("globals-getattr-chain-pickle", lambda d: (log(d), write(d, "evil.pt", _getattr_chain(d)),
                                                    Built(check_args("evil.pt"), markers=[_marker(d)]))[-1],
         1, r"evil\.pt .*--trust-pickle"),
]

PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_globals(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)


def test_corpus_size() -> None:
    assert len(CASES) + len(PRODUCT_FAILURES) >= 10
