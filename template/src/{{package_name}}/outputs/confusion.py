"""The confusion counts of an evaluation, kept as the (true class, predicted class) pairs that occur.

A dense N x N matrix grows with the square of the class count: 8 MB of int64 at 1,000 classes, 3.2 GB at
20,000, where a validation split of 50,000 images has at most 50,000 non-zero cells. So the counts are kept
sparse, and every figure the report prints (support, hits, precision, recall, F1, the most-confused pairs and
classes) is a bincount over the pairs; a dense matrix is made only for few classes (a picture, a small CSV).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Up to 2,048 classes (4.2 M cells, 32 MB of int64) the evaluation counts with one bincount, which DDP sums with one
# all_reduce; beyond, it counts only the pairs that occur (engine.evaluate), and dense() refuses.
DENSE_CELLS = 1 << 22


@dataclass(frozen=True, eq=False)  # tensors: compare their codes and counts, not the objects
class Confusion:
    """Counts of (true class, predicted class): ``codes`` (true * num_classes + predicted, ascending, unique) and
    their ``counts`` (each > 0), on the CPU."""

    num_classes: int
    codes: torch.Tensor
    counts: torch.Tensor

    @classmethod
    def from_codes(cls, codes: torch.Tensor, num_classes: int) -> Confusion:
        """One code per prediction (true * num_classes + predicted), counted: memory grows with the images."""
        pairs, counts = torch.unique(codes.flatten().long(), sorted=True, return_counts=True)
        return cls(num_classes, pairs.cpu(), counts.cpu())

    @classmethod
    def from_dense(cls, matrix: torch.Tensor) -> Confusion:
        """From an N x N matrix (rows: true class, columns: predicted), as a dense bincount gives it."""
        flat = torch.as_tensor(matrix).long().cpu().flatten()
        cells = flat.nonzero().squeeze(1)
        return cls(round(len(flat) ** 0.5), cells, flat[cells])

    @property
    def true(self) -> torch.Tensor:
        return self.codes // self.num_classes

    @property
    def predicted(self) -> torch.Tensor:
        return self.codes % self.num_classes

    @property
    def total(self) -> int:
        return int(self.counts.sum())

    def per_class(self, classes: torch.Tensor, counts: torch.Tensor | None = None) -> torch.Tensor:
        """``counts`` (default: every pair's) summed by ``classes`` (one class index per pair): exact int64."""
        counts = self.counts if counts is None else counts
        return torch.zeros(self.num_classes, dtype=torch.long).index_add_(0, classes, counts)

    def support(self) -> torch.Tensor:
        """Images of each true class: the dense matrix's row sums."""
        return self.per_class(self.true)

    def predicted_totals(self) -> torch.Tensor:
        """Images predicted as each class: the dense matrix's column sums."""
        return self.per_class(self.predicted)

    def hits(self) -> torch.Tensor:
        """Images of each class predicted right: the dense matrix's diagonal."""
        right = self.true == self.predicted
        return self.per_class(self.true[right], self.counts[right])

    def errors(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The off-diagonal pairs: (true, predicted, count), most images first (ties: by true, then predicted)."""
        wrong = self.true != self.predicted
        codes, counts = self.codes[wrong], self.counts[wrong]
        order = counts.argsort(descending=True, stable=True)  # codes ascend: ties stay in class order
        codes, counts = codes[order], counts[order]
        return codes // self.num_classes, codes % self.num_classes, counts

    def most_confused_classes(self, count: int) -> torch.Tensor:
        """The ``count`` classes with most errors, as the true or the predicted class, in class order: the rows and
        columns a readable picture of many classes keeps (ties: the class with more images, then class order)."""
        hits = self.hits()
        wrong = (self.support() - hits) + (self.predicted_totals() - hits)
        by_support = self.support().argsort(descending=True, stable=True)  # then sorted by errors, stably
        chosen = by_support[wrong[by_support].argsort(descending=True, stable=True)][: min(count, self.num_classes)]
        return chosen.sort().values

    def dense(self, classes: torch.Tensor | None = None) -> torch.Tensor:
        """The N x N matrix (rows: true class, columns: predicted), or its rows and columns of ``classes`` alone.
        Refused above ``DENSE_CELLS`` cells: at 20,000 classes it would take 3.2 GB."""
        if classes is None:
            classes = torch.arange(self.num_classes)
        size = len(classes)
        if size * size > DENSE_CELLS:
            raise ValueError(f"a dense {size} x {size} confusion matrix is too large: use the pairs (codes, counts)")
        where = torch.full((self.num_classes,), -1, dtype=torch.long)  # class index -> its row/column, -1 if left out
        where[classes] = torch.arange(size)
        rows, columns = where[self.true], where[self.predicted]
        kept = (rows >= 0) & (columns >= 0)
        matrix = torch.zeros(size * size, dtype=torch.long)
        matrix.index_add_(0, rows[kept] * size + columns[kept], self.counts[kept])
        return matrix.view(size, size)
