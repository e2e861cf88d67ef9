"""C4 from a loss name reads the same words in every spelling (conditions QA F5).

The old reader matched cosine words only as token prefixes and dot-product words only as
prefixes of a few words, so in a run-together name whichever word came first won:
``cosinebpr`` held (a BPR loss passing C4), ``dotcosine`` was violated, and
``sphericalloss``/``arcfaceloss`` were unknown while their separated forms held."""

from __future__ import annotations

import pytest

from auditor.conditions import classify_loss
from auditor.conditions.c4_loss import loss_words

SPELLINGS = [
    (("cosine_bpr", "CosineBPR", "cosinebpr", "cosine-BPR"), "unknown"),
    (("dot_cosine", "DotCosine", "dotcosine"), "unknown"),
    (("spherical_loss", "SphericalLoss", "sphericalloss"), "holds"),
    (("arcface_loss", "ArcFaceLoss", "arcfaceloss"), "holds"),
    (("cosine_loss", "CosineLoss", "cosineloss"), "holds"),
    (("infonce-cos", "InfoNCECos", "infoncecos"), "holds"),
    (("bpr_loss", "BPRLoss", "bprloss"), "violated"),
    (("mse_loss", "MSELoss", "mseloss"), "violated"),
    (("log_cosh", "LogCosh", "logcosh"), "violated"),
    (("cost_sensitive", "CostSensitive", "costsensitive"), "unknown"),
    (("sampled_softmax", "SampledSoftmax", "sampledsoftmax"), "unknown"),
]


@pytest.mark.parametrize(("names", "status"), SPELLINGS)
def test_every_spelling_of_a_loss_name_gets_one_verdict(names: tuple[str, ...], status: str) -> None:
    verdicts = {name: classify_loss(name)[0] for name in names}
    assert set(verdicts.values()) == {status}, verdicts
    assert len({tuple(loss_words(name)) for name in names}) == 1


def test_a_name_with_both_kinds_of_word_says_which() -> None:
    status, why = classify_loss("cosinebpr")
    assert status == "unknown" and "'cosine'" in why and "'bpr'" in why


def test_a_short_word_inside_a_longer_unknown_word_does_not_count() -> None:
    assert loss_words("costly") == [] and classify_loss("costly")[0] == "unknown"
    assert loss_words("also") == [] and classify_loss("also")[0] == "unknown"
    assert classify_loss("lightgcn_bpr")[0] == classify_loss("lightgcnbpr")[0] == "violated"
