"""Process-group setup under torchrun, and data-parallel (DDP) or sharded (FSDP2) wrapping."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import cast

import torch
import torch.distributed as dist
from torch.distributed.fsdp import fully_shard
from torch.nn.parallel import DistributedDataParallel


@dataclass
class World:
    rank: int = 0
    world_size: int = 1
    device: torch.device = torch.device("cpu")

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_world() -> World:
    """Join the process group torchrun describes in the environment; a plain launch is a world of one."""
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    if world_size == 1:
        return World(device=device)
    dist.init_process_group(backend="nccl" if device.type == "cuda" else "gloo")
    return World(rank=dist.get_rank(), world_size=dist.get_world_size(), device=device)


def close_world():
    if dist.is_initialized():
        dist.destroy_process_group()


def parallelize(model: torch.nn.Module, parallel: str, world: World) -> torch.nn.Module:
    """DDP replicates the model; FSDP2 shards every decoder layer and then the rest."""
    if world.world_size == 1:
        return model
    if parallel == "ddp":
        return DistributedDataParallel(model, device_ids=[world.device.index] if world.device.type == "cuda" else None)
    for layer in cast(torch.nn.ModuleList, model.get_submodule("model.layers")):
        fully_shard(layer)
    fully_shard(model)
    return model


def sum_over_ranks(value: torch.Tensor) -> torch.Tensor:
    if dist.is_initialized():
        value = value.clone()
        dist.all_reduce(value, op=dist.ReduceOp.SUM)
    return value


def mean_over_ranks(value: torch.Tensor) -> torch.Tensor:
    return sum_over_ranks(value) / (dist.get_world_size() if dist.is_initialized() else 1)
