"""MNIST as the tutorials write it: no seed, validation without model.eval(), a loss summed with its graph."""

import torch
import torch.nn.functional as F
from torch import nn, optim
from torch.utils.data import DataLoader
from torchvision import datasets, transforms


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 16, 3)
        self.drop = nn.Dropout(0.25)
        self.fc = nn.Linear(16 * 26 * 26, 10)

    def forward(self, x):
        x = self.drop(F.relu(self.conv(x)))
        return self.fc(torch.flatten(x, 1))


def train(model, device, loader, optimizer):
    model.train()
    total_loss = 0
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(data), target)
        loss.backward()  # planted: TSC110
        optimizer.step()
        total_loss = total_loss + loss  # planted: TSC111
    return total_loss / len(loader)


def test(model, device, loader):
    test_loss, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:  # planted: TSC109
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.cross_entropy(output, target, reduction="sum").item()
            correct += (output.argmax(1) == target).sum().item()
    return test_loss / len(loader.dataset), correct


def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = datasets.MNIST("data", train=True, download=True, transform=tf)
    test_set = datasets.MNIST("data", train=False, transform=tf)
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    test_loader = DataLoader(test_set, batch_size=1000)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=1.0)
    for epoch in range(1, 4):
        loss = train(model, device, train_loader, optimizer)
        print(epoch, float(loss), test(model, device, test_loader))
    torch.save(model.state_dict(), "mnist_cnn.pt")


if __name__ == "__main__":
    main()
