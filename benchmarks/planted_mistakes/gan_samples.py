"""A small GAN: two losses summed for logging the right way, one the wrong way, samples drawn in eval mode."""

import torch
from torch import nn


def train_gan(generator: nn.Module, discriminator: nn.Module, loader, steps: int, z_dim: int = 16):
    torch.manual_seed(0)
    g_opt = torch.optim.Adam(generator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    d_opt = torch.optim.Adam(discriminator.parameters(), lr=2e-4, betas=(0.5, 0.999))
    bce = nn.BCEWithLogitsLoss()
    d_total, g_total = 0.0, 0.0
    for real in loader:
        z = torch.randn(real.shape[0], z_dim)
        fake = generator(z)
        d_loss = bce(discriminator(real), torch.ones(real.shape[0], 1)) + bce(
            discriminator(fake.detach()), torch.zeros(real.shape[0], 1)
        )
        d_opt.zero_grad()
        d_loss.backward()
        d_opt.step()
        g_loss = bce(discriminator(fake), torch.ones(real.shape[0], 1))
        g_opt.zero_grad()
        g_loss.backward()
        g_opt.step()
        d_total += d_loss.item()
        g_total += g_loss  # planted: TSC111
    return d_total / steps, g_total / steps


def samples(generator: nn.Module, count: int, z_dim: int = 16):
    generator.eval()
    with torch.inference_mode():
        return torch.cat([generator(torch.randn(8, z_dim)) for _ in range(count // 8)])


if __name__ == "__main__":
    train_gan(nn.Linear(16, 4), nn.Linear(4, 1), [torch.randn(8, 4)], steps=1)
