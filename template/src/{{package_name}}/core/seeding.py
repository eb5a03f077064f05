"""Where every random draw gets its seed: one policy, written once.

A draw's seed is a function of (seed, epoch, index or batch, process) alone,
never of what ran before, of the worker that loads a sample or of how many
workers there are. That is the condition for a resumed run to see exactly the
images, crops and mixes of an uninterrupted one (bit-exact resume), and it is
why no module here keeps a running random state between steps.

- ``seed_everything``: the start of a run (model initialization, user code).
- ``seed_process``: after model initialization, another torch stream per DDP process (dropout).
- ``sample_seed``: one training sample's per-image augmentation (``SeededSamples``).
- ``batch_seed``: one training batch's mixing (``data/loading/mixing.py``); ``crop_seed``: its
  crops and flips on the device (``data/loading/augment.py``), another stream per process.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset


def seed_everything(seed: int) -> None:
    """Python's, NumPy's and torch's global generators (the CPU's and every GPU's), at the start of a run."""
    random.seed(seed)
    np.random.seed(seed)  # noqa: NPY002 - user code may draw from NumPy's global generator
    torch.manual_seed(seed)


def seed_process(seed: int, rank: int) -> None:
    """After the model is built: each DDP process its own torch generators (the CPU's and every GPU's).

    Model initialization draws alike on every rank; what training draws from
    these generators (dropout) must not, or every GPU draws the same masks.
    Rank 0 keeps its stream: a one-process run draws what it always drew.
    """
    if rank > 0:
        torch.manual_seed(sample_seed(seed, rank, -1))  # index -1: no sample's, batch's or crop's seed


def sample_seed(seed: int, epoch: int, index: int) -> int:
    """One draw's seed from three whole numbers: distinct triples give unrelated seeds, in [0, 2**63)."""
    return ((seed * 1_000_003 + epoch) * 1_000_003 + index) % 2**63


def batch_seed(seed: int, epoch: int, batch: int) -> int:
    """A training batch's seed: ``-epoch`` keeps it apart from every sample's (epochs count from 0 up)."""
    return sample_seed(seed, -epoch, batch)


def crop_seed(seed: int, epoch: int, batch: int, rank: int) -> int:
    """The batch's crops and flips: a stream of their own beside the batch's mixing, and other crops per process."""
    return sample_seed(batch_seed(seed, epoch, batch), rank, 1)


class SeededSamples(Dataset):
    """Draws each sample's random augmentation from a seed of (seed, epoch, index).

    A sample's crop and flip then do not depend on which worker loads it, on
    how many workers there are, or on what was loaded before: the condition
    for a resumed run to see exactly the images an uninterrupted one saw.
    The sampler (``samplers.ResumableSampler``) hands out (epoch, index, draw) keys.
    """

    def __init__(self, dataset: Dataset, seed: int) -> None:
        self.dataset = dataset
        self.seed = seed

    def __len__(self) -> int:
        return len(self.dataset)  # type: ignore[arg-type]

    def __getitem__(self, key: tuple[int, int, int]) -> Any:
        epoch, index, draw = key
        seed = sample_seed(self.seed, epoch, draw)
        python_state, numpy_state = random.getstate(), np.random.get_state()  # noqa: NPY002
        with torch.random.fork_rng(devices=[]):  # leave the caller's CPU generator as it was
            # The CPU generator alone: torch.manual_seed would also reseed every CUDA generator (and
            # fork_rng(devices=[]) would not restore them), resetting dropout's stream on every sample.
            torch.default_generator.manual_seed(seed)
            random.seed(seed)  # for transforms of your own (models/extensions.py) that draw from these
            np.random.seed(seed % 2**32)  # noqa: NPY002
            try:
                return self.dataset[index]
            finally:
                random.setstate(python_state)
                np.random.set_state(numpy_state)  # noqa: NPY002
