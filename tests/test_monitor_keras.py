"""The Keras 3 callback with real Keras on the torch backend (auditor/monitor/keras.py)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("KERAS_BACKEND", "torch")
keras = pytest.importorskip("keras")
if keras.backend.backend() != "torch":  # pragma: no cover - Keras was imported with another backend first
    pytest.skip("Keras runs on another backend in this process", allow_module_level=True)

from auditor.errors import TrainingError  # noqa: E402
from auditor.monitor import TrainingAlertWarning, read_trace  # noqa: E402
from auditor.monitor.keras import PopauditCallback  # noqa: E402

N_USERS, N_ITEMS = 30, 50


def data() -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    """Positives with Zipf item popularity and as many uniform negatives."""
    rng = np.random.default_rng(1)
    users = rng.integers(0, N_USERS, 512)
    items = np.minimum(rng.zipf(1.3, 512) - 1, N_ITEMS - 1)
    negatives = rng.integers(0, N_ITEMS, 512)
    u, i = np.concatenate([users, users]), np.concatenate([items, negatives])
    labels = np.concatenate([np.ones(512), np.zeros(512)]).astype("float32")
    counts = np.bincount(i, minlength=N_ITEMS)  # every item row the model trains on
    return [u[:, None], i[:, None]], labels, counts


def model() -> keras.Model:
    """Id embeddings scored by cosine (keras Dot, normalize=True): C1-C4 hold with plain SGD."""
    keras.utils.set_random_seed(0)
    user_in, item_in = keras.Input((1,), dtype="int64"), keras.Input((1,), dtype="int64")
    u = keras.layers.Flatten()(keras.layers.Embedding(N_USERS, 8, name="user_embedding")(user_in))
    q = keras.layers.Flatten()(keras.layers.Embedding(N_ITEMS, 8, name="item_embedding")(item_in))
    score = keras.layers.Rescaling(5.0)(keras.layers.Dot(axes=1, normalize=True)([u, q]))
    net = keras.Model([user_in, item_in], score)
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=2.0), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    return net


def test_keras_writes_a_trace_of_real_steps(tmp_path: Path) -> None:
    x, y, counts = data()
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)
    model().fit(x, y, batch_size=128, epochs=2, shuffle=True, verbose=0, callbacks=[callback])
    trace = read_trace(path)
    assert trace.header.source == "keras" and trace.header.counts == "given" and trace.header.optimizer == "SGD"
    assert [r.step for r in trace.steps] == [3, 6, 9, 12, 15] and [r.epoch for r in trace.epochs] == [1, 2]
    assert trace.steps[0].lr == pytest.approx(2.0) and trace.epochs[0].loss is not None and trace.complete
    angles = trace.angles()  # whole-table comparison: every row the step moved, all at 90°
    assert angles is not None and angles.n >= 5 * 20 and angles.share_90_1 == 1.0


def test_check_renders_the_keras_trace(tmp_path: Path) -> None:
    """The trace beside the trained table: check --trace shows it and takes C1 and C4 from its angles."""
    import json

    from click.testing import CliRunner

    from auditor.cli import cli

    x, y, counts = data()
    path = tmp_path / "trace.jsonl"
    net = model()
    net.fit(x, y, batch_size=128, epochs=2, shuffle=True, verbose=0,
            callbacks=[PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)])
    table = keras.ops.convert_to_numpy(net.get_layer("item_embedding").embeddings)
    np.save(tmp_path / "items.npy", table)
    (tmp_path / "counts.csv").write_text("item_id,count\n" + "".join(f"{i},{c}\n" for i, c in enumerate(counts)))
    done = CliRunner().invoke(cli, ["check", str(tmp_path / "items.npy"), "--frequencies", str(tmp_path / "counts.csv"),
                                    "--trace", str(path), "--bootstrap", "0", "--format", "json"])
    assert done.exit_code == 0, done.output
    report = json.loads(done.stdout)
    trace = read_trace(path)
    assert report["training"]["source"] == "keras" and report["training"]["matches_model"]
    assert [p["step"] for p in report["training"]["points"]] == [r.step for r in trace.steps]
    assert trace.epochs[-1].spearman == report["frequency_norm"]["spearman"]  # the same table and counts
    for key in ("C1", "C4"):
        assert report["conditions"][key]["status"] == "holds" and "(source: trace)" in report["conditions"][key]["evidence"]


def test_an_alert_stops_keras(tmp_path: Path) -> None:
    x, y, counts = data()
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", counts=counts, interval=2, trace=path,
                                alerts=["angle_share_90_1>0.9"], on_alert="stop")
    net = model()
    with pytest.warns(TrainingAlertWarning):
        history = net.fit(x, y, batch_size=128, epochs=5, verbose=0, callbacks=[callback])
    assert len(history.history["loss"]) == 1  # stopped in the first of 5 epochs
    trace = read_trace(path)
    assert [a.step for a in trace.alerts] == [2] and trace.end is not None and "stopped by alert" in trace.end.reason
    with pytest.raises(TrainingError, match="Keras callbacks do not see the batches: give counts"):
        PopauditCallback("item_embedding", counts=None)


def test_a_second_fit_with_the_same_callback_is_refused_and_the_first_trace_kept(tmp_path: Path) -> None:
    """QA F12: a second fit rebuilt the monitor, whose writer replaced the first fit's trace
    and counted steps from 0 again; now it is refused before it trains, the trace untouched."""
    x, y, counts = data()
    path = tmp_path / "trace.jsonl"
    callback = PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)
    net = model()
    net.fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
    first = path.read_bytes()
    with pytest.raises(TrainingError, match="this popaudit callback already watched a fit"):
        net.fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
    assert path.read_bytes() == first and read_trace(path).complete
    assert read_trace(path).header.config["steps_per_epoch"] == -(-len(y) // 128)  # recorded for C5 (QA F13)


def test_keras_resumed_with_initial_epoch_counts_from_the_optimizer_step(tmp_path: Path) -> None:
    """QA round 4, F11: a second fit(initial_epoch=1) with a new callback goes on at the
    optimizer's iterations (8 steps of 128) and epoch 2, and its header says where it begins."""
    x, y, counts = data()
    net = model()
    net.fit(x, y, batch_size=128, epochs=1, verbose=0, callbacks=[PopauditCallback("item_embedding", counts=counts,
                                                                                    interval=3, trace=tmp_path / "a.jsonl")])
    path = tmp_path / "b.jsonl"
    net.fit(x, y, batch_size=128, epochs=2, initial_epoch=1, verbose=0,
            callbacks=[PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)])
    trace = read_trace(path)
    assert int(keras.ops.convert_to_numpy(net.optimizer.iterations)) == 16
    assert trace.header.config["start_step"] == 8 and trace.header.config["start_epoch"] == 2
    assert [(r.kind, r.step, r.epoch) for r in trace.records] == [("step", 9, 2), ("step", 12, 2), ("step", 15, 2),
                                                                 ("epoch", 16, 2)]
    assert trace.end is not None and (trace.end.step, trace.end.epoch) == (16, 2)


