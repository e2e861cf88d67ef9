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
