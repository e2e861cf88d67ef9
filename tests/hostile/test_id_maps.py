"""Hostile id maps: ids a model file stores that cannot map its rows, an id file that
contradicts them, an id offset the table's padding row contradicts."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch

from .corpus import EXIT_ERROR, EXIT_OK, N_ITEMS, Built, Case, check_args, log, params, parquet, run_case, table, write


def _npz_short_ids(d: Path) -> Built:
    """An .npz whose item_ids member has fewer ids than the table has rows."""
    log(d)
    table = np.random.default_rng(0).normal(size=(N_ITEMS, 4)).astype(np.float32)
    np.savez(d / "model.npz", item_embeddings=table, item_ids=np.arange(N_ITEMS - 1))
    return Built(check_args("model.npz"))


def _implicit_save_short_ids(d: Path) -> Built:
    """implicit's model.save members plus an item_ids member of fewer ids than rows (was dropped)."""
    log(d)
    table = np.random.default_rng(0).normal(size=(N_ITEMS, 4)).astype(np.float32)
    np.savez(d / "model.npz", item_factors=table, factors=np.int64(4), item_ids=np.arange(N_ITEMS - 1))
    return Built(check_args("model.npz"))


def _ckpt_short_ids_beside(d: Path) -> Built:
    """{"model_state_dict": sd, "item_ids": 9 ids} for a 10-row table (the ids were dropped)."""
    log(d)
    torch.save({"model_state_dict": {"item_emb.weight": torch.randn(N_ITEMS, 4)},
                "item_ids": torch.arange(N_ITEMS - 1)}, d / "model.pt")  # fmt: skip
    return Built(check_args("model.pt"))


def _ckpt_ids_inside_and_beside_differ(d: Path) -> Built:
    """item_ids inside model_state_dict and beside it, in other orders."""
    log(d)
    torch.save({"model_state_dict": {"item_emb.weight": torch.randn(N_ITEMS, 4), "item_ids": torch.arange(N_ITEMS)},
                "item_ids": torch.arange(N_ITEMS).flip(0)}, d / "model.pt")  # fmt: skip
    return Built(check_args("model.pt"))


def _lightning_buffer_ids_beside_differ(d: Path) -> Built:
    """Loaders F4: a Lightning `model.item_ids` buffer and other ids beside the state_dict."""
    log(d)
    torch.save({"state_dict": {"model.item_emb.weight": torch.randn(N_ITEMS, 4), "model.item_ids": torch.arange(N_ITEMS)},
                "pytorch-lightning_version": "2.4.0", "item_ids": torch.arange(N_ITEMS).flip(0)}, d / "model.ckpt")  # fmt: skip
    return Built(check_args("model.ckpt"))


def _float_id_buffer(d: Path) -> Built:
    """A state dict whose item_ids buffer holds floats: no id map."""
    log(d)
    torch.save({"item_emb.weight": torch.randn(N_ITEMS, 4), "item_ids": torch.rand(N_ITEMS)}, d / "model.pt")
    return Built(check_args("model.pt"))


def _contradicting_id_file(d: Path) -> Built:
    """A Parquet table storing ids 0..9 in reverse row order, and --item-ids in row order."""
    log(d)
    vectors = np.random.default_rng(0).normal(size=(N_ITEMS, 4)).astype(np.float32)
    parquet(d, "items.parquet", {"item_id": np.arange(N_ITEMS)[::-1].copy(),
                                 "embedding": pa.array(list(vectors), pa.list_(pa.float32()))})  # fmt: skip
    write(d, "ids.txt", "".join(f"{i}\n" for i in range(N_ITEMS)))
    return Built(check_args("items.parquet", "--item-ids", "ids.txt"))


def _offset_onto_padding(d: Path) -> Built:
    """nn.Embedding(n + 1, padding_idx=0): row 0 zeros, rows = 1-based ids; --id-offset 1 given."""
    log(d, ids=list(range(1, N_ITEMS + 1)))
    torch.save({"item_emb.weight": torch.cat([torch.zeros(1, 4), torch.randn(N_ITEMS, 4)])}, d / "model.pt")
    return Built(check_args("model.pt", "--id-offset", "1"))


