"""A training script with no mistake: nothing here may be reported."""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, features: int, classes: int):
        super().__init__()
        self.layers = nn.ModuleList([nn.Linear(features, 64), nn.Linear(64, classes)])
        self.register_buffer("mean", torch.zeros(features))
        self.dropout = nn.Dropout(0.2)

    def forward(self, x):
        x = self.dropout(F.relu(self.layers[0](x - self.mean)))
        return self.layers[1](x)


def train_one_epoch(model, loader, optimizer, device):
    model.train()
    total, seen = 0.0, 0
    for x, y in loader:
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = F.cross_entropy(model(x), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        total += loss.item() * x.shape[0]
        seen += x.shape[0]
    return total / seen


@torch.inference_mode()
def evaluate(model, loader, device):
    model.eval()
    loss_sum = torch.zeros((), device=device)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss_sum += F.cross_entropy(model(x), y, reduction="sum")
    return loss_sum.item() / len(loader.dataset)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    data = TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,)))
    loader = DataLoader(data, batch_size=32, shuffle=True, generator=torch.Generator().manual_seed(args.seed))
    model = Classifier(8, 3).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(3):
        print(train_one_epoch(model, loader, optimizer, device), evaluate(model, loader, device))
    torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, "last.pt")
    state = torch.load("last.pt", map_location=device, weights_only=True)
    model.load_state_dict(state["model"])


if __name__ == "__main__":
    main()
