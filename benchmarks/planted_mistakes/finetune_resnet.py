"""Fine-tuning with torchvision's old API: pretrained=True, v2.ToTensor, and the whole model pickled."""

import lightning as L
import torch
from torch import nn
from torchvision import models
from torchvision.transforms import v2

TRANSFORM = v2.Compose([v2.ToTensor(), v2.Resize(224)])  # planted: TOR202
PLAIN = v2.Compose([v2.ToImage(), v2.ToDtype(torch.float32, scale=True)])


def make_model(num_classes):
    model = models.resnet50(pretrained=True)  # planted: TOR201
    model.fc = nn.Linear(model.fc.in_features, num_classes)
    return model


def validate(model, loader, device):
    model.eval()
    hits = 0
    with torch.inference_mode():
        for x, y in loader:
            hits += (model(x.to(device)).argmax(1) == y.to(device)).sum().item()
    return hits / len(loader.dataset)


def fit(model, train_loader, val_loader, device, epochs=3):
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.05)
    for _ in range(epochs):
        model.train()
        running = 0.0
        for x, y in train_loader:
            loss = nn.functional.cross_entropy(model(x.to(device)), y.to(device))
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            running += loss.detach()
        print(float(running), validate(model, val_loader, device))
    torch.save(model, "finetuned.pt")  # planted: TSC105
    torch.save(model.state_dict(), "finetuned_weights.pt")


if __name__ == "__main__":
    L.seed_everything(42)
    fit(make_model(5), [], [], torch.device("cpu"))