def _offset_beside_stored_ids(d: Path) -> Built:
    """An .npz storing its item ids, --id-offset 1 and no log: the offset applies to no row."""
    table = np.random.default_rng(0).normal(size=(N_ITEMS, 4)).astype(np.float32)
    np.savez(d / "model.npz", item_embeddings=table, item_ids=np.arange(1, N_ITEMS + 1))
    return Built(check_args("model.npz", "--id-offset", "1", interactions=None))


def _ids_off_by_one(d: Path) -> Built:
    """An .npz storing ids 1..10 for its rows, and a log of ids 0..9."""
    log(d)
    table = np.random.default_rng(0).normal(size=(N_ITEMS, 4)).astype(np.float32)
    np.savez(d / "model.npz", item_embeddings=table, item_ids=np.arange(1, N_ITEMS + 1))
    return Built(check_args("model.npz"))


def _rare_id_past_stored_ids(renumbered: bool, assumed: tuple[str, ...] = ()) -> Callable[[Path], Built]:
    """QA12 Loaders F3: ids 0..99 stored for the rows, a log of the same items as 1..100 whose
    id past the numbering (100) carries 1 of 991 interactions: it was audited silently on
    every item's neighbour's row. ``renumbered``: with the fix, an id file of each stored id
    plus 1 (the same order renumbered, audited with a warning). ``assumed``: options such as
    ``--assume-row-ids``, which audits the shifted mapping, warned with the id file (N2)."""
    def build(d: Path) -> Built:
        items = np.r_[np.repeat(np.arange(1, 100), 10), 100]
        pq.write_table(pa.table({"user_id": np.arange(items.size) % 7, "item_id": items}), d / "log.parquet")
        table = np.random.default_rng(0).normal(size=(100, 4)).astype(np.float32)
        np.savez(d / "model.npz", item_embeddings=table, item_ids=np.arange(100))
        if not renumbered:
            return Built(check_args("model.npz", *assumed))
        (d / "ids.txt").write_text("".join(f"{k + 1}\n" for k in range(100)))
        return Built(check_args("model.npz", "--item-ids", "ids.txt", "--format", "json"))
    return build


def _user_ids_shifted(renumbered: bool, assumed: tuple[str, ...] = ()) -> Callable[[Path], Built]:
    """QA12 Loaders N1: user ids 0..4 stored for the user rows, a log numbering the users
    1..5: four of five users were queried with their neighbour's vector, silently.
    ``renumbered``: with the fix, a user id file of each stored id plus 1. ``assumed``:
    ``--assume-row-ids``, which audits the shifted mapping, warned with the id file
    (Loaders verify-2 N2 e)."""
    def build(d: Path) -> Built:
        items = np.repeat(np.arange(N_ITEMS), 3)
        pq.write_table(pa.table({"user_id": np.arange(items.size) % 5 + 1, "item_id": items}), d / "log.parquet")
        g = np.random.default_rng(0)
        torch.save({"user_embedding.weight": torch.from_numpy(g.normal(size=(5, 4)).astype(np.float32)),
                    "item_embedding.weight": torch.from_numpy(g.normal(size=(N_ITEMS, 4)).astype(np.float32)),
                    "user_ids": torch.tensor([3, 0, 4, 1, 2])}, d / "model.pt")
        if not renumbered:
            return Built(check_args("model.pt", *assumed))
        (d / "uids.txt").write_text("4\n1\n5\n2\n3\n")
        return Built(check_args("model.pt", "--user-ids", "uids.txt", "--format", "json"))
    return build


def _user_offset_assumed(d: Path) -> Built:
    """QA12 Logs verify-2 N4: 0-based user ids taken as rows under a wrong --id-offset 1 (the
    items mapped through an id file) and --assume-row-ids: every user on its neighbour's row,
    said only as a user without a row; warned now with the offset that fits (none)."""
    torch.save({"user_embedding.weight": torch.zeros(5, 4) + 1, "item_embedding.weight": torch.eye(N_ITEMS, 4)},
               d / "model.pt")
    items = np.repeat(np.arange(N_ITEMS), 3)
    pq.write_table(pa.table({"user_id": np.arange(items.size) % 5, "item_id": items}), d / "log.parquet")
    (d / "items.txt").write_text("".join(f"{k}\n" for k in range(N_ITEMS)))
    return Built(check_args("model.pt", "--item-ids", "items.txt", "--id-offset", "1", "--assume-row-ids", "--format",
                            "json"))


