"""An offline, learnable ImageFolder of simple shapes, for demos and tests.

Four classes (circle, square, triangle, cross) in random bright colours,
sizes, positions and rotations on a dark, noisy background. The same seed always writes
the same files.
"""

from __future__ import annotations

import math
import random
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

CLASSES = ("circle", "cross", "square", "triangle")


def _rotate_quarter(points: list[tuple[float, float]], times: int) -> list[tuple[float, float]]:
    for _ in range(times):
        points = [(-y, x) for x, y in points]
    return points


def _polygon(kind: str, cx: float, cy: float, r: float, angle: float) -> list[tuple[float, float]]:
    if kind == "square":
        corners = [(-1, -1), (1, -1), (1, 1), (-1, 1)]
        scale = r / math.sqrt(2)
    elif kind == "triangle":
        corners = [(math.cos(a), math.sin(a)) for a in (math.pi / 2 + k * 2 * math.pi / 3 for k in range(3))]
        scale = r
    else:  # cross: a plus sign of arm width r / 3
        w = 1 / 3
        arm = [(-w, -1), (w, -1), (w, -w)]  # one quarter, rotated four times
        corners = [p for k in range(4) for p in _rotate_quarter(arm, k)]
        scale = r
    cos, sin = math.cos(angle), math.sin(angle)
    return [(cx + scale * (x * cos - y * sin), cy + scale * (x * sin + y * cos)) for x, y in corners]


def draw_shape(kind: str, size: int, rng: random.Random, noise: np.random.Generator) -> Image.Image:
    background = tuple(rng.randint(0, 90) for _ in range(3))  # dark...
    colour = tuple(rng.randint(150, 255) for _ in range(3))  # ...and bright, so contrast is always high
    pixels = np.full((size, size, 3), background, dtype=np.int16)
    pixels += noise.integers(-20, 21, size=pixels.shape, dtype=np.int16)
    image = Image.fromarray(pixels.clip(0, 255).astype(np.uint8))
    r = rng.uniform(0.18, 0.34) * size
    cx = rng.uniform(r + 1, size - r - 1)
    cy = rng.uniform(r + 1, size - r - 1)
    draw = ImageDraw.Draw(image)
    if kind == "circle":
        draw.ellipse((cx - r, cy - r, cx + r, cy + r), fill=colour)
    else:
        draw.polygon(_polygon(kind, cx, cy, r, rng.uniform(0, 2 * math.pi)), fill=colour)
    return image


def write_sample_data(
    root: str | Path, train_per_class: int = 200, val_per_class: int = 50, image_size: int = 64, seed: int = 0
) -> Path:
    """Write ``root/train/<class>/*.png`` and ``root/val/<class>/*.png``."""
    root = Path(root)
    rng = random.Random(seed)
    noise = np.random.default_rng(seed)
    for split, count in (("train", train_per_class), ("val", val_per_class)):
        for kind in CLASSES:
            folder = root / split / kind
            folder.mkdir(parents=True, exist_ok=True)
            for index in range(count):
                draw_shape(kind, image_size, rng, noise).save(folder / f"{kind}_{index:04d}.png")
    return root
