"""The ``train`` command: build everything from the config, resume, loop over epochs."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml
from torch import nn

from .checkpoint import (
    FORMAT_VERSION,
    load_model_state,
    model_state,
    read_checkpoint,
    resume_path,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from .config import Config
from .data import build_datasets, build_loader
from .distributed import configure_backends, resolve_precision, select_device, wrap_model
from .engine import evaluate, train_one_epoch
from .errors import UserError
from .model import build_model
from .optim import build_optimizer, build_scheduler
from .reporting import MetricsLog, save_sample_grid


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - user code may draw from NumPy's global generator
    torch.manual_seed(seed)


def prepare_out_dir(out_dir: Path) -> None:
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
        probe = out_dir / ".write-test"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as exc:
        raise UserError(f"train.out_dir {out_dir} cannot be written ({exc.strerror}): choose another folder") from None


def show_progress(cfg: Config) -> bool:
    return cfg.train.progress and sys.stderr.isatty()


def train(cfg: Config, resume: str | None = None) -> dict[str, Any]:
    """Train for ``train.epochs`` epochs; returns the last epoch's metrics row."""
    out_dir = Path(cfg.train.out_dir)
    prepare_out_dir(out_dir)
    seed_everything(cfg.train.seed)
    device = select_device(cfg.train.device)
    configure_backends(device, cfg.train.deterministic)
    precision = resolve_precision(cfg.train.precision, device)

    train_set, val_set = build_datasets(cfg)
    classes = list(train_set.classes)
    train_loader = build_loader(train_set, cfg, device, train=True)
    val_loader = build_loader(val_set, cfg, device, train=False)
    steps_per_epoch = len(train_loader)

    model = build_model(cfg.model, len(classes)).to(device)
    optimizer = build_optimizer(model, cfg.optim)
    scheduler = build_scheduler(optimizer, cfg.optim, steps_per_epoch, cfg.train.epochs)
    scaler = torch.amp.GradScaler(device.type, enabled=precision == "fp16")
    criterion = nn.CrossEntropyLoss(label_smoothing=cfg.optim.label_smoothing)
    eval_criterion = nn.CrossEntropyLoss()

    epoch, global_step, best_acc = 0, 0, -1.0
    checkpoint = resume_path(resume, out_dir)
    if checkpoint is not None:
        state = read_checkpoint(checkpoint)
        if list(state["classes"]) != classes:
            raise UserError(
                f"{checkpoint} was trained on classes {state['classes']} but {cfg.data.root} has {classes}: "
                "resume with the same data, or start a new run with another train.out_dir"
            )
        load_model_state(model, state["model"], checkpoint)
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
        scheduler.last_epoch -= 1  # recompute this step's lr, in case train.epochs changed the curve
        scheduler.step()
        scaler.load_state_dict(state["scaler"])
        epoch, global_step, best_acc = state["epoch"], state["global_step"], state["best_metric"]
        set_rng_state(state["rng"])
        print(f"resumed from {checkpoint} after epoch {epoch} (step {global_step})")
    elif resume == "auto":
        print(f"no checkpoint in {out_dir}: starting a new run")

    model = wrap_model(model, device, cfg.train.parallel, cfg.data.batch_size)
    metrics = MetricsLog(out_dir / "metrics.jsonl")
    metrics.truncate_after(epoch)
    (out_dir / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    grid_path = out_dir / "train_batch.png"

    def save_grid_once(step: int, images: torch.Tensor) -> None:
        if step == 1 and not grid_path.exists():
            save_sample_grid(images, grid_path)

    row: dict[str, Any] = {}
    while epoch < cfg.train.epochs:
        epoch += 1
        train_loader.sampler.set_epoch(epoch)  # type: ignore[attr-defined]
        stats = train_one_epoch(
            model,
            train_loader,
            optimizer,
            scheduler,
            scaler,
            criterion,
            device,
            precision,
            epoch=epoch,
            log_every=cfg.train.log_every,
            progress=show_progress(cfg),
            grad_clip_norm=cfg.train.grad_clip_norm,
            on_step=save_grid_once,
        )
        global_step += steps_per_epoch
        val = evaluate(model, val_loader, eval_criterion, device, precision, len(classes), show_progress(cfg))
        row = {
            "epoch": epoch,
            "global_step": global_step,
            "train_loss": stats["train_loss"],
            "train_acc": stats["train_acc"],
            "val_loss": val["val_loss"],
            "val_acc": val["val_acc"],
            "lr": scheduler.get_last_lr()[-1],
            "images_per_second": stats["images_per_second"],
            "epoch_seconds": stats["epoch_seconds"],
        }
        metrics.append(row)
        is_best = val["val_acc"] > best_acc
        best_acc = max(best_acc, val["val_acc"])
        state = {
            "format_version": FORMAT_VERSION,
            "model": model_state(model),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "scaler": scaler.state_dict(),
            "epoch": epoch,
            "global_step": global_step,
            "best_metric": best_acc,
            "rng": rng_state(),
            "classes": classes,
            "config": cfg.to_dict(),
        }
        save_checkpoint(state, out_dir / "last.pt")
        if is_best:
            save_checkpoint(state, out_dir / "best.pt")
        print(
            f"epoch {epoch}/{cfg.train.epochs}  train_loss {row['train_loss']:.4f}  val_loss {row['val_loss']:.4f}  "
            f"val_acc {100 * row['val_acc']:.1f}%  lr {row['lr']:.2e}  {row['images_per_second']:.0f} img/s"
            + ("  (best)" if is_best else ""),
            flush=True,
        )
    if not row:
        print(f"nothing to do: {out_dir / 'last.pt'} already finished {epoch} of {cfg.train.epochs} epochs")
    return row