PADDED = [f"{k:03d}" for k in range(N_ITEMS)]


def _padded_csv_without_ids(d: Path) -> Built:
    """A CSV log of zero-padded ids "000".."009" and no id file: text, not rows 0..9 (Logs F1)."""
    model = table(d)
    return Built(check_args(model, interactions=log(d, "log.csv", ids=PADDED)))


def _padded_csv_with_unpadded_ids(d: Path) -> Built:
    """A CSV log of "000".."009" against an id file of 0..9: spelled otherwise, nothing matches."""
    model = table(d)
    write(d, "ids.txt", "".join(f"{i}\n" for i in range(N_ITEMS)))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d, "log.csv", ids=PADDED)))


def _plain_log_with_padded_ids(d: Path) -> Built:
    """A log of 0..9 against an id file of "000".."009": spelled otherwise, nothing matches."""
    model = table(d)
    write(d, "ids.txt", "".join(f"{i}\n" for i in PADDED))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d)))


def _plain_log_with_partly_padded_ids(d: Path) -> Built:
    """A log of 0..9 (item i i + 1 times) against an id file padding 5..9 alone ("05"): the
    most-seen items map to no row, and the share refusal names the padding (Logs N2, QA 12)."""
    model = table(d)
    write(d, "ids.txt", "".join(f"{i}\n" if i < 5 else f"{i:02d}\n" for i in range(N_ITEMS)))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d)))


def _plain_log_with_partly_decimal_ids(d: Path) -> Built:
    """The decimal sibling (Logs verify-2 N5, QA 12): an id file writing 5..9 alone as whole
    decimals ("5.0"): the share refusal names the decimals, not only "list the raw ids"."""
    model = table(d)
    write(d, "ids.txt", "".join(f"{i}\n" if i < 5 else f"{i}.0\n" for i in range(N_ITEMS)))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d)))


def _other_ids_file(d: Path) -> Built:
    """A log of 0..9 against an id file of "x0".."x9": no spelling in common."""
    model = table(d)
    write(d, "ids.txt", "".join(f"x{i}\n" for i in range(N_ITEMS)))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d)))


def _padded_parquet_with_padded_ids(d: Path) -> Built:
    """A Parquet string log and a .txt id file of the same padded ids: every row maps (exit 0)."""
    model = table(d)
    write(d, "ids.txt", "".join(f"{i}\n" for i in PADDED))
    return Built(check_args(model, "--item-ids", "ids.txt", interactions=log(d, "log.parquet", ids=PADDED)))


def _text_row_numbers_parquet(d: Path) -> Built:
    """A Parquet string column holding "0".."9" for a 10-row table: row numbers (Logs F2)."""
    model = table(d)
    return Built(check_args(model, interactions=log(d, "log.parquet", ids=[str(i) for i in range(N_ITEMS)])))


def _id_file_missing_most_interactions(d: Path) -> Built:
    """An id file naming ids 100.. for rows 0..8: only row 9's interactions (10 of 55) map (Logs F4)."""
    model = table(d)
    log(d)
    write(d, "ids.txt", "".join(f"{100 + i}\n" for i in range(N_ITEMS - 1)) + f"{N_ITEMS - 1}\n")
    return Built(check_args(model, "--item-ids", "ids.txt"))


def _nan_in_float_id_file(d: Path) -> Built:
    """A float .npy id file with NaN for row 3 (Logs F3): an empty id, named by row."""
    model = table(d)
    log(d)
    np.save(d / "ids.npy", np.array([float(i) if i != 3 else np.nan for i in range(N_ITEMS)]))
    return Built(check_args(model, "--item-ids", "ids.npy"))


