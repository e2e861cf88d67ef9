"""Make the ONNX fixture: a PyTorch two-tower model trained here, exported by torch.onnx.export.

Run with torch, onnx and onnxscript installed (see README.md for the versions):
    python make_model.py
Writes two_tower.onnx (the graph: Gather over `item_embedding.weight` / `user_embedding.weight`),
two_tower.onnx.data (the weights, as the exporter keeps them beside the graph),
interactions.csv and expected.json.
"""

import json
from pathlib import Path

import numpy as np
import onnx
import torch
from scipy.stats import spearmanr

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS, DIM = 60, 80, 8


def make_log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([np.arange(N_ITEMS), rng.choice(N_ITEMS, 1400, p=p / p.sum())])
    return rng.integers(0, N_USERS, items.size), items


class TwoTower(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.user_embedding = torch.nn.Embedding(N_USERS, DIM)
        self.item_embedding = torch.nn.Embedding(N_ITEMS, DIM)

    def forward(self, user_id: torch.Tensor, item_id: torch.Tensor) -> torch.Tensor:
        return (self.user_embedding(user_id) * self.item_embedding(item_id)).sum(-1)


def main() -> None:
    torch.manual_seed(0)
    users, items = make_log()
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    model = TwoTower()
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    u, i = torch.as_tensor(users), torch.as_tensor(items)
    for _ in range(30):  # in-batch softmax over cosine scores (temperature 0.1), batches of 64
        for b in torch.randperm(len(i)).split(64):
            q = torch.nn.functional.normalize(model.user_embedding(u[b]), dim=-1)
            c = torch.nn.functional.normalize(model.item_embedding(i[b]), dim=-1)
            loss = torch.nn.functional.cross_entropy(q @ c.T / 0.1, torch.arange(len(b)))
            opt.zero_grad()
            loss.backward()
            opt.step()
    args = (torch.zeros(4, dtype=torch.long), torch.zeros(4, dtype=torch.long))
    torch.onnx.export(model, args, HERE / "two_tower.onnx", input_names=["user_id", "item_id"], dynamo=True)
    table = model.item_embedding.weight.detach().numpy()
    freq = np.bincount(items, minlength=N_ITEMS)
    expected = {
        "torch": torch.__version__,
        "onnx": onnx.__version__,
        "shape": list(table.shape),
        "row0": table[0].tolist(),
        "spearman": float(spearmanr(freq, np.linalg.norm(table.astype(np.float64), axis=1)).statistic),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
