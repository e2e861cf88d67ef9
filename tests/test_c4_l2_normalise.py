"""C4 from a loss name: L2 normalisation is the cosine (conditions QA F3). ``l2`` followed by
a normalising word (``l2_normalize``, ``l2norm``, TensorFlow's ``tf.math.l2_normalize``) and
torch's ``F.normalize`` read as cosine; plain ``l2``, ``euclidean`` and ``mse`` stay distance words."""

from __future__ import annotations

import pytest

from auditor.conditions import classify_loss


@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("l2norm_infonce", "holds"),  # was violated: "L2 distances"
        ("l2_normalize", "holds"),  # was violated
        ("l2_normalized_infonce", "holds"),  # was unknown: "normalized" beside "l2"
        ("L2NormalizedInfoNCE", "holds"),
        ("tf.math.l2_normalize", "holds"),
        ("F.normalize", "holds"),
        ("l2-norm-softmax", "holds"),
        ("l2normalised", "holds"),
        ("l2", "violated"),
        ("l2_loss", "violated"),
        ("l2_reg_bpr", "violated"),
        ("euclidean", "violated"),
        ("mse", "violated"),
        ("dot_l2norm", "unknown"),  # a dot-product word beside the cosine one
        ("norm_penalty", "unknown"),  # a norm alone says nothing of the scores
        ("layernorm_dot", "violated"),
    ],
)
def test_l2_normalisation_is_a_cosine(name: str, status: str) -> None:
    assert classify_loss(name)[0] == status, classify_loss(name)


# Conditions QA round 2, N3: a negating word right before a cosine word says the scores are
# not cosines (the name is unknown unless a dot-product or distance word decides), and l2
# merges with a normalising word only where the two are adjacent in the name.
@pytest.mark.parametrize(
    ("name", "status"),
    [
        ("no_normalize_infonce", "unknown"),  # was holds
        ("without_normalise", "unknown"),  # was holds
        ("non_normalized_infonce", "unknown"),  # was holds
        ("nonnormalized_infonce", "unknown"),  # was holds
        ("NonNormalizedInfoNCE", "unknown"),  # was holds
        ("without_cosine", "unknown"),  # was holds
        ("not-cosine", "unknown"),  # was holds
        ("no_l2_normalize", "unknown"),  # was holds
        ("UnNormalizedInfoNCE", "unknown"),  # was holds ("Un" a segment of its own)
        ("unnormalized_infonce", "unknown"),  # unchanged: now for its reason
        ("unnormalized_dot", "violated"),  # the dot word decides
        ("non_normalized_bpr", "violated"),
        ("cosine_without_normalize", "unknown"),  # a cosine word beside a negated one
        ("l2_dist_normalized", "unknown"),  # was holds: l2 and normalized are not adjacent
        ("l2_loss_normalized", "unknown"),
        # negating words elsewhere, or inside a longer word, negate nothing
        ("cosine_no_temperature", "holds"),
        ("no_temperature_cosine", "holds"),
        ("uniform_cosine", "holds"),
        ("unit_norm_cos", "holds"),
        ("notation_cos", "holds"),
        ("l2_normalized_infonce", "holds"),
        ("denormalize_infonce", "unknown"),
    ],
)
def test_negated_cosine_words_and_l2_adjacency(name: str, status: str) -> None:
    assert classify_loss(name)[0] == status, classify_loss(name)


def test_a_negated_name_says_which_word_it_negates() -> None:
    status, why = classify_loss("no_normalize_infonce")
    assert status == "unknown" and "'no' before 'normalize'" in why and "not cosines" in why
    assert classify_loss("unnormalized_dot") == ("violated", "dot-product logits")