def _decimal_id_file_beside_integer_log(d: Path) -> Built:
    """An id file "0.0".. beside a log of integers (Logs F2): decimals are text, so nothing matches."""
    model = table(d)
    log(d)
    write(d, "ids.txt", "".join(f"{i}.0\n" for i in range(N_ITEMS)))
    return Built(check_args(model, "--item-ids", "ids.txt"))


def _recorded_pairs_checkpoint(d: Path, pair_users: list[int]) -> None:
    """A popaudit checkpoint of 4 user rows that stores no user ids, its training pairs
    recorded by user-table row (``pair_users``)."""
    g = torch.Generator().manual_seed(0)
    users, items = torch.randn(4, 4, generator=g), torch.randn(N_ITEMS, 4, generator=g)
    pair_items = [i % N_ITEMS for i in range(len(pair_users))]
    config = {"optimizer": "sgd", "lr": 0.5, "momentum": 0.0, "weight_decay": 0.0, "item_encoder": "embedding",
              "user_encoder": "embedding", "loss": "infonce-cos", "temperature": 0.1, "dim": 4, "init_std": 0.1,
              "epochs": 1, "batch_size": 256, "seed": 0, "n_users": 4, "n_items": N_ITEMS}
    torch.save({"popaudit_checkpoint": 1, "config": config,
                "state_dict": {"user_tower.table.weight": users, "item_tower.table.weight": items},
                "item_embeddings": items, "user_embeddings": users, "item_ids": list(range(N_ITEMS)),
                "item_frequencies": torch.bincount(torch.tensor(pair_items), minlength=N_ITEMS),
                "train_pairs": torch.tensor([pair_users, pair_items]).T.contiguous()}, d / "model.pt")


def _recorded_pairs_renamed_by_user_ids(d: Path) -> Built:
    """No stored user ids, --user-ids names the 4 rows by text ids in another order: the
    recorded pairs follow the rows (was refused: none of the row numbers is among the ids)."""
    _recorded_pairs_checkpoint(d, [0, 0, 1, 2, 3, 3])
    write(d, "users.txt", "u3\nu1\nu0\nu2\n")
    return Built(check_args("model.pt", "--user-ids", "users.txt", interactions=None))


def _recorded_pairs_past_the_user_table(d: Path) -> Built:
    """A recorded training pair names user row 6 of a 4-row user table (was taken as a 7th user)."""
    _recorded_pairs_checkpoint(d, [0, 1, 6])
    return Built(check_args("model.pt", interactions=None))