def test_keras_step_records_carry_the_loss(tmp_path: Path) -> None:
    """QA round 4, F9: a step record holds the loss Keras reports at that batch (the epoch's
    running mean), so at the epoch's last step it equals the epoch record's loss."""
    x, y, counts = data()
    path = tmp_path / "trace.jsonl"
    model().fit(x, y, batch_size=128, epochs=1, verbose=0,
                callbacks=[PopauditCallback("item_embedding", counts=counts, interval=4, trace=path)])
    trace = read_trace(path)
    assert [r.step for r in trace.steps] == [4, 8] and all(r.loss is not None for r in trace.steps)
    assert trace.steps[-1].loss == pytest.approx(trace.epochs[0].loss, rel=1e-6)


def test_a_layer_the_model_lacks_is_a_training_error_listing_its_embeddings(tmp_path: Path) -> None:
    """QA round 7 (monitor F4): not Keras' own ValueError, but a TrainingError naming the
    model's Embedding layers and how to pass one; nothing trains, no trace is written."""
    x, y, counts = data()
    net = model()
    with pytest.raises(TrainingError, match=(
            r"^items: the Keras model has no layer 'items' \(its Embedding layers: user_embedding, item_embedding\); "
            r"name the item table's layer: PopauditCallback\('item_embedding', counts=...\)$")):
        net.fit(x, y, batch_size=128, epochs=1, verbose=0,
                callbacks=[PopauditCallback("items", counts=counts, trace=tmp_path / "t.jsonl")])
    assert int(net.optimizer.iterations) == 0 and not (tmp_path / "t.jsonl").exists()


