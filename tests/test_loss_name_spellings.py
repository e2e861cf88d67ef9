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
    assert len({"".join(loss_words(name)) for name in names}) == 1  # log_cosh: log+cosh, logcosh: one word


def test_a_name_with_both_kinds_of_word_says_which() -> None:
    status, why = classify_loss("cosinebpr")
    assert status == "unknown" and "'cosine'" in why and "'bpr'" in why


def test_a_short_word_inside_a_longer_unknown_word_does_not_count() -> None:
    assert loss_words("costly") == [] and classify_loss("costly")[0] == "unknown"
    assert loss_words("also") == [] and classify_loss("also")[0] == "unknown"
    assert classify_loss("lightgcn_bpr")[0] == classify_loss("lightgcnbpr")[0] == "violated"


# Conditions QA round 2, N2: the F5 reader joined every segment before reading, so a tag the
# user separated glued itself to the word before it (bpr_v2 read as "bprv" + "2", cos_t0.07 as
# "cost"): these were all unknown on the F5 code, and read as their words before F5.
TAGGED = [
    ("bpr_v2", "violated"), ("BPR_v2", "violated"), ("mse_v1", "violated"), ("dot_v2", "violated"),
    ("bpr2", "violated"), ("x_bpr", "violated"), ("dot_t", "violated"), ("BPRLossV2", "violated"),
    ("infonce_cos_v2", "holds"), ("infonce-cos-v2", "holds"), ("cosine_v2", "holds"), ("cosine2", "holds"),
    ("infonce_cos_tau", "holds"), ("cos_t0.07", "holds"), ("cos_t", "holds"), ("CosineLossV2", "holds"),
]


@pytest.mark.parametrize(("name", "status"), TAGGED)
def test_a_word_the_user_separated_counts_whatever_tag_follows(name: str, status: str) -> None:
    assert classify_loss(name)[0] == status


def test_the_glued_letters_rule_stays_inside_one_run_of_letters() -> None:
    assert loss_words("cos_t0.07") == ["cos"] and loss_words("cost") == ["cost"]
    assert loss_words("bpr_v2") == ["bpr"] and loss_words("infonce_cos_tau") == ["infonce", "cos"]
    for name, status in [("cosinebpr", "unknown"), ("dotcosine", "unknown"), ("sphericalloss", "holds"),
                         ("arcfaceloss", "holds"), ("costly", "unknown"), ("cosx_yyyy", "unknown"),
                         ("CoSENT", "holds"), ("log_cosh", "violated"), ("cost_sensitive_bpr", "violated")]:
        assert classify_loss(name)[0] == status, name
