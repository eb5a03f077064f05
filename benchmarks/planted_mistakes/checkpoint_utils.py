"""Checkpoint helpers of a project (a module, not a script): one unsafe load, a reentrant checkpoint call."""

from pathlib import Path

import torch
from torch.utils.checkpoint import checkpoint


def save(model, optimizer, epoch, path: Path):
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "epoch": epoch}, path)


def restore(model, optimizer, path: Path, device):
    state = torch.load(path, map_location=device, weights_only=True)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    return state["epoch"]


def restore_anything(path: Path):
    return torch.load(path, map_location="cpu", weights_only=False)  # planted: TSC104


def forward_saving_memory(blocks, x):
    for block in blocks:
        x = checkpoint(block, x)  # planted: TOR003
    return x


def forward_saving_memory_right(blocks, x):
    for block in blocks:
        x = checkpoint(block, x, use_reentrant=False)
    return x
