"""How many training images each class has, said at start: one class is refused, a tiny class is named.

A classifier of one class has nothing to learn (every answer is right). A
class with 1 training image, or far fewer than the others, trains without a
word otherwise: the model sees too few of it to learn what it looks like, and
val/ holds at most a handful of it, so val_acc hardly measures it.

"Far fewer": under a tenth of the median class (``TINY_SHARE``). The median,
not the mean or the largest class, so that one huge class does not make every
other class look tiny; a tenth, the ratio past which an imbalance is commonly
called severe, and where the audit's ``class_imbalance`` score
(1 - count / median) passes 0.9. A class of one image is named whatever the
others hold: one image cannot show a class's variety.
"""

from __future__ import annotations

import statistics
from collections import Counter

from torchvision import datasets

from ...core.errors import UserError

TINY_SHARE = 0.1  # of the median class's training images: fewer makes a class tiny
SHOWN = 5  # tiny classes named in the line; the count stays whole


def check_class_count(dataset: datasets.DatasetFolder) -> None:
    """One line for a training split of a single class folder: there is nothing to tell apart."""
    if len(dataset.classes) == 1:
        root, name = dataset.root, dataset.classes[0]
        raise UserError(
            f"{root} holds one class folder ({name}): a classifier learns to tell classes apart, and with one "
            f"class every answer is right; add a folder of images for each other class, e.g. {root}/not_{name}/"
        )


def tiny_classes(dataset: datasets.DatasetFolder) -> tuple[list[tuple[str, int]], float]:
    """The classes with 1 training image or under ``TINY_SHARE`` of the median class's (name, count), fewest first;
    and that median."""
    counts = Counter(dataset.targets)
    per_class = [(name, counts.get(index, 0)) for index, name in enumerate(dataset.classes)]
    median = statistics.median(count for _, count in per_class)
    tiny = [(name, count) for name, count in per_class if count <= 1 or count < TINY_SHARE * median]
    return sorted(tiny, key=lambda item: (item[1], item[0])), median


def tiny_classes_warning(dataset: datasets.DatasetFolder) -> str | None:
    """The warning line naming each tiny class and its count, or None."""
    tiny, median = tiny_classes(dataset)
    if not tiny:
        return None
    named = ", ".join(f"{name} ({count})" for name, count in tiny[:SHOWN])
    named += f" and {len(tiny) - SHOWN} more" if len(tiny) > SHOWN else ""
    which = "a class has" if len(tiny) == 1 else f"{len(tiny)} classes have"
    return (
        f"{which} very few training images: {named}, against {median:g} for the median class; the model sees "
        f"too few to learn them, and val_acc hardly measures them: add images to {dataset.root}/<class name>/ "
        f"(a tenth of the median at least), or remove or merge the class"
    )