def test_the_keras_trace_header_records_the_optimizers_momentum_and_weight_decay(tmp_path: Path) -> None:
    """QA round 7 (monitor F6): the header's config records Keras' SGD momentum and weight decay
    (None: none, 0), so ``check --trace`` can settle C1 from the trace."""
    x, y, counts = data()
    for optimizer, expected in [(keras.optimizers.SGD(learning_rate=2.0), {"momentum": 0.0, "weight_decay": 0.0}),
                                (keras.optimizers.SGD(learning_rate=2.0, momentum=0.9, weight_decay=0.01),
                                 {"momentum": 0.9, "weight_decay": 0.01})]:
        net = model()
        net.compile(optimizer=optimizer, loss=keras.losses.BinaryCrossentropy(from_logits=True))
        path = tmp_path / f"{expected['momentum']}.jsonl"
        net.fit(x, y, batch_size=128, epochs=1, verbose=0,
                callbacks=[PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)])
        config = dict(read_trace(path).header.config)
        assert {k: config[k] for k in expected} == pytest.approx(expected)


def test_keras_records_the_rate_each_step_trained_at(tmp_path: Path) -> None:
    """A schedule evaluated after a step is the next step's: the record at step s carries
    schedule(s − 1), the rate step s ran at (QA monitor F1: it carried schedule(s))."""
    x, y, counts = data()
    net = model()
    schedule = keras.optimizers.schedules.ExponentialDecay(2.0, 4, 0.5)  # 2·0.5^(i/4) at iteration i
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=schedule), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    path = tmp_path / "trace.jsonl"
    net.fit(x, y, batch_size=128, epochs=1, shuffle=False, verbose=0,
            callbacks=[PopauditCallback("item_embedding", counts=counts, interval=3, trace=path)])
    trace = read_trace(path)
    assert [(r.step, r.lr) for r in trace.steps] == [(3, pytest.approx(2.0 * 0.5 ** (2 / 4))),
                                                     (6, pytest.approx(2.0 * 0.5 ** (5 / 4)))]
    assert trace.epochs[0].step == 8 and trace.epochs[0].lr == pytest.approx(2.0 * 0.5 ** (7 / 4))


