"""The audit's one nearest-neighbour search: each file's ``k`` most similar files of each split, by cosine.

Near-duplicate candidates and outliers both read this one graph (``Neighbours``): a file's nearest files of an
earlier split propose its copies there (``near_copies.py``), and its nearest files of all splits together give
its outlier score (``label_checks.outliers``, as cleanlab's Datalab scores a precomputed ``knn_graph``). The
global k nearest are the k best of the splits' k nearest, so one search serves both.

Two ways to search, measured on 1,280-wide vectors (docs/audit.md, "At scale"):

- ``exact``: blocked matrix products with ``topk`` on the device, never an N x N matrix: a block of query rows
  against a block of columns (contiguous slices: the files are in split order, so no column is ever gathered),
  into one product buffer made once. The one way on a GPU, where it is fastest.
- ``faiss``: FAISS (``faiss-cpu``, in the ``audit`` extra where it installs) on the CPU: its exact ``IndexFlatIP``
  for a split of fewer than ``APPROXIMATE_FROM`` files; for a larger one an inverted file of the vectors projected
  on their ``REDUCED`` main axes (the top eigenvectors of their second moment), one byte an axis
  (``IndexIVFScalarQuantizer``, 8-bit: a query's scan reads a quarter of the bytes of float32 rows, and was 2.1
  times as fast on 1.2 million vectors), about ``LIST_SIZE`` vectors a list and ``NPROBE`` lists searched a query,
  so a query's cost does not grow with the split and the whole search grows linearly; each query's ``RERANK`` best
  candidates there are then ranked by their true cosines on the full vectors, so every similarity in the graph
  (and the CSVs) is exact. (The inverted file of 8-bit full vectors it replaced, with ``4 sqrt(n)`` lists, grew as
  n^1.5: 2,184 s at 128,000 files.)

Each split is made searchable once for every set of queries (``searches``: the thumbnails and their mirror images
ask one index), and a search for copies asks only a file's own and earlier splits (``earlier``).

Measured (``benchmarks/audit_scale.py``, synthetic 1,280-wide embeddings in 1,000 classes, a 2-core Xeon): 1.28
million files 596 s at 6.4 GB peak, the embeddings included (977 s at load 3 to 10 and 679 s at load 1 with float32
lists); 128,000 files 104 s (float32 lists, load 0.5). Every cosine within 1e-6 of the true one; every planted copy
proposed and every planted outlier found; 76 % (128,000) and 49 % (1.28 M) of the exact 11 nearest of a sample:
synthetic embeddings are the worst case, their noise spread evenly over all 1,280 dimensions, which 128 axes cannot
hold (real embeddings keep most of their spread in few axes).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from ...core.progress import meter

ROWS, COLUMNS = 2048, 16384  # one product block (rows x columns floats: 128 MB in float32)
APPROXIMATE_FROM = 50_000  # files in a split from which FAISS searches it approximately (exactly: hours at 1 M)
REDUCED = 128  # main axes the approximate index searches on (module docstring)
LIST_SIZE = 1_000  # vectors an inverted list holds on average: a query's scan does not grow with the split
NPROBE = 8  # inverted lists searched per query by the approximate index
RERANK = 32  # candidates a query whose true cosines (full vectors) then pick its k nearest
RERANK_ROWS = 1_024  # queries re-ranked at once (RERANK full float32 vectors each: 320 MB at 1,280 wide)
TRAIN_PER_LIST = 64  # k-means sample a list (FAISS wants 39 to 256)
AXES_SAMPLE = 131_072  # evenly spaced vectors whose second moment gives the main axes
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
    earlier: bool = False,
) -> Neighbours:
    """Each query's (default: each file's) ``k`` most similar ``vectors`` of each split; unit rows (``searches``
    with one set of queries)."""
    return searches(vectors, splits, k, device, [vectors if queries is None else queries], show, what, earlier)[0]


def searches(
    vectors: torch.Tensor,
    splits: list[str],
    k: int,
    device: torch.device,
    query_sets: Sequence[torch.Tensor],
    show: bool = False,
    what: str = "audit: nearest neighbours",
    earlier: bool = False,
) -> list[Neighbours]:
    """For each set of queries, each query's ``k`` most similar ``vectors`` of each split; unit rows. Each split
    is made searchable once for every set (the thumbnails and their mirror images ask the same index). Where
    ``earlier``, the queries are the files' own rows in their order, and each searches only its own split and the
    splits before it (a near copy's earlier file is never in a later split): the rest stay empty (-1).
    Blocked products on ``device`` (``exact``); on the CPU, FAISS where installed and a split holds
    ``APPROXIMATE_FROM`` files or more (measured: the blocked products are 4.6 times as fast as FAISS's exact
    index at 8,000 files, and only an approximate index searches a million files on a CPU in minutes)."""
    starts = split_starts(splits)
    if earlier and any(len(asked) != len(vectors) for asked in query_sets):
        raise ValueError("earlier splits only: the queries must be the files' own rows")  # a caller's mistake
    firsts = [starts[group] if earlier else 0 for group in range(len(starts) - 1)]
    largest = max(right - left for left, right in itertools.pairwise(starts))
    if device.type == "cpu" and largest >= APPROXIMATE_FROM and faiss_module() is not None:
        return by_faiss(vectors, starts, k, query_sets, firsts, show, what)
    return exact(vectors, starts, k, device, query_sets, firsts, show, what)


def empty_graph(count: int, groups: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """A graph's indices (-1) and cosines (``-inf``) before any split is searched: N x splits x k."""
    return torch.full((count, groups, k), -1, dtype=torch.long), torch.full((count, groups, k), float("-inf"))


def exact(
    vectors: torch.Tensor,
    starts: list[int],
    k: int,
    device: torch.device,
    query_sets: Sequence[torch.Tensor] | None = None,
    firsts: list[int] | None = None,
    show: bool = False,
    what: str = "audit: nearest neighbours",
) -> list[Neighbours]:
    """Blocked matrix products with ``topk`` (module docstring); each split searched from query row ``firsts``
    (default: all). ``vectors`` may live on the host in float16: they go to the device once (float16 on a GPU,
    float32 on the CPU, whose half-precision products are slow)."""
    dtype = torch.float16 if device.type == "cuda" else torch.float32
    base = vectors.to(device, dtype)
    query_sets = [vectors] if query_sets is None else query_sets
    groups = len(starts) - 1
    firsts = firsts or [0] * groups
    graphs = [empty_graph(len(asked), groups, k) for asked in query_sets]
    product = torch.empty(ROWS, min(COLUMNS, max(len(base), 1)), device=device, dtype=dtype)  # made once
    shown = meter(what, sum(len(asked) - first for asked in query_sets for first in firsts), show, "files")
    try:
        for queries, (index, similarity) in zip(query_sets, graphs, strict=True):
            asked = base if queries is vectors else queries.to(device, dtype)
            for group in range(groups):
                for top in range(firsts[group], len(asked), ROWS):
                    rows = asked[top : top + ROWS]  # a slice: a view, no copy
                    values, where = best_of_split(rows, base, (starts[group], starts[group + 1]), k, product)
                    index[top : top + len(rows), group, : where.shape[1]] = where.cpu()
                    similarity[top : top + len(rows), group, : values.shape[1]] = values.float().cpu()
                    shown.update(len(rows))
    finally:
        shown.close()
    return [Neighbours(index, similarity, starts, "exact search (matrix products)") for index, similarity in graphs]


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
    query_sets: Sequence[torch.Tensor] | None = None,
    firsts: list[int] | None = None,
    show: bool = False,
    what: str = "audit: nearest neighbours",
) -> list[Neighbours]:
    """FAISS on the CPU, one index a split made once for every set of queries (module docstring): exact below
    ``APPROXIMATE_FROM`` files, else an inverted file of the vectors projected on their ``REDUCED`` main axes,
    whose ``RERANK`` best candidates a query are then ranked by their true cosines. Each split is searched from
    query row ``firsts`` (default: all), ``FAISS_CHUNK`` rows at a time."""
    import faiss

    faiss.omp_set_num_threads(torch.get_num_threads())  # torch's share of the cores, not every core of the node
    query_sets = [vectors] if query_sets is None else query_sets
    groups = len(starts) - 1
    firsts = firsts or [0] * groups
    graphs = [empty_graph(len(asked), groups, k) for asked in query_sets]
    sizes = [starts[g + 1] - starts[g] for g in range(groups)]
    axes = main_axes(vectors, REDUCED) if max(sizes) >= APPROXIMATE_FROM else None
    shown = meter(what, sum(len(asked) - first for asked in query_sets for first in firsts), show, "files")
    try:
        for group in range(groups):
            part = vectors[starts[group] : starts[group + 1]]
            reduced = axes if axes is not None and len(part) >= APPROXIMATE_FROM else None
            searcher = reduced_index(faiss, part, reduced) if reduced is not None else flat_index(faiss, part)
            for asked, (index, similarity) in zip(query_sets, graphs, strict=True):
                for top in range(firsts[group], len(asked), FAISS_CHUNK):
                    rows = asked[top : top + FAISS_CHUNK]
                    found, values = faiss_best(searcher, rows, part, reduced, k)
                    index[top : top + len(rows), group, : found.shape[1]] = torch.where(
                        found >= 0, found + starts[group], -1
                    )
                    similarity[top : top + len(rows), group, : found.shape[1]] = torch.where(
                        found >= 0, values, float("-inf")
                    )
                    shown.update(len(rows))
            del searcher
    finally:
        shown.close()
    kind = "FAISS exact search"
    if axes is not None:
        kind = f"FAISS inverted file on {axes.shape[1]} main axes (8-bit), {NPROBE} lists searched, {RERANK} re-ranked"
    return [Neighbours(index, similarity, starts, kind) for index, similarity in graphs]


