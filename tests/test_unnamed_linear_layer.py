"""A linear layer's weight (dim × inputs) taken for the item table without a name that
says so (QA accuracy misc (d)): its rows, not its columns, match the user table's
dimension. One-hot item ids and item features give the same shapes, so it is refused
with what it looks like and what to save, never read as items of the wrong dimension."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from auditor.errors import ModelLoadError
from auditor.loading import LoadOptions, load_model
from auditor.loading.discovery import choose_tables, tensor_infos


def _tables(item_key: str, user_key: str = "user_embedding.weight") -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    return {user_key: torch.randn(30, 4, generator=generator), item_key: torch.randn(4, 40, generator=generator)}


def test_an_unnamed_layer_is_refused_saying_what_it_looks_like() -> None:
    with pytest.raises(ModelLoadError) as caught:
        choose_tables(tensor_infos(_tables("item_tower.weight")), Path("lin.pt"))
    said = str(caught.value)
    assert "'item_tower.weight' of lin.pt has shape [4, 40]: read as 4 item rows of dimension 40" in said
    assert "user table 'user_embedding.weight' [30, 4] (dimension 4), but its 4 rows do" in said
    assert "save its transpose (40 × 4) as the item table" in said


def test_a_layer_named_linear_is_read_transposed(tmp_path: Path) -> None:
    """The name rule decides: ``item_fc.weight`` is read as 40 items of dimension 4, its
    columns, with the norms numpy gives the columns."""
    tables = _tables("item_fc.weight")
    torch.save(tables, tmp_path / "fc.pt")
    bundle = load_model(tmp_path / "fc.pt", LoadOptions())
    expected = np.linalg.norm(tables["item_fc.weight"].numpy().T, axis=1)
    assert bundle.item_table.shape == (40, 4)
    np.testing.assert_allclose(np.linalg.norm(bundle.item_table, axis=1), expected, rtol=1e-6)


@pytest.mark.parametrize("shapes", [((30, 4), (40, 4)), ((30, 4), (4, 4)), ((30, 8), (4, 40))])
def test_tables_whose_rows_do_not_say_a_layer_are_left_alone(shapes: tuple[tuple[int, int], ...]) -> None:
    """A rows table of the user's dimension, a square one, and a mismatch the transpose
    would not mend (8 ≠ 4 and ≠ 40) are not this refusal's: the last keeps its own message."""
    infos = tensor_infos({"user_embedding.weight": torch.zeros(shapes[0]), "item_tower.weight": torch.zeros(shapes[1])})
    assert choose_tables(infos, Path("m.pt")).item.key == "item_tower.weight"
