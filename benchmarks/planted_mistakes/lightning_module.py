"""A LightningModule: Lightning switches train and eval modes and seeds itself; nothing here may be reported."""

import lightning as L
import torch
import torch.nn.functional as F
from torch import nn


class LitClassifier(L.LightningModule):
    def __init__(self, backbone: nn.Module, lr: float = 1e-3):
        super().__init__()
        self.backbone = backbone
        self.lr = lr

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.backbone(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self.backbone(x)
        self.log("val_loss", F.cross_entropy(logits, y))
        self.log("val_acc", (logits.argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.lr)


if __name__ == "__main__":
    L.seed_everything(7, workers=True)
    model = LitClassifier(nn.Sequential(nn.Flatten(), nn.Linear(28 * 28, 10)))
    L.Trainer(max_epochs=1, deterministic=True).fit(model)
