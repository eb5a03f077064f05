"""A script that seeds Python and NumPy but not torch: the model's initial weights differ every run."""

import random

import numpy as np
import torch
from torch import nn

random.seed(0)
np.random.seed(0)  # noqa: NPY002 - the script's own habit


def run(steps=100):
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Dropout(0.1), nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, steps)
    x, y = torch.randn(256, 4), torch.randn(256, 1)
    for _ in range(steps):
        loss = nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()  # planted: TSC110
        optimizer.step()
        scheduler.step()
    return loss.item()


run()
