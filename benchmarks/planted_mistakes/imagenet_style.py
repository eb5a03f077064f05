"""pytorch/examples' ImageNet loop, shortened: meters take .item(); the validation forgot model.eval()."""

import torch
from torch import nn


class AverageMeter:
    def __init__(self):
        self.sum, self.count = 0.0, 0

    def update(self, value, n=1):
        self.sum += value * n
        self.count += n


def train(loader, model, criterion, optimizer, device):
    losses = AverageMeter()
    model.train()
    for images, target in loader:
        images, target = images.to(device, non_blocking=True), target.to(device, non_blocking=True)
        loss = criterion(model(images), target)
        losses.update(loss.item(), images.size(0))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return losses.sum / losses.count


def validate(val_loader, model, criterion, device):
    losses = AverageMeter()
    with torch.no_grad():
        for images, target in val_loader:  # planted: TSC109
            images, target = images.to(device), target.to(device)
            loss = criterion(model(images), target)
            losses.update(loss.item(), images.size(0))
    return losses.sum / losses.count


def main(seed=None):
    if seed is not None:
        torch.manual_seed(seed)
    model = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 10))
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), 0.1, momentum=0.9, weight_decay=1e-4)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=30, gamma=0.1)
    for _ in range(2):
        train([], model, criterion, optimizer, torch.device("cpu"))
        validate([], model, criterion, torch.device("cpu"))
        scheduler.step()


if __name__ == "__main__":
    main(seed=0)