def _masked_model() -> keras.Model:
    """The model() with the item layer an Embedding(N_ITEMS + 1, mask_zero=True): ids 1..N, row 0 the mask."""
    keras.utils.set_random_seed(0)
    user_in, item_in = keras.Input((1,), dtype="int64"), keras.Input((1,), dtype="int64")
    u = keras.layers.Flatten()(keras.layers.Embedding(N_USERS, 8, name="user_embedding")(user_in))
    q = keras.layers.Flatten()(keras.layers.Embedding(N_ITEMS + 1, 8, mask_zero=True, name="item_embedding")(item_in))
    score = keras.layers.Rescaling(5.0)(keras.layers.Dot(axes=1, normalize=True)([u, q]))
    net = keras.Model([user_in, item_in], score)
    net.compile(optimizer=keras.optimizers.SGD(learning_rate=2.0), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    return net


@pytest.mark.parametrize("per_row", [True, False], ids=["counts-per-table-row", "counts-per-item"])
def test_keras_mask_zero_row_is_left_out_as_check_leaves_it(tmp_path: Path, per_row: bool) -> None:
    """Embedding(mask_zero=True): the trace watches rows 1..N (the mask row 0 is no item, as
    `check` reads the saved .keras), its ρ is scipy's over those rows, and check --trace takes
    it as this model's trace (QA monitor F2: it watched N + 1 rows, a trace of 'another model')."""
    import json

    from click.testing import CliRunner
    from scipy.stats import spearmanr

    from auditor.cli import cli

    x, y, _ = data()
    x = [x[0], x[1] + 1]  # ids 1..N
    counts = np.bincount(x[1][:, 0], minlength=N_ITEMS + 1)
    assert counts[0] == 0
    net, path = _masked_model(), tmp_path / "trace.jsonl"
    net.fit(x, y, batch_size=128, epochs=2, verbose=0, callbacks=[
        PopauditCallback("item_embedding", counts=counts if per_row else counts[1:], interval=0, trace=path)])
    trace = read_trace(path)
    table = keras.ops.convert_to_numpy(net.get_layer("item_embedding").embeddings)[1:]
    expected = spearmanr(counts[1:], np.linalg.norm(table.astype(np.float64), axis=1)).statistic
    assert trace.header.n_items == N_ITEMS and trace.epochs[-1].spearman == pytest.approx(expected, abs=1e-12)
    net.save(tmp_path / "m.keras")
    log = np.column_stack([x[0][:, 0], x[1][:, 0]])  # every row trained on: the counts above
    np.savetxt(tmp_path / "log.csv", log, fmt="%d", delimiter=",", header="user_id,item_id", comments="")
    result = CliRunner().invoke(cli, ["check", str(tmp_path / "m.keras"), "--interactions", str(tmp_path / "log.csv"),
                                      "--trace", str(path), "-q", "--json", str(tmp_path / "c.json")])
    assert result.exit_code == 0, result.output
    training = json.loads((tmp_path / "c.json").read_text())["training"]
    assert training["mismatch"] is None and training["matches_model"] is True, training


def test_keras_mask_zero_refuses_a_count_at_the_mask_id(tmp_path: Path) -> None:
    x, y, _ = data()
    counts = np.bincount(x[1][:, 0] + 1, minlength=N_ITEMS + 1)
    counts[0] = 3
    callback = PopauditCallback("item_embedding", counts=counts, trace=tmp_path / "t.jsonl")
    with pytest.raises(TrainingError, match=r"Embedding\(mask_zero=True\).*counts\[0\] is 3: give the counts of ids 1\.\.50"):
        _masked_model().fit([x[0], x[1] + 1], y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
    assert not (tmp_path / "t.jsonl").exists()


def test_keras_mask_zero_names_both_lengths_for_counts_of_another_length(tmp_path: Path) -> None:
    """Counts of neither N nor N + 1 entries for an Embedding(N + 1, mask_zero=True): the
    message quotes the layer's N + 1 rows and the mask rule, not the N rows the monitor
    watches (QA monitor N4: "counts has 49 entries but the item table has 50 rows")."""
    x, y, _ = data()
    counts = np.bincount(x[1][:, 0] + 1, minlength=N_ITEMS + 1)[1:-1]
    assert counts.shape[0] == N_ITEMS - 1
    callback = PopauditCallback("item_embedding", counts=counts, trace=tmp_path / "t.jsonl")
    with pytest.raises(TrainingError, match=rf"counts has {N_ITEMS - 1} entries, but the item layer is an "
                       rf"Embedding\(mask_zero=True\) of {N_ITEMS + 1} rows.*id 1\.\.{N_ITEMS} \({N_ITEMS} entries\), "
                       rf"or {N_ITEMS + 1} entries, one per table row"):
        _masked_model().fit([x[0], x[1] + 1], y, batch_size=128, epochs=1, verbose=0, callbacks=[callback])
    assert not (tmp_path / "t.jsonl").exists()
