"""Frozen settings of one audit: what the CLI parses and what ``run_audit`` reads."""

from __future__ import annotations

import math
import numbers
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from auditor.alpha import name_clash
from auditor.devices import DEVICES
from auditor.errors import InputError, setting
from auditor.ranges import check_ranges, plain_numbers, plain_paths, word_or_path

from auditor.values import ItemRows, LogSpec, RowIdPolicy

if TYPE_CHECKING:
    from auditor.model import ModelBundle

QUERY_SOURCES = ("auto", "users", "history")
INDEX_KINDS = ("auto", "exact", "ivf", "hnsw")
POPULARITY_KINDS = ("interactions", "users")
INTERACTION_FORMATS = ("auto", "parquet", "csv", "tsv", "movielens", "recbole")
DEFAULT_ALPHAS = (0.25, 0.5, 0.75)
_RANGED = ("bootstrap", "max_queries", "ks", "seed", "id_offset", "alphas", "accuracy_tolerance", "max_memory")
"""The numeric AuditConfig fields whose ranges auditor/ranges.py holds."""


@dataclass(frozen=True)
class GroupPolicy:
    """The cut-offs of the popularity groups; each field is a setting of its name."""

    head_mass: float = 0.2
    """Head H: the most popular items holding this share of the popularity mass."""
    tail_mass: float = 0.2
    """Tail T: the items outside the most popular ones holding ``1 - tail_mass``."""
    popular_percent: float = 20.0
    """Popular items for the user grouping: the top ``popular_percent``% of the catalogue."""
    niche_fraction: float = 0.2
    """The share of users, lowest popular ratio first, who are niche."""
    blockbuster_fraction: float = 0.2
    """The share of users, highest popular ratio first, who are blockbuster."""
    short_head_mass: float = 0.8
    """Elliot's short head (PopRSP, PopREO, ACLT): the most popular items holding this share."""

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            upper = 100.0 if f.name == "popular_percent" else 1.0
            if not (isinstance(value, (int, float)) and math.isfinite(value) and 0.0 < value <= upper):
                raise InputError(f"{setting(f.name)} must be a number in (0, {upper:g}], got {value!r}")
        if (clash := GroupPolicy.overlap(vars(self))) is not None:
            raise InputError(clash)

    @staticmethod
    def overlap(values: Mapping[str, Any]) -> str | None:
        """Why cut-offs ``values`` (by field name; those absent take the defaults) cannot hold
        together, or None: the head and the tail may not overlap, nor niche and blockbuster
        users. The one check the command line (a usage error), a manifest cell and the
        library ask."""
        given = {f.name: values.get(f.name, f.default) for f in fields(GroupPolicy)}
        for first, second, why in (("head_mass", "tail_mass", " (the head and the tail may not overlap)"),
                                   ("niche_fraction", "blockbuster_fraction", "")):
            a, b = given[first], given[second]
            if isinstance(a, (int, float)) and isinstance(b, (int, float)) and a + b > 1.0:
                return f"{setting(first)} + {setting(second)} must be at most 1{why}, got {a:g} + {b:g}"
        return None

    def describe(self) -> str:
        """The cut-offs in one sentence (a report's ``retrieval.definitions`` entry, so two
        reports with different cut-offs are told apart)."""
        return (
            f"popularity groups: head = most popular items holding {self.head_mass:.0%} of the popularity mass, "
            f"tail = items outside the most popular ones holding {1 - self.tail_mass:.0%} (cold items included), "
            f"mid = the rest; users by the share of their training items in the top {self.popular_percent:g}% "
            f"of items: lowest {self.niche_fraction:.0%} niche, highest {self.blockbuster_fraction:.0%} "
            f"blockbuster, the rest diverse (ties on one side); short head (PopRSP, PopREO, ACLT) = most popular "
            f"items holding {self.short_head_mass:.0%} of the mass"
        )

    def definitions(self) -> dict[str, str]:
        """The report's ``retrieval.definitions`` entry of the cut-offs (``popularity_groups``),
        which ``popaudit diff`` compares: every audit that measures lists (a model's, served
        lists alone) records it through this one method."""
        return {"popularity_groups": self.describe()}


_GROUP_FIELDS = tuple(f.name for f in fields(GroupPolicy))
"""The AuditConfig fields that are :class:`GroupPolicy`'s, by the same names."""


