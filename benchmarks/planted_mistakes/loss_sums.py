"""Ways a training loop sums its loss: three keep every step's graph, the others are right."""

import torch
from torch import nn


def epoch(model, loader, optimizer, accumulate=4):
    criterion = nn.CrossEntropyLoss()
    stats = {"loss": 0.0, "seen": 0}
    loss_sum = torch.zeros(())
    epoch_loss = 0.0
    for step, (x, y) in enumerate(loader):
        out = model(x)
        loss = criterion(out, y) / accumulate
        loss.backward()
        if (step + 1) % accumulate == 0:
            optimizer.step()
            optimizer.zero_grad()
        stats["loss"] += loss  # planted: TSC111
        stats["seen"] += x.shape[0]
        loss_sum += criterion(out, y) * x.size(0)  # planted: TSC111
        epoch_loss += loss.item()
    return stats, loss_sum, epoch_loss


def distill(student, teacher, loader, optimizer):
    running = 0
    for x, _ in loader:  # planted: TSC109 (the teacher is never put in eval mode)
        with torch.no_grad():
            target = teacher(x).softmax(1)
        kd_loss = nn.functional.kl_div(student(x).log_softmax(1), target, reduction="batchmean")
        optimizer.zero_grad()
        kd_loss.backward()
        optimizer.step()
        running = running + kd_loss  # planted: TSC111
    return running


def micro_batches(model, chunks, optimizer):
    total = 0
    for x, y in chunks:
        total = total + nn.functional.mse_loss(model(x), y) / len(chunks)
    total.backward()  # one backward over the summed graph: on purpose
    optimizer.step()
