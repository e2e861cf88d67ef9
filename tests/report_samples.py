"""Hand-built AuditResult objects for the report renderer tests (no audit is run).

``full_result`` fills every section; its frequency–norm section is computed by the
metrics module from seeded synthetic arrays (so plots and tables agree); ``bare_result`` has only the verdict and inputs.
"""

from __future__ import annotations

import numpy as np
from auditor.metrics.frequency_norm import frequency_norm_stats
from auditor.probe_results import GradientAlignment, ProbeOutcome, UpdateProbe
from auditor.result import (
    builtin_list_measures,
    AuditResult,
    Condition,
    CutoffMeasures,
    Inputs,
    ListMeasures,
    PlotData,
    Retrieval,
    Verdict,
)

N_ITEMS = 3000
N_COLD = 200
KS = (10, 100)


def synthetic_arrays(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(norms, frequencies): Zipf-like frequencies, norms growing like freq^0.2 with noise."""
    rng = np.random.default_rng(seed)
    freq = np.floor(2000.0 / np.arange(1, N_ITEMS + 1) ** 0.9).astype(np.int64)
    freq[-N_COLD:] = 0
    rng.shuffle(freq)
    norms = 0.6 * (1.0 + freq) ** 0.2 * rng.lognormal(0.0, 0.08, N_ITEMS)
    return norms, freq


def builtin_measures(*values: float | None) -> ListMeasures:
    """The built-in list measures with these values, in report order (head_share_1pct,
    head_share_10pct, head_share_20pct, arp, aplt, gini, coverage, novelty)."""
    names = list(builtin_list_measures())
    assert len(values) == len(names)
    return ListMeasures(dict(zip(names, values)))


def measures(head1: float, head10: float, gini: float) -> ListMeasures:
    return builtin_measures(head1, head10, min(1.0, head10 * 1.5), 400.0 * head1 + 20, 1 - head10, gini,
                            0.9 - gini * 0.8, 6.0 - head1 * 4)


def full_result() -> AuditResult:
    """Every section present, including an escaping trap in the evidence text."""
    norms, freq = synthetic_arrays()
    rng = np.random.default_rng(1)
    exposure = {}
    for scoring, power in (("dot", 1.2), ("cosine", 0.4), ("popular", 3.0)):
        exposure[scoring] = {}
        for k in KS:
            weights = (1.0 + freq) ** power
            picks = rng.choice(N_ITEMS, size=500 * k, p=weights / weights.sum())
            exposure[scoring][k] = np.bincount(picks, minlength=N_ITEMS)
    angles = np.concatenate([np.full(900, 90.0) + rng.normal(0, 0.3, 900), rng.uniform(0, 180, 100)])
    fn, _notes = frequency_norm_stats(norms, freq, n_bootstrap=200, seed=0)
    retrieval = Retrieval(
        n_queries=500, index="ivf", queries="users",
        at={10: CutoffMeasures(measures(0.412, 0.83, 0.91), measures(0.097, 0.41, 0.62),
                               measures(1.0, 1.0, 0.997), 0.38),
            100: CutoffMeasures(measures(0.341, 0.77, 0.88), measures(0.082, 0.36, 0.58),
                                measures(0.3, 1.0, 0.99), 0.45)},
        recall={10: 0.974, 100: 0.962}, n_zero_queries=2,
        definitions={"head": "items with frequency >= that of the c-th most frequent item",
                     "long tail": "items outside the short head holding 80% of interactions"},
    )
    conditions = {
        "C1": Condition("plain SGD", "holds", "optimizer state: SGD, momentum 0, weight decay 0"),
        "C2": Condition("parameter-linear encoder", "holds", "item tower is an nn.Embedding"),
        "C3": Condition("non-shared parameters", "unknown", "no live encoder <script>alert(1)</script> & co"),
        "C4": Condition("cosine-based loss", "violated", "config loss = infonce-dot | dot logits"),
        "C5": Condition("large learning rate", "holds", "lr = 1.0 (declared)"),
    }
    moved = np.abs(angles - 90.0) < 45.0
    probes = ProbeOutcome(
        dtype="float32", seed=0, batch_source="interactions (seeded sample)", batch_size=256,
        gradient_alignment=GradientAlignment(n=64, median=3.1e-8, max=1.2e-7, tolerance=1e-5, orthogonal=True),
        update=UpdateProbe(
            angles=angles, residuals=rng.normal(0, 1e-7, angles.size), growth=np.full(angles.size, 0.02),
            growth_per_appearance=np.full(angles.size, 0.01), relative_change=np.where(moved, 0.02, 0.5),
            n_evaluated=1200, optimizer="SGD", optimizer_restored=True, lr=1.0, steps=1,
        ),
    )
    return AuditResult(
        inputs=Inputs("runs/2026-11/model with spaces.pt", "data/interactions.parquet", "item_emb.weight",
                      "user_emb.weight", N_ITEMS, 64, int(freq.sum()), "state_dict", None, 940, 13),
        frequency_norm=fn,
        verdict=Verdict(True, "high",
                        "Item norms grow with training frequency and dot-product retrieval serves the head "
                        "about 4 times as often as cosine retrieval.",
                        ["Serve with cosine similarity (normalise item vectors): the top-1% head share at "
                         "K=100 falls from 34.1% to 8.2%.",
                         "Lower the learning rate (ρ fell from 0.62 to 0.18 at η = 0.1 in the lr sweep)."]),
        retrieval=retrieval,
        conditions=conditions,
        probes=probes,
        measures={"my_plugin_score": 0.25, "my_plugin_notes": {"text": "a | b"}},
        settings={"ks": [10, 100], "index": "auto", "seed": 0, "bootstrap": 1000,
                  "queries": {"source": "users", "max_queries": 500}},
        warnings=["the IVF index recalled 96.2% of exact top-100 neighbours; measures are approximate"],
        not_measured={"probes.growth": "the checkpoint has no optimizer state"},
        plot_data=PlotData(norms=norms, frequencies=freq.astype(np.float64), exposure=exposure,
                           update_angles=angles),
    )


def bare_result() -> AuditResult:
    """Only inputs and verdict: every optional section missing, with recorded reasons."""
    return AuditResult(
        inputs=Inputs("table.npy", None, None, None, 50, 8, None),
        frequency_norm=None,
        verdict=Verdict(False, "none", "Nothing could be measured without interactions.", []),
        not_measured={"frequency_norm": "no --interactions given",
                      "retrieval": "the model has no user table and no --queries",
                      "conditions": "no training metadata in a bare .npy table"},
    )
