"""The audit's one nearest-neighbour search: each file's ``k`` most similar files of each split, by cosine.

Near-duplicate candidates and outliers both read this one graph (``Neighbours``): a file's nearest files of an
earlier split propose its copies there (``near_copies.py``), and its nearest files of all splits together give
its outlier score (``label_checks.outliers``, as cleanlab's Datalab scores a precomputed ``knn_graph``). The
global k nearest are the k best of the splits' k nearest, so one search serves both.

Two ways to search, measured on 1,280-wide vectors (docs/audit.md, "At scale"):

- ``exact``: blocked matrix products with ``topk`` on the device, never an N x N matrix: a block of query rows
  against a block of columns (contiguous slices: the files are in split order, so no column is ever gathered),
  into one product buffer made once. The one way on a GPU, where it is fastest.
- ``faiss``: FAISS (``faiss-cpu``, in the ``audit`` extra where it installs) on the CPU, where a split holds
  ``APPROXIMATE_FROM`` files or more: an inverted-file index of 8-bit vectors for such a split
  (``IndexIVFScalarQuantizer``, ``NPROBE`` of its ``4 sqrt(n)`` lists searched a query; its exact
  ``IndexFlatIP`` for the smaller splits): an exact search of a million files takes hours on a few cores.

Measured (``benchmarks/audit_scale.py --compare-search``, 8,000 synthetic 1,280-wide embeddings, a shared 2-core
Xeon): blocked products 15 s, FAISS exact 71 s, FAISS inverted file 45 s finding 88 % of the exact 11 nearest.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import torch

from ...core.progress import meter

ROWS, COLUMNS = 2048, 16384  # one product block (rows x columns floats: 128 MB in float32)
APPROXIMATE_FROM = 50_000  # files in a split from which FAISS searches it approximately (exactly: hours at 1 M)
NPROBE = 16  # inverted lists searched per query by the approximate index
FAISS_CHUNK = 65_536  # vectors added or searched at once: float32 copies of this many rows at most


@dataclass(frozen=True)
class Neighbours:
    """Each file's ``k`` most similar files of each split (the file itself included, in its own split).

    ``index``: N x splits x k file indices (-1 where a split holds fewer than k files); ``similarity``: the
    cosines (``-inf`` there), best first; ``starts``: where each split's rows begin (and the end)."""

    index: torch.Tensor
    similarity: torch.Tensor
    starts: list[int]
    method: str  # what searched: said in the CSVs' method column

    def nearest(self, k: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each file's ``k`` nearest other files, all splits together (N x k indices and cosines)."""
        rows = torch.arange(len(self.index))[:, None]
        index, similarity = self.index.flatten(1), self.similarity.flatten(1).clone()
        similarity[index == rows] = float("-inf")  # the file itself is no neighbour
        best, where = similarity.topk(min(k, similarity.shape[1]), dim=1)
        return index.gather(1, where), best


def split_starts(splits: list[str]) -> list[int]:
    """Where each split's run of files begins, and the end: the audit lists files split after split."""
    starts = [0] + [i for i in range(1, len(splits)) if splits[i] != splits[i - 1]] + [len(splits)]
    if len(dict.fromkeys(splits)) != len(starts) - 1:
        raise ValueError("the files must come split after split")  # a caller's mistake, not the user's
    return starts


def search(
    vectors: torch.Tensor,
    splits: list[str],
    k: int,
    device: torch.device,
    queries: torch.Tensor | None = None,
    show: bool = False,
    what: str = "audit: nearest neighbours",
) -> Neighbours:
    """Each query's (default: each file's) ``k`` most similar ``vectors`` of each split; unit rows. Blocked
    products on ``device`` (``exact``); on the CPU, FAISS where installed and a split holds ``APPROXIMATE_FROM``
    files or more (measured: the blocked products are 4.6 times as fast as FAISS's exact index at 8,000 files,
    and only an approximate index searches a million files on a CPU in minutes)."""
    starts = split_starts(splits)
    largest = max(right - left for left, right in itertools.pairwise(starts))
    if device.type == "cpu" and largest >= APPROXIMATE_FROM and faiss_module() is not None:
        return by_faiss(vectors, starts, k, queries, show, what)
    return exact(vectors, starts, k, device, queries, show, what)


def exact(
    vectors: torch.Tensor,
    starts: list[int],
    k: int,
    device: torch.device,
    queries: torch.Tensor | None = None,
    show: bool = False,
    what: str = "audit: nearest neighbours",
) -> Neighbours:
    """Blocked matrix products with ``topk`` (module docstring). ``vectors`` may live on the host in float16:
    they go to the device once (float16 on a GPU, float32 on the CPU, whose half-precision products are slow)."""
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    base = vectors.to(device, dtype)
    asked = base if queries is None else queries.to(device, dtype)
    count, groups = len(asked), len(starts) - 1
    index = torch.full((count, groups, k), -1, dtype=torch.long)
    similarity = torch.full((count, groups, k), float("-inf"))
    product = torch.empty(ROWS, min(COLUMNS, max(len(base), 1)), device=device, dtype=dtype)  # made once
    shown = meter(what, count, show, "files")
    try:
        for top in range(0, count, ROWS):
            rows = asked[top : top + ROWS]  # a slice: a view, no copy
            for group in range(groups):
                values, where = best_of_split(rows, base, (starts[group], starts[group + 1]), k, product)
                index[top : top + len(rows), group, : where.shape[1]] = where.cpu()
                similarity[top : top + len(rows), group, : values.shape[1]] = values.float().cpu()
            shown.update(len(rows))
    finally:
        shown.close()
    return Neighbours(index, similarity, starts, "exact search (matrix products)")


def best_of_split(
    rows: torch.Tensor, base: torch.Tensor, span: tuple[int, int], k: int, product: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``k`` best columns of ``base[span]`` for each row: block after block of columns into ``product``, the
    running best merged with each block's (a rows x 2k merge: the only tensors made per block)."""
    values = torch.empty(len(rows), 0, device=rows.device, dtype=rows.dtype)
    where = torch.empty(len(rows), 0, device=rows.device, dtype=torch.long)
    for left in range(span[0], span[1], product.shape[1]):
        columns = base[left : min(left + product.shape[1], span[1])]  # contiguous: a view
        block = product[: len(rows), : len(columns)]
        torch.mm(rows, columns.T, out=block)
        top, at = block.topk(min(k, len(columns)), dim=1)
        values, order = torch.cat([values, top], 1).topk(min(k, values.shape[1] + top.shape[1]), dim=1)
        where = torch.cat([where, at + left], 1).gather(1, order)
    return values, where


def faiss_module() -> object | None:
    """FAISS, where the audit extra installed it (not every platform has a wheel): else None."""
    try:
        import faiss
    except ImportError:
        return None
    return faiss


def by_faiss(
    vectors: torch.Tensor,
    starts: list[int],
    k: int,
    queries: torch.Tensor | None,
    show: bool,
    what: str,
) -> Neighbours:
    """FAISS on the CPU, one index a split (module docstring): exact up to ``APPROXIMATE_FROM`` files, else an
    inverted file of 8-bit vectors. Vectors go in and queries out in chunks of ``FAISS_CHUNK`` float32 rows."""
    import faiss

    faiss.omp_set_num_threads(torch.get_num_threads())  # torch's share of the cores, not every core of the node
    asked = vectors if queries is None else queries
    count, groups = len(asked), len(starts) - 1
    index = torch.full((count, groups, k), -1, dtype=torch.long)
    similarity = torch.full((count, groups, k), float("-inf"))
    approximate = False
    shown = meter(what, count * groups, show, "files")
    try:
        for group in range(groups):
            part = vectors[starts[group] : starts[group + 1]]
            searcher = faiss_index(faiss, part)
            approximate |= not isinstance(searcher, faiss.IndexFlatIP)
            for top in range(0, count, FAISS_CHUNK):
                rows = asked[top : top + FAISS_CHUNK].float().numpy()
                values, where = searcher.search(rows, min(k, len(part)))
                found = torch.from_numpy(where)
                index[top : top + len(rows), group, : found.shape[1]] = torch.where(
                    found >= 0, found + starts[group], -1
                )
                similarity[top : top + len(rows), group, : found.shape[1]] = torch.where(
                    found >= 0, torch.from_numpy(values), float("-inf")
                )
                shown.update(len(rows))
            del searcher
    finally:
        shown.close()
    kind = f"FAISS inverted file, {NPROBE} lists searched" if approximate else "FAISS exact search"
    return Neighbours(index, similarity, starts, kind)


def faiss_index(faiss: object, part: torch.Tensor) -> object:
    """A split's vectors in a FAISS inner-product index, added chunk by chunk (the approximate index is trained
    on an evenly spaced sample of them: no randomness)."""
    dimension = part.shape[1]
    if len(part) < APPROXIMATE_FROM:
        searcher = faiss.IndexFlatIP(dimension)  # type: ignore[attr-defined]
    else:
        lists = int(4 * math.sqrt(len(part)))
        quantizer = faiss.IndexFlatIP(dimension)  # type: ignore[attr-defined]
        searcher = faiss.IndexIVFScalarQuantizer(  # type: ignore[attr-defined]
            quantizer,
            dimension,
            lists,
            faiss.ScalarQuantizer.QT_8bit,
            faiss.METRIC_INNER_PRODUCT,  # type: ignore[attr-defined]
        )
        sample = part[:: max(1, len(part) // (64 * lists))][: 256 * lists]  # FAISS wants 39 to 256 a list
        searcher.train(np.ascontiguousarray(sample.float().numpy()))
        searcher.nprobe = NPROBE
    for top in range(0, len(part), FAISS_CHUNK):
        searcher.add(np.ascontiguousarray(part[top : top + FAISS_CHUNK].float().numpy()))
    return searcher
