"""A CIFAR script written for one GPU: .cuda() calls and a checkpoint loaded without map_location."""

import random

import torch
import torchvision
from torch import nn
from torchvision import transforms


def build():
    model = torchvision.models.resnet18(num_classes=10)
    return model.cuda()  # planted: TSC103


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.no_grad():
        for images, labels in loader:
            images, labels = images.cuda(), labels.cuda()  # planted: TSC103, TSC103
            correct += (model(images).argmax(1) == labels).sum().item()
            total += labels.numel()
    return correct / total


def main():
    random.seed(0)
    torch.manual_seed(0)
    tf = transforms.Compose([transforms.ToTensor()])
    train_set = torchvision.datasets.CIFAR10("data", train=True, transform=tf, download=True)
    loader = torch.utils.data.DataLoader(train_set, batch_size=128, shuffle=True, num_workers=4)
    model = build()
    state = torch.load("resume.pt", weights_only=True)  # planted: TSC104
    model.load_state_dict(state["model"])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    criterion = nn.CrossEntropyLoss()
    for _ in range(2):
        model.train()
        for images, labels in loader:
            optimizer.zero_grad(set_to_none=True)
            loss = criterion(model(images.to("cuda")), labels.to("cuda"))
            loss.backward()
            optimizer.step()
        print(evaluate(model, loader))


if __name__ == "__main__":
    main()
