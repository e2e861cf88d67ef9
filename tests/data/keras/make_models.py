"""Make the Keras fixtures with Keras 3 on its torch backend (no TensorFlow needed).

Run with keras installed (see README.md for the versions):
    KERAS_BACKEND=torch python make_models.py
Writes into this folder:
- two_tower.keras: a functional model, Embedding layers `user_embedding` and
  `item_embedding` scored by a Dot layer, trained with binary cross-entropy (SGD).
- retrieval.weights.h5: a TensorFlow-Recommenders-style subclassed model (attributes
  `query_model` and `candidate_model`, each a Sequential holding an Embedding), trained
  with in-batch softmax over dot products (SGD), saved with save_weights.
- interactions.csv and expected.json (from the models in memory).
"""

import json
import os
from pathlib import Path

os.environ.setdefault("KERAS_BACKEND", "torch")

import keras  # noqa: E402
import numpy as np  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS, DIM, BATCH = 60, 80, 8, 32


def make_log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([np.arange(N_ITEMS), rng.choice(N_ITEMS, 1400, p=p / p.sum())])
    return rng.integers(0, N_USERS, items.size), items


def functional(users: np.ndarray, items: np.ndarray) -> keras.Model:
    user_in = keras.Input(shape=(), dtype="int32", name="user_id")
    item_in = keras.Input(shape=(), dtype="int32", name="item_id")
    user = keras.layers.Embedding(N_USERS, DIM, name="user_embedding")(user_in)
    item = keras.layers.Embedding(N_ITEMS, DIM, name="item_embedding")(item_in)
    score = keras.layers.Dot(axes=1, name="score")([user, item])
    model = keras.Model([user_in, item_in], score, name="two_tower")
    model.compile(optimizer=keras.optimizers.SGD(0.5), loss=keras.losses.BinaryCrossentropy(from_logits=True))
    rng = np.random.default_rng(1)
    neg = rng.integers(0, N_ITEMS, items.size)  # one uniform negative per positive
    x = [np.concatenate([users, users]).astype("int32"), np.concatenate([items, neg]).astype("int32")]
    y = np.concatenate([np.ones(items.size), np.zeros(items.size)]).astype("float32")
    model.fit(x, y, epochs=20, batch_size=BATCH, verbose=0)
    return model


class Retrieval(keras.Model):
    """Query and candidate towers as TensorFlow Recommenders names them; in-batch softmax."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.query_model = keras.Sequential([keras.layers.Embedding(N_USERS, DIM)], name="query_model")
        self.candidate_model = keras.Sequential([keras.layers.Embedding(N_ITEMS, DIM)], name="candidate_model")

    def call(self, inputs):
        query, candidate = self.query_model(inputs[0]), self.candidate_model(inputs[1])
        return keras.ops.matmul(query, keras.ops.transpose(candidate))  # (batch, batch) logits


def retrieval(users: np.ndarray, items: np.ndarray) -> Retrieval:
    model = Retrieval(name="retrieval")
    model.compile(optimizer=keras.optimizers.SGD(0.5),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    n = items.size // BATCH * BATCH
    order = np.random.default_rng(2).permutation(items.size)[:n]
    x = [users[order].astype("int32"), items[order].astype("int32")]
    y = np.tile(np.arange(BATCH), n // BATCH)  # each example's positive is itself within its batch
    model.fit(x, y, epochs=20, batch_size=BATCH, shuffle=False, verbose=0)
    return model


def figures(table: np.ndarray, freq: np.ndarray) -> dict:
    norms = np.linalg.norm(table.astype(np.float64), axis=1)
    return {"shape": list(table.shape), "row0": table[0].tolist(), "spearman": float(spearmanr(freq, norms).statistic)}


def main() -> None:
    keras.utils.set_random_seed(0)
    users, items = make_log()
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    freq = np.bincount(items, minlength=N_ITEMS)
    two_tower = functional(users, items)
    two_tower.save(HERE / "two_tower.keras")
    model = retrieval(users, items)
    model.save_weights(HERE / "retrieval.weights.h5")
    expected = {
        "keras": keras.__version__,
        "backend": keras.backend.backend(),
        "two_tower": figures(np.asarray(two_tower.get_layer("item_embedding").embeddings.numpy()), freq),
        "retrieval": figures(np.asarray(model.candidate_model.layers[0].embeddings.numpy()), freq),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
