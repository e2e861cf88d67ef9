"""Make the TorchRec DistributedModelParallel fixtures with torch's own ShardedTensor.

torchrec 1.9.2 installs here but does not import on CPU (its fbgemm-gpu-cpu 1.9.0 kernels
are built against another torch than 2.13.0), so the files follow what TorchRec's
``DistributedModelParallel.state_dict()`` returns for its two-tower retrieval example
(torchrec/distributed/model_parallel.py, embeddingbag.py ``_initialize_torch_state``): each
sharded table ``<path>.embedding_bags.<table>.weight`` is a real
``torch.distributed._shard.sharded_tensor.ShardedTensor`` made here by torch.distributed
(gloo), dense layers plain tensors; saved with pickle_protocol=4 unless named otherwise.
Run with torch installed:  python make_checkpoint.py

Writes into this folder:
- dmp_two_tower.pt: one process (world size 1), keys saved through the wrapper
  (``_dmp_wrapped_module.module.`` prefixes, as ``nn.Module.state_dict`` of a DMP-wrapped
  DDP model names them); item table column-wise in 2 shards, user table row-wise in 3.
- dmp_two_tower_protocol2.pt: the same saved with torch.save's default pickle protocol 2.
- dmp_rank0_of_2.pt: rank 0's own save of a 2-process model: half of each row-wise table.
- interactions.csv and expected.json.
"""

import json
import os
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from scipy.stats import spearmanr
from torch.distributed._shard.metadata import ShardMetadata
from torch.distributed._shard.sharded_tensor import Shard, ShardedTensor

HERE = Path(__file__).resolve().parent
N_USERS, N_ITEMS, DIM = 60, 80, 8
PREFIX = "_dmp_wrapped_module.module.two_tower."


def make_log() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(7)
    p = 1.0 / np.arange(1, N_ITEMS + 1)
    items = np.concatenate([np.arange(N_ITEMS), rng.choice(N_ITEMS, 1400, p=p / p.sum())])
    return rng.integers(0, N_USERS, items.size), items


def tables(freq: np.ndarray) -> tuple[torch.Tensor, torch.Tensor]:
    """Item rows whose norms grow with popularity (norm ~ freq^0.25), plus random users."""
    gen = torch.Generator().manual_seed(0)
    directions = torch.nn.functional.normalize(torch.randn(N_ITEMS, DIM, generator=gen), dim=1)
    items = directions * torch.as_tensor(freq, dtype=torch.float32)[:, None] ** 0.25
    return items, 0.1 * torch.randn(N_USERS, DIM, generator=gen)


def sharded(full: torch.Tensor, cuts: list[tuple[int, int, int, int]], rank: int) -> ShardedTensor:
    """(row offset, col offset, rows, cols) per shard; this rank keeps the ones placed on it."""
    world = dist.get_world_size()
    metas = [ShardMetadata([r, c], [h, w], f"rank:{i % world}/cpu") for i, (r, c, h, w) in enumerate(cuts)]
    local = [Shard(full[r:r + h, c:c + w].clone(), m) for m, (r, c, h, w) in zip(metas, cuts)
             if m.placement.rank() == rank]
    if world == 1:
        return ShardedTensor._init_from_local_shards(local, list(full.shape))
    from torch.distributed._shard.sharded_tensor.metadata import ShardedTensorMetadata, TensorProperties

    global_meta = ShardedTensorMetadata(metas, full.shape, TensorProperties(dtype=full.dtype))
    return ShardedTensor._init_from_local_shards_and_global_metadata(local, global_meta)


def dense() -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(1)
    out = {}
    for tower in ("query_proj", "candidate_proj"):
        out[f"{tower}._mlp.0._linear.weight"] = torch.randn(DIM, DIM, generator=gen)
        out[f"{tower}._mlp.0._linear.bias"] = torch.zeros(DIM)
    return out


def run(rank: int, world: int, port: int, item: torch.Tensor, user: torch.Tensor) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    if world == 1:
        item_cuts = [(0, 0, N_ITEMS, DIM // 2), (0, DIM // 2, N_ITEMS, DIM // 2)]  # column-wise
        user_cuts = [(0, 0, 20, DIM), (20, 0, 20, DIM), (40, 0, 20, DIM)]  # row-wise
        name = "dmp_two_tower.pt"
    else:
        item_cuts = [(0, 0, N_ITEMS // 2, DIM), (N_ITEMS // 2, 0, N_ITEMS // 2, DIM)]
        user_cuts = [(0, 0, N_USERS // 2, DIM), (N_USERS // 2, 0, N_USERS // 2, DIM)]
        name = f"dmp_rank{rank}_of_{world}.pt"
    state = {
        f"{PREFIX}ebc.embedding_bags.t_item_id.weight": sharded(item, item_cuts, rank),
        f"{PREFIX}ebc.embedding_bags.t_user_id.weight": sharded(user, user_cuts, rank),
        **{PREFIX + k: v for k, v in dense().items()},
    }
    if rank == 0:
        torch.save(state, HERE / name, pickle_protocol=4)
        if world == 1:  # torch.save's default protocol 2 names ShardedTensor.ProcessGroupState via getattr
            torch.save(state, HERE / name.replace(".pt", "_protocol2.pt"))
    dist.barrier()
    dist.destroy_process_group()


def main() -> None:
    users, items = make_log()
    (HERE / "interactions.csv").write_text("user_id,item_id\n" + "".join(f"{u},{i}\n" for u, i in zip(users, items)))
    freq = np.bincount(items, minlength=N_ITEMS)
    item, user = tables(freq)
    mp.spawn(run, args=(1, 29611, item, user), nprocs=1)
    mp.spawn(run, args=(2, 29612, item, user), nprocs=2)
    norms = np.linalg.norm(item.numpy().astype(np.float64), axis=1)
    expected = {
        "torch": torch.__version__,
        "shape": list(item.shape),
        "row0": item[0].tolist(),
        "user_row59": user[59].tolist(),
        "spearman": float(spearmanr(freq, norms).statistic),
    }
    (HERE / "expected.json").write_text(json.dumps(expected, indent=1) + "\n")


if __name__ == "__main__":
    main()
