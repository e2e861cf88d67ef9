"""AuditConfig takes settings as a notebook gives them and keeps one normal form (QA Api
F4, F5): numpy scalars are the numbers they hold (``np.int64(10)`` was refused as "not an
integer from 1 to 10,000"), ``ks`` and ``alphas`` are tuples without repeats (a list made
the frozen config unhashable, and ``ks=(10, 10)`` recorded ``[10, 10]`` where ``-k 10 -k
10`` records ``[10]``), so the API and the command line record the same settings."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

from auditor import AuditConfig, run_audit
from auditor.cli import cli


def test_numpy_scalars_are_the_numbers_they_hold() -> None:
    config = AuditConfig(model=Path("m.npy"), ks=tuple(np.array([10, 100])), alphas=(np.float32(0.3),),
                         max_queries=np.int64(500), seed=np.uint64(2**64 - 1), bootstrap=np.int32(0),
                         head_mass=np.float32(0.2), top_items=np.int16(5), accuracy_tolerance=np.float64(0.9))
    assert config.ks == (10, 100) and all(type(k) is int for k in config.ks)
    assert config.alphas == (0.3,) and type(config.alphas[0]) is float  # as np.float32(0.3) prints
    assert (config.max_queries, config.seed, config.bootstrap, config.top_items) == (500, 2**64 - 1, 0, 5)
    assert all(type(v) is int for v in (config.max_queries, config.seed, config.bootstrap, config.top_items))
    assert config.head_mass == 0.2 and type(config.head_mass) is float
    assert config.accuracy_tolerance == 0.9 and type(config.accuracy_tolerance) is float


def test_sequences_are_tuples_without_repeats_and_the_config_is_hashable() -> None:
    config = AuditConfig(model=Path("m.npy"), ks=[100, 10, 100, 10], alphas=[0.5, 0.25, 0.5])
    assert config.ks == (100, 10) and config.alphas == (0.5, 0.25)  # first kept, in order, as the CLI
    same = AuditConfig(model=Path("m.npy"), ks=(100, 10), alphas=(0.5, 0.25))
    assert hash(config) == hash(same) and config == same


def test_the_api_and_the_cli_record_the_same_ks(tmp_path: Path) -> None:
    np.save(tmp_path / "items.npy", np.random.default_rng(0).normal(size=(20, 4)).astype(np.float32))
    items = np.repeat(np.arange(20), np.arange(1, 21))
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 3, "item_id": items}), tmp_path / "log.parquet")
    model, log = tmp_path / "items.npy", tmp_path / "log.parquet"
    api = run_audit(AuditConfig(model=model, interactions=log, ks=(5, 5, 3), bootstrap=0, probes=False)).to_dict()
    ran = CliRunner().invoke(cli, ["check", str(model), "--interactions", str(log), "-k", "5", "-k", "5", "-k", "3",
                                   "--bootstrap", "0", "--no-probes", "-q", "--json", str(tmp_path / "r.json")])
    assert ran.exit_code == 0, ran.output
    cli_report = json.loads((tmp_path / "r.json").read_text())
    assert api["settings"]["ks"] == cli_report["settings"]["ks"] == [5, 3]


class _Spelled:
    """An os.PathLike of the caller's own (what a notebook's path objects are)."""

    def __fspath__(self) -> str:
        return "sample_data/interactions.parquet"


def test_paths_are_pathlib_paths_whatever_names_them() -> None:
    """QA diffapi F3: str and os.PathLike paths are one normal form (pathlib.Path), so the
    config equals and hashes as the one built with Path; ``plugins`` a tuple of them."""
    config = AuditConfig(model="sample_data/biased.pt", interactions=_Spelled(), holdout="h.parquet",  # type: ignore[arg-type]
                         plugins=["a.py", Path("b.py")])  # type: ignore[arg-type]
    same = AuditConfig(model=Path("sample_data/biased.pt"), interactions=Path("sample_data/interactions.parquet"),
                       holdout=Path("h.parquet"), plugins=(Path("a.py"), Path("b.py")))
    assert config == same and hash(config) == hash(same)
    assert type(config.model) is type(Path()) and type(config.interactions) is type(Path())
    assert config.plugins == (Path("a.py"), Path("b.py")) and config.trace is None


def test_an_in_memory_table_is_refused_when_the_config_is_built() -> None:
    """QA diffapi F3: an ndarray as ``model`` built an unhashable config and run_audit
    raised TypeError (not an AuditError); now an InputError naming the setting, at build."""

    from auditor.errors import InputError

    with pytest.raises(InputError, match=r"^model must be a path to a file \(a str or pathlib\.Path\), got numpy\.ndarray"):
        AuditConfig(model=np.zeros((4, 2)), interactions=Path("log.parquet"))  # type: ignore[arg-type]


def test_a_path_holding_a_nul_byte_is_refused_when_the_config_is_built() -> None:
    """QA diffapi N2: ``model="bia\\x00sed.pt"`` built, then run_audit raised a bare
    ValueError (embedded null byte), not an AuditError; now an InputError naming the setting."""

    from auditor.errors import InputError
    from auditor.mitigation.run import MitigateConfig

    nul = r"must be a path to a file, got 'bia\\x00sed\.pt', which holds a NUL byte"
    with pytest.raises(InputError, match=r"^model " + nul):
        AuditConfig(model="bia\x00sed.pt", interactions=Path("log.parquet"))
    with pytest.raises(InputError, match=r"^interactions " + nul):
        AuditConfig(model=Path("m.pt"), interactions=Path("bia\x00sed.pt"))
    with pytest.raises(InputError, match=r"^plugins " + nul):
        AuditConfig(model=Path("m.pt"), interactions=Path("log.parquet"), plugins=(Path("bia\x00sed.pt"),))
    with pytest.raises(InputError, match=r"^output " + nul):
        MitigateConfig(model=Path("m.pt"), output=Path("bia\x00sed.pt"), alpha=0.5)


def test_queries_is_a_word_or_a_path_refused_in_the_config_as_paths_are(tmp_path: Path) -> None:
    """``queries`` took anything: 3, b"x" and "a\\x00b" ended in a bare TypeError/ValueError
    deep in the run, "" in "query file . is a folder". A word stays a word, a str or
    os.PathLike naming a file becomes a Path (``Path("users")`` is a file, never the word)."""
    from auditor.errors import InputError

    assert AuditConfig(model=Path("m.pt"), queries="users").queries == "users"
    assert AuditConfig(model=Path("m.pt"), queries="q.npy").queries == Path("q.npy")
    named = AuditConfig(model=Path("m.pt"), queries=Path("users"))
    assert named.queries == Path("users") and named.input_files()["queries"] == Path("users")
    words = r", or one of the words auto, users, history$"
    for value, said in ((3, "got int"), (b"q.npy", "got bytes"), ("", "got an empty path"),
                        ("q\x00.npy", r"got 'q\\x00\.npy', which holds a NUL byte")):
        with pytest.raises(InputError, match=r"^queries must be a path to a file.*" + said + r".*" + words):
            AuditConfig(model=Path("m.pt"), queries=value)  # type: ignore[arg-type]
