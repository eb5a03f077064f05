"""Evaluation after training: a loop in eval mode without no_grad, and a load that lacks weights_only=True."""

import torch
from torch import nn


def accuracy(model, loader):
    model.eval()
    right = 0
    for x, y in loader:  # planted: TSC108
        right += (model(x).argmax(1) == y).sum().item()
    return right / len(loader.dataset)


def load(model, path, device):
    state = torch.load(path, map_location=device)  # planted: TSC104
    model.load_state_dict(state)
    ok = torch.load(path, map_location=device, weights_only=True)
    return model, ok


def report(model, loader):
    model.eval()
    with torch.no_grad():
        scores = [model(x).softmax(1) for x, _ in loader]
    return torch.cat(scores)


def smooth(x):
    return torch.log(1 + x)  # planted: TOR106


class Head(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)

    def forward(self, x):
        return self.fc(x)
