"""A notebook saved as a script: top-level code, no seed, a tensor attribute flag misspelt."""

import torch
from torch import nn

features = torch.randn(512, 20)
labels = (features.sum(1) > 0).long()
model = nn.Sequential(nn.Linear(20, 32), nn.ReLU(), nn.Linear(32, 2))
features.require_grad = False  # planted: TOR002
optimizer = torch.optim.SGD(model.parameters(), lr=0.05)

history = []
for _ in range(20):
    logits = model(features)
    loss = nn.functional.cross_entropy(logits, labels)
    optimizer.zero_grad()
    loss.backward()  # planted: TSC110
    optimizer.step()
    history.append(loss.item())

model.eval()
with torch.no_grad():
    accuracy = (model(features).argmax(1) == labels).float().mean().item()
print(history[-1], accuracy)