def faiss_best(
    searcher: object, rows: torch.Tensor, part: torch.Tensor, axes: torch.Tensor | None, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``k`` best of a split's vectors by ``searcher``: re-ranked on the full vectors where the index
    holds them projected on ``axes`` (``reranked``), else as FAISS's exact index ranks them."""
    if axes is not None:
        return reranked(searcher, rows, part, axes, k)
    scored, where = searcher.search(np.ascontiguousarray(rows.float().numpy()), min(k, len(part)))  # type: ignore[attr-defined]
    return torch.from_numpy(where), torch.from_numpy(scored)


def flat_index(faiss: object, part: torch.Tensor) -> object:
    """A split's vectors in FAISS's exact inner-product index, added ``FAISS_CHUNK`` float32 rows at a time."""
    searcher = faiss.IndexFlatIP(part.shape[1])  # type: ignore[attr-defined]
    for top in range(0, len(part), FAISS_CHUNK):
        searcher.add(np.ascontiguousarray(part[top : top + FAISS_CHUNK].float().numpy()))
    return searcher


def main_axes(vectors: torch.Tensor, width: int) -> torch.Tensor:
    """The ``width`` directions that hold most of the vectors' inner products (the top eigenvectors of their
    uncentred second moment, from at most ``AXES_SAMPLE`` evenly spaced rows: no randomness), D x width float32.
    Uncentred, so the common direction the embeddings share stays in the projected inner products."""
    sample = vectors[:: max(1, len(vectors) // AXES_SAMPLE)][:AXES_SAMPLE]
    moment = torch.zeros(vectors.shape[1], vectors.shape[1], dtype=torch.float64)
    for top in range(0, len(sample), FAISS_CHUNK):
        rows = sample[top : top + FAISS_CHUNK].float()
        moment += (rows.T @ rows).double()
    _, eigenvectors = torch.linalg.eigh(moment)  # ascending eigenvalues
    return eigenvectors[:, -min(width, vectors.shape[1]) :].flip(1).float().contiguous()


def projected(rows: torch.Tensor, axes: torch.Tensor) -> np.ndarray:
    return np.ascontiguousarray((rows.float() @ axes).numpy())


def reduced_index(faiss: object, part: torch.Tensor, axes: torch.Tensor) -> object:
    """A split's projected vectors in an inverted file of about ``LIST_SIZE`` vectors a list (so a query scans a
    constant number of vectors however large the split), each kept as one byte an axis (FAISS's 8-bit scalar
    quantizer: a scan reads a quarter of the bytes, and the scan is what a query costs; the re-rank makes every
    cosine exact again), its lists found by FAISS's k-means (seeded) on an evenly spaced sample of
    ``TRAIN_PER_LIST`` vectors a list, which also gives each axis' range."""
    width = axes.shape[1]
    lists = max(1, len(part) // LIST_SIZE)
    quantizer = faiss.IndexFlatIP(width)  # type: ignore[attr-defined]
    searcher = faiss.IndexIVFScalarQuantizer(  # type: ignore[attr-defined]
        quantizer,
        width,
        lists,
        faiss.ScalarQuantizer.QT_8bit,
        faiss.METRIC_INNER_PRODUCT,  # type: ignore[attr-defined]
    )
    searcher.cp.seed = 0  # k-means' starting centroids: the same lists every run
    sample = part[:: max(1, len(part) // (TRAIN_PER_LIST * lists))][: TRAIN_PER_LIST * lists]
    searcher.train(projected(sample, axes))
    for top in range(0, len(part), FAISS_CHUNK):
        searcher.add(projected(part[top : top + FAISS_CHUNK], axes))
    searcher.nprobe = min(NPROBE, lists)
    return searcher


def reranked(
    searcher: object, rows: torch.Tensor, part: torch.Tensor, axes: torch.Tensor, k: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's ``RERANK`` best candidates by the projected index, then its ``k`` best of them by their true
    cosines with the full vectors (so every similarity the audit reports is exact): split indices and cosines."""
    wanted = min(RERANK, len(part))
    _, candidates = searcher.search(projected(rows, axes), wanted)  # type: ignore[attr-defined]
    candidates = torch.from_numpy(candidates)
    found = torch.full((len(rows), min(k, wanted)), -1, dtype=torch.long)
    values = torch.full((len(rows), min(k, wanted)), float("-inf"))
    for top in range(0, len(rows), RERANK_ROWS):
        chosen = candidates[top : top + RERANK_ROWS]
        gathered = part[chosen.clamp_min(0)].float()  # rows x RERANK x D
        cosines = torch.bmm(gathered, rows[top : top + RERANK_ROWS].float()[:, :, None])[:, :, 0]
        cosines[chosen < 0] = float("-inf")  # fewer candidates than asked in the lists searched
        best, at = cosines.topk(found.shape[1], dim=1)
        found[top : top + len(chosen)] = torch.where(best > float("-inf"), chosen.gather(1, at), -1)
        values[top : top + len(chosen)] = best
    return found, values
