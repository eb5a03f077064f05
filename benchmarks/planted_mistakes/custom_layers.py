"""A model file: modules kept in a Python list, a constant that is not a buffer, .data and a legacy constructor."""

import numpy as np
import torch
from torch import nn


class Blocks(nn.Module):
    def __init__(self, width, depth):
        super().__init__()
        self.blocks = [nn.Linear(width, width) for _ in range(depth)]  # planted: TSC106
        self.norms = nn.ModuleList([nn.LayerNorm(width) for _ in range(depth)])
        self.mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)  # planted: TSC107
        self.register_buffer("std", torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1))
        self.scale = nn.Parameter(torch.ones(1))

    def forward(self, x):
        for block, norm in zip(self.blocks, self.norms, strict=True):
            x = norm(x + block(x))
        return x * self.scale


def clip_(model, bound):
    for parameter in model.parameters():
        parameter.data.clamp_(-bound, bound)  # planted: TSC101


def from_numpy(array: np.ndarray):
    weights = torch.FloatTensor(array)  # planted: TSC102
    return weights, torch.as_tensor(array, dtype=torch.float32), torch.from_numpy(array)
