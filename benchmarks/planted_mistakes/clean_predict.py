"""Prediction and embedding without a mistake: a loader without workers, eval mode, inference mode."""

import sys

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader
from torchvision import datasets
from torchvision.transforms import v2

TRANSFORM = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True), v2.Resize((64, 64))])


def load_model(path, device):
    state = torch.load(path, map_location=device, weights_only=True)
    model = state["factory"]()
    model.load_state_dict(state["model"])
    return model.to(device).eval()


def embed(model, loader, device):
    with torch.inference_mode():
        return torch.cat([F.normalize(model(x.to(device)), dim=1) for x, _ in loader])


def predict(model, loader, device):
    model.eval()
    rows = []
    with torch.no_grad():
        for x, _ in loader:
            rows.append(model(x.to(device)).softmax(1).cpu())
    return torch.cat(rows)


if __name__ == "__main__":
    device = torch.device("cpu")
    folder = datasets.ImageFolder(sys.argv[2], transform=TRANSFORM)
    loader = DataLoader(folder, batch_size=64)
    model = load_model(sys.argv[1], device)
    print(predict(model, loader, device).argmax(1).tolist(), embed(model, loader, device).shape)