@dataclass(frozen=True)
class DeclaredTraining:
    """What the user declares about training when the file cannot show it (C1, C4, C5)."""

    optimizer: str | None = None
    momentum: float | None = None
    weight_decay: float | None = None
    lr: float | None = None
    loss: str | None = None

    def __post_init__(self) -> None:
        declared = {"momentum": self.momentum, "weight_decay": self.weight_decay, "lr": self.lr}
        for name, value in plain_numbers(declared, optional=declared).items():
            object.__setattr__(self, name, value)
        checks = (("momentum", self.momentum, 0.0), ("weight_decay", self.weight_decay, 0.0))
        for name, value, low in checks + (("lr", self.lr, None),):
            if value is None:
                continue
            if not math.isfinite(value) or (low is not None and value < low) or (low is None and value <= 0):
                wanted = "a positive number" if low is None else f"a finite number >= {low:g}"
                raise InputError(f"{setting(name)} must be {wanted}, got {value}")
        check_ranges({"momentum": self.momentum, "weight_decay": self.weight_decay, "lr": self.lr})


@dataclass(frozen=True)
class LoadOptions:
    """How to read a model file (the loading part of :class:`AuditConfig`)."""

    item_key: str | None = None
    user_key: str | None = None
    trust_pickle: bool = False
    item_ids: Path | None = None
    max_memory: int | None = None
    """Bytes a table may take in memory; larger tables are streamed to a disk-backed file."""
    user_ids: Path | None = None
    """Raw user id of each user-table row, in row order."""


@dataclass(frozen=True, kw_only=True)
class ReadSettings:
    """How a model file and its training log are read: the settings ``check``
    (:class:`AuditConfig`) and ``mitigate`` share, with the values they derive (how the
    loader reads the model, how the log is read, what raw ids say about rows). Fields keep
    their flat names: each is a command-line option and a manifest column of that name."""

    interactions: Path | None = None
    interactions_format: str = "auto"
    user_col: str | None = None
    item_col: str | None = None
    item_ids: Path | None = None
    item_key: str | None = None
    user_key: str | None = None
    id_offset: int | None = None
    """Table row = raw id − id_offset wherever ids are taken as rows (1 for 1-based ids)."""
    assume_row_ids: bool = False
    """Take raw ids as table rows even when the log shows they evidently are not."""
    max_memory: int | None = None
    """Bytes the run may hold for tables and indexes; None: half the available memory."""
    PATHS: ClassVar[tuple[str, ...]] = ("interactions", "item_ids")  # the settings naming a file; subclasses add theirs

    def __post_init__(self) -> None:
        # Paths as pathlib.Path (from str, os.PathLike); anything else refused here, naming the setting.
        for name, value in plain_paths({n: getattr(self, n) for n in self.PATHS}, ("plugins",)).items():
            object.__setattr__(self, name, value)

    @property
    def training_log(self) -> LogSpec | None:
        """The training log (``interactions``) and how it is read (format, id columns);
        None without one."""
        return None if self.interactions is None else self._log(self.interactions)

    def _log(self, path: Path) -> LogSpec:
        return LogSpec(path, self.interactions_format, self.user_col, self.item_col, self.max_memory)

    @property
    def row_ids(self) -> RowIdPolicy:
        """What the user said about taking raw ids as table rows."""
        return RowIdPolicy(self.id_offset, self.assume_row_ids)

    def read_options(self, *, trust_pickle: bool = False, user_ids: Path | None = None) -> LoadOptions:
        """The settings the model loader reads."""
        return LoadOptions(self.item_key, self.user_key, trust_pickle, self.item_ids, self.max_memory, user_ids)


