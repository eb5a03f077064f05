"""Validation written four ways: two forget eval mode, two are right."""

import torch
from torch import nn


def validate(model, loader, criterion):
    val_loss = 0.0
    for x, y in loader:  # planted: TSC109
        val_loss += criterion(model(x), y)  # planted: TSC111
    return val_loss / len(loader)


class Trainer:
    def __init__(self, model: nn.Module):
        self.model = model

    def val_epoch(self, loader):
        outputs = []
        with torch.no_grad():
            for x, _ in loader:  # planted: TSC109
                outputs.append(self.model(x))
        return torch.cat(outputs)

    def evaluate(self, loader):
        self.model.eval()
        with torch.no_grad():
            outputs = [self.model(x) for x, _ in loader]
        self.model.train()
        return torch.cat(outputs)


@torch.no_grad()
def run_validation(net, loader):
    net.train(False)
    return [net(x).argmax(1) for x, _ in loader]