CASES = [
    Case("decimal-id-file-beside-integer-log", _decimal_id_file_beside_integer_log, EXIT_ERROR,
         r"no interaction in log\.parquet matches a row of the item table: one of the log and --item-ids ids\.txt "
         r"writes every id as a decimal \(3\.0\), the other as an integer \(3\)"),
    Case("nan-in-float-item-id-file", _nan_in_float_id_file, EXIT_ERROR,
         r"item ids file ids\.npy has 1 empty id \(NaN: row 3\); each table row needs its id"),
    Case("id-file-leaves-most-interactions-unmapped", _id_file_missing_most_interactions, EXIT_ERROR,
         r"45 interactions of the 55 in log\.parquet \(81\.8%\) reference 9 item ids with no row under --item-ids "
         r"ids\.txt.*List in --item-ids ids\.txt the raw item id of each row as log\.parquet spells it \(or "
         r"--assume-row-ids to audit the mapped interactions anyway", absent=r"Pass --item-ids"),
    Case("zero-padded-csv-ids-without-id-file", _padded_csv_without_ids, EXIT_ERROR,
         r"item ids in log\.csv are not integers \(the first in data row 1, counting from 1 after any header\)"
         r".*pass --item-ids FILE"),
    Case("zero-padded-csv-ids-against-unpadded-id-file", _padded_csv_with_unpadded_ids, EXIT_ERROR,
         r"no interaction in log\.csv matches a row of the item table: the log's ids are zero-padded \('000'\), "
         r"those of --item-ids ids\.txt are not \(0\); a zero-padded id is text, so it matches no integer id: write both the same way",
         absent=r"pass --item-ids"),
    # Logs F2 (QA 12): a padded id file beside a log of integers was told to "pass --item-ids", already passed.
    Case("unpadded-log-against-zero-padded-id-file", _plain_log_with_padded_ids, EXIT_ERROR,
         r"no interaction in log\.parquet matches a row of the item table: the ids of --item-ids ids\.txt are "
         r"zero-padded \('000'\), the log's are not \(0\); a zero-padded id is text", absent=r"pass --item-ids"),
    Case("unpadded-log-against-partly-zero-padded-id-file", _plain_log_with_partly_padded_ids, EXIT_ERROR,
         r"40 interactions of the 55 in log\.parquet \(72\.7%\) reference 5 item ids with no row under --item-ids "
         r"ids\.txt.*The ids of --item-ids ids\.txt are zero-padded \('05'\), the log's are not \(5\); a zero-padded "
         r"id is text, so it matches no integer id: write both the same way \(or --assume-row-ids",
         absent=r"List in --item-ids"),
    Case("unpadded-log-against-partly-decimal-id-file", _plain_log_with_partly_decimal_ids, EXIT_ERROR,
         r"40 interactions of the 55 in log\.parquet \(72\.7%\) reference 5 item ids with no row under --item-ids "
         r"ids\.txt.*Some of the ids of --item-ids ids\.txt are written as decimals \('5\.0'\), the log's as "
         r"integers \(5\); a decimal id is text, so it matches no integer id: write both the same way",
         absent=r"List in --item-ids"),
    Case("id-file-of-other-ids-names-both-spellings", _other_ids_file, EXIT_ERROR,
         r"no interaction in log\.parquet matches a row of the item table: the log's items are not the model's items, "
         r"or are spelled otherwise \(the log: 0; --item-ids ids\.txt: 'x0'\); list in --item-ids ids\.txt the raw "
         r"item id of each row as the log spells it", absent=r"pass --item-ids"),
    Case("zero-padded-parquet-ids-with-padded-id-file", _padded_parquet_with_padded_ids, EXIT_OK, None),
    Case("parquet-text-row-numbers", _text_row_numbers_parquet, EXIT_OK, None),
    Case("npz-item-ids-shorter-than-table", _npz_short_ids, EXIT_ERROR,
         r"model\.npz \(`item_ids`\) is named as the raw item id of each row, but it holds 9 ids for the 10 rows of "
         r"the item table; pass --item-ids FILE"),
    Case("implicit-save-item-ids-shorter-than-table", _implicit_save_short_ids, EXIT_ERROR,
         r"model\.npz \(`item_ids`\) is named as the raw item id of each row, but it holds 9 ids for the 10 rows of "
         r"the item table; pass --item-ids FILE"),
    Case("checkpoint-item-ids-beside-weights-shorter", _ckpt_short_ids_beside, EXIT_ERROR,
         r"model\.pt \(`item_ids`\) is named as the raw item id of each row, but it holds 9 ids for the 10 rows of "
         r"the item table; pass --item-ids FILE"),
    Case("checkpoint-item-ids-inside-and-beside-differ", _ckpt_ids_inside_and_beside_differ, EXIT_ERROR,
         r"model\.pt stores `item_ids` both beside `model_state_dict` and inside it \(`item_ids`\), with different "
         r"values: which "
         r"maps the rows is not evident; keep one, or pass --item-ids FILE"),
    Case("lightning-buffer-item-ids-and-beside-differ", _lightning_buffer_ids_beside_differ, EXIT_ERROR,
         r"model\.ckpt stores `item_ids` both beside `state_dict` and inside it \(`model\.item_ids`\), with different "
         r"values: which maps the rows is not evident; keep one, or pass --item-ids FILE"),
    Case("state-dict-float-item-ids", _float_id_buffer, EXIT_ERROR,
         r"model\.pt \(`item_ids`\) is named as the raw item id of each row, but it holds float32 values of shape "
         r"\[10\], not a list of integer or text ids; pass --item-ids FILE"),
    Case("item-ids-contradict-stored-ids", _contradicting_id_file, EXIT_ERROR,
         r"--item-ids ids\.txt contradicts the item ids stored in items\.parquet: 10 of the 10 rows differ.*drop "
         r"--item-ids to map the rows through the stored ids"),
    Case("id-offset-onto-padding-row", _offset_onto_padding, EXIT_ERROR,
         r"with --id-offset 1, item id 1 \(1 interaction in log\.parquet\) lands on row 0 of the 11-row item table, "
         r"which is all zeros.*Drop --id-offset"),
    Case("id-offset-beside-stored-ids-without-log", _offset_beside_stored_ids, EXIT_ERROR,
         r"--id-offset applies where ids are taken as rows, but the item rows of model\.npz are mapped through the "
         r"item ids stored in model\.npz"),
    Case("log-ids-off-by-one-from-stored-ids", _ids_off_by_one, EXIT_ERROR,
         r"1 of the 10 distinct item ids in log\.parquet \(1 interaction\) have no row under the item ids stored in "
         r"model\.npz \(`item_ids`\), while every id plus 1 has one.*--item-ids FILE"),
    Case("log-ids-shifted-from-stored-ids-by-a-rare-new-id", _rare_id_past_stored_ids(False), EXIT_ERROR,
         r"1 of the 100 distinct item ids in log\.parquet \(1 interaction\) have no row under the item ids stored in "
         r"model\.npz \(`item_ids`\), while every id minus 1 has one: the ids look shifted.*--item-ids FILE"),
    Case("log-ids-shifted-from-stored-ids-assumed-as-mapped",
         _rare_id_past_stored_ids(False, ("--assume-row-ids", "--format", "json")), EXIT_OK, None,
         stdout=r"the ids look shifted: if the rows are the ids minus 1 \(1-based ids\), --assume-row-ids audited each "
                r"item on its neighbour's row.*pass --item-ids FILE holding each row's id under the item ids stored in "
                r"model\.npz \(`item_ids`\) \+1, in row order"),
    Case("stored-ids-renumbered-by-an-id-file", _rare_id_past_stored_ids(True), EXIT_OK, None,
         stdout=r"--item-ids ids\.txt renumbers the item ids stored in model\.npz: every row's id \+1"),
    Case("log-user-ids-shifted-from-stored-user-ids", _user_ids_shifted(False), EXIT_ERROR,
         r"1 of the 5 distinct user ids in the training log log\.parquet have no row under the user ids stored in "
         r"model\.pt \(`user_ids`\), while every id minus 1 has one: the ids look shifted.*--user-ids FILE.*each "
         r"row's id \+1"),
    Case("stored-user-ids-renumbered-by-a-user-id-file", _user_ids_shifted(True), EXIT_OK, None,
         stdout=r"--user-ids uids\.txt renumbers the user ids stored in model\.pt: every row's id \+1"),
    Case("log-user-ids-shifted-from-stored-user-ids-assumed-as-mapped",
         _user_ids_shifted(False, ("--assume-row-ids", "--format", "json")), EXIT_OK, None,
         stdout=r"the ids look shifted: if the rows are the ids minus 1 \(1-based ids\), --assume-row-ids audited each "
                r"user on its neighbour's row and made each without one a zero query; pass --user-ids FILE holding "
                r"each row's id under the user ids stored in model\.pt \(`user_ids`\) \+1, in row order"),
    Case("user-ids-under-a-wrong-offset-assumed-as-rows", _user_offset_assumed, EXIT_OK, None,
         stdout=r"1 of the 5 distinct user ids of the training log log\.parquet have no row of the 5-row user table "
                r"taken minus 1 as rows \(--assume-row-ids took them as rows and made each without one a zero query\), "
                r"while every id has a row without --id-offset 1 \(row = id\): if the rows are the ids, drop "
                r"--id-offset"),
    Case("recorded-pairs-without-stored-ids-renamed-by-user-ids", _recorded_pairs_renamed_by_user_ids, EXIT_OK,
         None),
    Case("recorded-pairs-past-the-user-table", _recorded_pairs_past_the_user_table, EXIT_ERROR,
         r"model\.pt: train_pairs row 2 \(6, 2\) is outside the tables \(4 users, 10 items\)"),
]


PRODUCT_FAILURES: list[Case] = []


@pytest.mark.parametrize("case", params(CASES, PRODUCT_FAILURES))
def test_hostile_id_maps(case: Case, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run_case(case, tmp_path, monkeypatch)