@dataclass(frozen=True)
class AuditConfig(ReadSettings):
    """Settings of one audit (``popaudit check``); every field has the CLI's default."""

    model: Path | None
    frequencies: Path | None = None
    """Item counts computed elsewhere (Parquet/CSV: item id, count, optionally distinct
    users) in place of ``interactions`` where counts suffice (auditor/loading/frequencies.py)."""
    count_col: str | None = None
    """Count column of ``frequencies`` (auto-detected from common names)."""
    user_count_col: str | None = None
    """Distinct-users column of ``frequencies`` (optional; auto-detected from common names)."""
    trust_pickle: bool = False
    user_ids: Path | None = None
    """Raw user id of each user-table row, in row order (where user rows meet log users)."""
    ks: tuple[int, ...] = (10, 100)
    queries: str | Path = "auto"
    """auto | users | history | a .npy/Parquet file of query vectors (``Path("users")`` is a file)."""
    max_queries: int | None = 10_000
    index: str = "auto"
    popularity: str = "interactions"
    retrieval: bool = True
    probes: bool = True
    bootstrap: int = 1000
    seed: int = 0
    declared: DeclaredTraining = field(default_factory=DeclaredTraining)
    plugins: tuple[Path, ...] = ()
    scheduler: str | None = None
    """Address of a dask.distributed scheduler that runs sharded retrieval; None: local."""
    holdout: Path | None = None
    """Held-out interactions (any log format) for accuracy beside exposure (docs/measures.md)."""
    alphas: tuple[float, ...] = DEFAULT_ALPHAS
    """Norm-aware scorings alpha_<a>: score = |q|^a |k|^a cos(q, k); 0 is cosine, 1 is dot."""
    accuracy_tolerance: float = 0.98
    """The recommended scoring keeps at least this share of dot's NDCG@K."""
    keep_seen: bool = False
    """Keep each user's training items among the accuracy candidates (default: excluded)."""
    trace: Path | None = None
    """A training trace the monitor wrote (docs/monitor.md): the report's training section, and
    measured update angles as evidence for C1, C4 and C5."""
    head_mass: float = GroupPolicy.head_mass
    """The popularity groups' cut-offs (:class:`GroupPolicy`, docs/measures.md): head items' mass share."""
    tail_mass: float = GroupPolicy.tail_mass
    popular_percent: float = GroupPolicy.popular_percent
    niche_fraction: float = GroupPolicy.niche_fraction
    blockbuster_fraction: float = GroupPolicy.blockbuster_fraction
    short_head_mass: float = GroupPolicy.short_head_mass
    top_items: int = 20
    """Items listed on each side of the table of items dot serving raises and lowers most over cosine."""
    recommendations: Path | None = None
    """Served lists (user, item, rank or score; docs/served-lists.md): audited alone when
    ``model`` is None, else as the ``served`` scoring beside dot, cosine and popular."""
    rank_col: str | None = None
    """Rank column of ``recommendations`` (lower first; auto-detected from common names)."""
    score_col: str | None = None
    """Score column of ``recommendations`` (higher first; auto-detected from common names)."""
    device: str = "cpu"
    """Where the one-pass scoring kernel and the numeric probes run: cpu, cuda, or auto
    (cuda when torch sees a CUDA device); auditor/devices.py."""

    PATHS = (*ReadSettings.PATHS, "model", "frequencies", "user_ids", "holdout", "trace", "recommendations", "plugins")

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "queries", word_or_path("queries", self.queries, QUERY_SOURCES))
        # One normal form whatever the caller passed (numpy scalars, a list, repeats):
        # the frozen config is hashable and records what the command line would.
        plain = plain_numbers({name: getattr(self, name) for name in (*_RANGED, *_GROUP_FIELDS, "top_items")},
                              optional=("max_queries", "id_offset", "max_memory"))
        for name, value in plain.items():
            object.__setattr__(self, name, value)
        self._check_served()
        if not self.ks or any(k < 1 for k in self.ks):
            raise InputError(f"cut-offs {setting('ks')} must be positive integers, got {list(self.ks)}")
        if self.index not in INDEX_KINDS:
            raise InputError(f"{setting('index')} must be one of {', '.join(INDEX_KINDS)}, got {self.index!r}")
        if self.device not in DEVICES:
            raise InputError(f"{setting('device')} must be one of {', '.join(DEVICES)}, got {self.device!r}")
        if self.popularity not in POPULARITY_KINDS:
            raise InputError(
                f"{setting('popularity')} must be one of {', '.join(POPULARITY_KINDS)}, got {self.popularity!r}"
            )
        if self.max_queries is not None and self.max_queries < 1:
            raise InputError(f"{setting('max_queries')} must be at least 1, got {self.max_queries}")
        if self.bootstrap < 0:
            raise InputError(f"{setting('bootstrap')} must be >= 0, got {self.bootstrap}")
        if self.max_memory is not None and self.max_memory < 1:
            raise InputError(f"{setting('max_memory')} must be a positive size, got {self.max_memory}")
        if self.seed < 0:
            raise InputError(f"{setting('seed')} must be >= 0, got {self.seed}")
        if self.id_offset is not None and self.id_offset < 0:
            raise InputError(f"{setting('id_offset')} must be >= 0, got {self.id_offset}")
        if self.interactions is not None and self.frequencies is not None:
            raise InputError(
                f"{setting('interactions')} and {setting('frequencies')} both give the item counts; pass one "
                f"({setting('frequencies')} when the log itself is not available)"
            )
        bad_alphas = [a for a in self.alphas if not (math.isfinite(a) and 0.0 <= a <= 1.0)]
        if bad_alphas:
            raise InputError(f"{setting('alphas')} must lie in [0, 1], got {bad_alphas[0]}")
        if (clash := name_clash(self.alphas)) is not None:
            raise InputError(f"{setting('alphas')} {clash}")
        if not (math.isfinite(self.accuracy_tolerance) and 0.0 < self.accuracy_tolerance <= 1.0):
            raise InputError(
                f"{setting('accuracy_tolerance')} must lie in (0, 1], got {self.accuracy_tolerance}"
            )
        # Upper bounds too (auditor/ranges.py): a bootstrap of 10**9 or a K of 10**8 is no audit.
        check_ranges({name: getattr(self, name) for name in _RANGED})
        check_ranges({name: getattr(self, name) for name in (*_GROUP_FIELDS, "top_items")})
        self.groups  # the cut-offs together (head and tail may not overlap, nor niche and blockbuster)

    @property
    def groups(self) -> GroupPolicy:
        """The popularity groups' cut-offs of this audit."""
        return GroupPolicy(**{name: getattr(self, name) for name in _GROUP_FIELDS})

    def list_settings(self) -> dict[str, Any]:
        """What every audit that measures lists records in its ``settings`` (a model's and
        served lists alone, from this one place), so that a report states, and ``popaudit
        diff`` can tell apart, the popularity definition and the groups' cut-offs."""
        return {"popularity": self.popularity, "groups": vars(self.groups)}

    def _check_served(self) -> None:
        """A lists-only audit (no model) needs the lists and the counts they are measured with."""
        if self.model is None and self.recommendations is None:
            raise InputError(f"pass a model, or {setting('recommendations')} FILE to audit served lists alone")
        if self.model is None and self.interactions is None and self.frequencies is None:
            raise InputError(f"served lists alone are measured against the training log: pass {setting('interactions')}")
        if self.recommendations is None:
            for name in ("rank_col", "score_col"):
                if getattr(self, name) is not None:
                    raise InputError(f"{setting(name)} names a column of {setting('recommendations')}, which was not given")

    @property
    def served_log(self) -> LogSpec | None:
        """The served lists (``recommendations``), read with the log's format rules and id
        columns; None without them."""
        if self.recommendations is None:
            return None
        return LogSpec(self.recommendations, "auto", self.user_col, self.item_col, self.max_memory)

    @property
    def load_options(self) -> LoadOptions:
        """The settings the model loader reads."""
        return self.read_options(trust_pickle=self.trust_pickle, user_ids=self.user_ids)

    def input_files(self) -> dict[str, Path | None]:
        """Every file this audit reads, by the setting that names it (outputs must never
        overwrite one of them)."""
        files: dict[str, Path | None] = {
            setting(name): getattr(self, name)
            for name in ("model", "interactions", "frequencies", "item_ids", "user_ids", "holdout", "trace", "recommendations")
        }
        if isinstance(self.queries, Path):
            files[setting("queries")] = self.queries
        for plugin in self.plugins:
            files[f"{setting('plugins')} {plugin}"] = plugin
        return files

    def check_inputs(self) -> None:
        """Raise InputError for an input that is missing or not a regular file (a FIFO
        would block, /dev/zero never end): before any heavy import or reading."""
        from auditor.io import require_regular_file

        if self.model is not None:
            require_regular_file(self.model, "model file", folder_ok=True)
        for path, what in ((self.interactions, "interaction log"), (self.frequencies, "frequencies file"),
                           (self.item_ids, "item ids file"),
                           (self.user_ids, "user ids file"), (self.holdout, "held-out log"),
                           (self.trace, "trace"), (self.recommendations, "recommendations file")):
            if path is not None:
                require_regular_file(path, what)
        if isinstance(self.queries, Path):
            require_regular_file(self.queries, "query file")

    @property
    def holdout_log(self) -> LogSpec | None:
        """The held-out log (``holdout``), read as the training log is; None without one."""
        return None if self.holdout is None else self._log(self.holdout)

    def item_rows(self, bundle: ModelBundle) -> ItemRows:
        """How this audit maps its logs' raw item ids to the rows of ``bundle``'s item
        table: through its ``item_ids`` (raw id of each row), else ``row = id − id_offset``."""
        return ItemRows(bundle.item_ids, bundle.n_items, self.row_ids.shift)

    def with_overrides(self, values: dict[str, Any]) -> AuditConfig:
        """A copy with ``values`` (e.g. one manifest row) replacing fields by name."""
        names = {f.name for f in fields(self)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InputError(f"unknown audit settings: {', '.join(unknown)}")
        return replace(self, **values)


# ---------------------------------------------------------------- --max-memory sizes

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgt]?)(i?b?)\s*$", re.IGNORECASE)


def parse_memory_size(value: Any) -> int:
    """Bytes from an int or text such as ``4G``, ``512MiB``, ``1.5GB`` (powers of 1024)."""
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        number = int(value)
    elif isinstance(value, float) and value.is_integer():
        number = int(value)
    else:
        match = _SIZE.match(str(value))
        if not match:
            raise ValueError(f"{value!r} is not a memory size such as 4G or 512MiB")
        unit = "kmgt".find(match.group(2).lower()) + 1 if match.group(2) else 0
        number = int(float(match.group(1)) * 1024**unit)
    if number <= 0:
        raise ValueError(f"memory size must be positive, got {value!r}")
    return number


def format_size(n_bytes: int) -> str:
    """A size :func:`parse_memory_size` (``--max-memory``) accepts, rounded up: ``512K``, ``3M``, ``2G``."""
    for unit, scale in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n_bytes >= scale:
            return f"{math.ceil(n_bytes / scale)}{unit}"
    return str(n_bytes)
