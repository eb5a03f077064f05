"""Near copies: pairs of files that show the same picture, resized, re-compressed, cropped, mirrored or recoloured.

Embeddings alone cannot tell a copy from another part of the same scene: two crops of one photo that share no
pixel score as high a cosine as a resized copy, and a cropped copy often scores lower (benchmarks/data_audit.py).
So the audit asks the embeddings only for candidates and settles each candidate on the pixels:

1. Candidates, for each file, among the files before it (train, then val, then test): its ``NEIGHBOURS`` nearest
   files of each earlier split and its nearest earlier file of its own split, by the embeddings' cosine (from
   ``SHORTLIST_COSINE``: a crop keeps its meaning) and, as many again, by the correlation of small grey
   thumbnails, mirror image included, from ``SCREEN`` (a resized, re-compressed, recoloured or mirrored copy,
   whatever the network). The embeddings' nearest files are the audit's one neighbour graph (``neighbours.py``,
   which the outliers read too); the thumbnails' come from the same search over them, the pictures and their
   mirror images asking one index of the pictures, each file only its own and earlier splits. Both search blocks
   of files against each split, never an N x N matrix; in its own split, a file's nearest earlier file is looked
   for among its ``NEIGHBOURS`` nearest.
   A file's real copy is never hidden behind another look-alike: every split gets its own nearest files. A pair
   whose mean colours differ by more than ``COLOUR`` is dropped: a copy keeps its colours.
2. The check: does one file's picture appear in the other's, whole or as a crop of ``FRACTIONS`` of a side (at the
   crop's own shape), at any offset, mirrored or not? Normalized cross-correlation (NCC) of high-passed grey
   thumbnails, so brightness and contrast changes cancel out and a plain gradient of sky matches nothing; every
   candidate at ``SCREEN_SIDE`` pixels, those past ``SCREEN`` again at ``SIDE`` pixels, whose best NCC is the pair's
   score. A pair scoring at least the threshold (``MATCH``, ``audit --near-duplicate-similarity``) is a near copy.
3. Plain pictures (a photo out of focus: blurred wood, fur, a sky with some clouds; issue 59): their fine detail is
   faint, ``CONTRAST`` outweighs it, and a copy re-compressed scores under ``MATCH``. Where both files' fine detail
   is under ``PLAIN_DETAIL`` (measured on each pair), the pair is also scored at ``SIDE`` on two bands at once:
   the fine detail with a smaller ``PLAIN_CONTRAST``, and a ``COARSE`` band (less a wider blur); at each offset the
   lower of the two NCCs counts, less ``PLAIN_MARGIN``, and the better of that and the fine score is the pair's.
   A copy matches on both bands at the same place; two plain pictures that look alike at one band seldom do at
   the other. (The coarse band alone listed other cuts of the same photos: precision 0.88 on the benchmark's seed
   0; the better of the two bands, an earlier try, 0.96.)

Written here with torch (grouped ``conv2d`` for the correlation, integral images for the windows' variances) rather
than with a library: the image-dedup libraries hash or embed whole pictures (imagededup, cleanvision: no crops),
and OpenCV's ``matchTemplate`` (not a dependency of the project) takes one pair at a time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms.v2 import functional as TF

from ...core.device import one_thread
from ...core.progress import meter
from .neighbours import Neighbours, search, searches

SIDE, SCREEN_SIDE = 32, 16  # thumbnail sides (pixels, squashed to a square) of the check and of the screen
COARSE = "coarse"  # the band of plain pictures (step 3): at SIDE pixels, less a wider blur
# The high-pass of each band: each thumbnail less its Gaussian blur of this sigma (pixels).
BLUR: dict[int | str, float] = {SIDE: 2.0, SCREEN_SIDE: 1.0, COARSE: 4.0}
CONTRAST = 4.0  # grey levels added to every window's standard deviation: a near-blank patch matches nothing
FRACTIONS = (0.95, 0.9, 0.85, 0.8, 0.75, 0.7)  # of a side: the crops looked for (besides the whole picture)
SMALLEST = 0.5  # of a side: a crop whose shorter side would be smaller is not looked for
SHORTLIST_COSINE = 0.4  # embeddings less similar than this are never candidates
NEIGHBOURS = 6  # candidates per earlier split, from the embeddings and again from the thumbnails
SCREEN = 0.4  # NCC at SCREEN_SIDE below which a candidate is not checked at SIDE
# NCC at SIDE from which two files are near copies: measured on the injected copies of benchmarks/data_audit.py
# (docs/audit.md, "Near duplicates"): at 0.7, 94-100 % of the copies found, 99 % of the pairs right; at 0.75,
# 90-100 % and 99.6 %; the copies missed are near-blank crops (sky) and faint recolourings of them.
MATCH = 0.7
# How far apart the two pictures' mean colours (Cb, Cr: grey levels from -128 to 127) may be. A copy keeps its
# colours (the benchmark's copies, recoloured by 0.85-1.15, differed by 11 at most); two drawings of one shape in
# other colours, or two crops of plain sky and of a wall, do not (docs/audit.md): a grey copy of a colourful
# photo is missed.
COLOUR = 15.0
LUMA = torch.tensor([0.299, 0.587, 0.114])
CHROMA = torch.tensor([[-0.168736, -0.331264, 0.5], [0.5, -0.418688, -0.081312]])  # ITU-R 601 Cb and Cr of RGB
# Candidate pairs compared at once: their files' bands and integral images take about 250 MB; fewer calls of larger
# operations (1,024 checked 0.65 times as many pairs a CPU second on the scale benchmark's pictures).
PAIRS_PER_CHUNK = 4096
THUMBNAILS_PER_CHUNK = 65_536  # thumbnails made float at once (the search's rows: 64 MB)
# Up to this many files, a ``Thumbnails``' float thumbnails and integral images are made once for every file (about
# 30 KB a file: 0.6 GB); above, for the rows asked for, each time. The pixel check asks a chunk's own ``Thumbnails``
# (``chunk``: at most 2 x PAIRS_PER_CHUNK files), so it makes them once a chunk at any number of files.
EAGER = 20_000
# Step 3: a file is plain where its SIDE thumbnail's fine detail (the standard deviation of its high-pass, in grey
# levels) is under PLAIN_DETAIL: the benchmark's blurred photos have 3 to 13, its other photos 7 to 40 (most over
# 10). A plain pair's fine band is compared with PLAIN_CONTRAST, and its coarse band with CONTRAST (values measured
# with benchmarks/data_audit.py: docs/audit.md).
PLAIN_DETAIL = 10.0
PLAIN_CONTRAST = 1.0
# What a plain pair's two-band NCC counts less: each band holds fewer details, so two other cuts of one plain photo
# score higher by chance (at 0.05 the benchmark's precision stayed at 0.99; without it, 0.98).
PLAIN_MARGIN = 0.05


@dataclass(frozen=True)
class Thumbnails:
    """Every file's thumbnail, kept small: grey uint8 (N x 1 x ``SIDE`` x ``SIDE``: 1 KB a file, made in the
    loader workers of the embedding pass, ``thumbnail``), its width / height and its mean colour. The pixel
    check's high-passed float thumbnails and their integral images are made from it for the pairs it compares
    (``sides``, ``tables``: indexed like tensors), never for every file at once."""

    grey: torch.Tensor
    aspect: torch.Tensor
    chroma: torch.Tensor  # N x 2: each picture's mean colour, Cb and Cr (0 for grey)

    def __len__(self) -> int:
        return len(self.grey)

    @cached_property
    def sides(self) -> dict[int | str, Sides]:
        """The high-passed grey thumbnails by band (``SIDE``, ``SCREEN_SIDE``, ``COARSE``), made when indexed:
        ``sides[band][rows]``."""
        return {band: Sides(self.grey, band) for band in BLUR}

    @cached_property
    def tables(self) -> dict[int | str, tuple[Tables, Tables]]:
        """Each thumbnail's integral image and its square's (float64: no rounding where sums of squares are
        subtracted), by side: the sum over any window in four look-ups (``window_sums``)."""
        return {side: (Tables(rows, False), Tables(rows, True)) for side, rows in self.sides.items()}


class Sides:
    """The high-passed float thumbnails of ``band`` of the rows asked for (``Thumbnails.sides``)."""

    def __init__(self, grey: torch.Tensor, band: int | str) -> None:
        self.grey, self.band, self.side = grey, band, pixels(band)
        # Every row made once where they are few (``EAGER``); the coarse band only ever for the plain pairs' rows.
        self.eager = len(grey) <= EAGER and band != COARSE
        self.whole: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.grey)

    def __getitem__(self, rows: torch.Tensor | slice) -> torch.Tensor:
        if self.eager:
            if self.whole is None:
                self.whole = self.made(slice(None))
            return self.whole[rows]
        return self.made(rows)

    def made(self, rows: torch.Tensor | slice) -> torch.Tensor:
        large = self.grey[rows].float()
        if self.side != SIDE:
            large = F.interpolate(large, size=(self.side, self.side), mode="bilinear", antialias=True)
        return highpass(large, BLUR[self.band])


class Tables:
    """The integral images (of the square where ``squared``) of the rows asked for, from ``Sides``."""

    def __init__(self, rows: Sides, squared: bool) -> None:
        self.rows, self.squared = rows, squared
        self.whole: torch.Tensor | None = None  # every row's, made once, where its band's are (``Sides.eager``)

    def __getitem__(self, rows: torch.Tensor | slice) -> torch.Tensor:
        if self.rows.eager:
            if self.whole is None:
                self.whole = self.made(slice(None))
            return self.whole[rows]
        return self.made(rows)

    def made(self, rows: torch.Tensor | slice) -> torch.Tensor:
        images = self.rows[rows]
        return integral(images * images if self.squared else images)


def pixels(band: int | str) -> int:
    """The side of a band's thumbnails: ``COARSE``'s are ``SIDE``'s."""
    return SIDE if band == COARSE else int(band)


def integral(images: torch.Tensor) -> torch.Tensor:
    """``images`` summed from the top left corner, with a row and a column of zeros before."""
    return F.pad(images.double(), (1, 0, 1, 0)).cumsum(-1).cumsum(-2)


def square(image: object) -> tuple[torch.Tensor, float]:
    """A decoded file (a PIL image, a uint8 ``C x H x W`` tensor or an ``H x W x C`` array) as a ``3 x SIDE x SIDE``
    RGB float thumbnail, squashed to a square, and its width / height (Pillow's antialiased resize for an image:
    five times faster than through a tensor)."""
    if isinstance(image, Image.Image):
        small = image.convert("RGB").resize((SIDE, SIDE), Image.Resampling.BILINEAR)
        return torch.from_numpy(np.array(small, dtype=np.float32)).permute(2, 0, 1), image.width / image.height
    if isinstance(image, np.ndarray):
        pixels = torch.as_tensor(np.ascontiguousarray(image)).permute(2, 0, 1).float()  # a .npy file's array
    else:
        pixels = torch.as_tensor(image).float()
    pixels = pixels[:3].expand(3, -1, -1) if len(pixels) < 3 else pixels[:3]  # grey as RGB; alpha dropped
    return TF.resize(pixels, [SIDE, SIDE], antialias=True), pixels.shape[-1] / pixels.shape[-2]


def highpass(images: torch.Tensor, sigma: float) -> torch.Tensor:
    """Each image less its blur: what is left is the picture's detail, not its lighting."""
    return images - TF.gaussian_blur(images, [int(4 * sigma) | 1] * 2, [sigma, sigma])


def thumbnail(image: object) -> tuple[torch.Tensor, float, torch.Tensor]:
    """One decoded file's thumbnail as ``Thumbnails`` keeps it: grey uint8 ``1 x SIDE x SIDE`` (ITU-R 601 luma,
    as Pillow's "L"), width / height, mean Cb and Cr. Made where the file is decoded (a loader worker of the
    embedding pass): the file is decoded once, and 1 KB a file comes back."""
    rgb, aspect = square(image)
    grey = torch.einsum("chw,c->hw", rgb, LUMA)[None].round().clamp(0, 255).to(torch.uint8)
    chroma = torch.einsum("chw,kc->k", rgb, CHROMA) / (SIDE * SIDE)  # the picture's mean Cb and Cr
    return grey, aspect, chroma


def thumbnails(images: Iterable[object]) -> Thumbnails:
    """The thumbnails of decoded files (``square``'s kinds), in their order."""
    made = [thumbnail(image) for image in images]
    if not made:
        return Thumbnails(torch.zeros(0, 1, SIDE, SIDE, dtype=torch.uint8), torch.zeros(0), torch.zeros(0, 2))
    grey, aspect, chroma = zip(*made, strict=True)
    return Thumbnails(torch.stack(grey), torch.tensor(aspect, dtype=torch.float32), torch.stack(chroma))


def centred(templates: torch.Tensor, contrast: float = CONTRAST) -> torch.Tensor:
    """Templates less their mean, divided by their norm (``contrast`` added): the dot product of two is their NCC."""
    templates = templates - templates.mean((-2, -1), keepdim=True)
    count = templates.shape[-2] * templates.shape[-1]
    return templates / (templates.pow(2).sum((-2, -1), keepdim=True) + contrast**2 * count).sqrt()


def earlier_pairs(graph: Neighbours, floor: float) -> torch.Tensor:
    """(file, earlier file) pairs of the graph, as ``later * N + earlier`` codes: each file's ``NEIGHBOURS`` most
    similar files of each earlier split and, in its own split, its most similar earlier file among its nearest
    (a burst of photos of one scene would list every pair), at least ``floor`` similar."""
    index, similarity = graph.index, graph.similarity  # N x splits x k
    count, groups, depth = index.shape
    rows = torch.arange(count)
    code = torch.bucketize(rows, torch.tensor(graph.starts[1:-1], dtype=torch.long), right=True)  # each file's split
    split = torch.arange(groups)[None, :, None]
    close = (similarity >= floor) & (index >= 0)
    other = (split < code[:, None, None]) & (torch.arange(depth) < NEIGHBOURS)[None, None, :] & close
    own = (split == code[:, None, None]) & (index < rows[:, None, None]) & close
    own &= own.cumsum(2) == 1  # the most similar earlier one only
    keep = other | own
    return rows[:, None, None].expand_as(index)[keep] * count + index[keep]


def thumbnail_rows(thumbs: Thumbnails, mirror: bool) -> torch.Tensor:
    """Each file's whole ``SCREEN_SIDE`` thumbnail as a unit row (a dot product of two is their NCC; the mirror
    image where ``mirror``), float16, chunk by chunk: the float thumbnails of every file are never made at once."""
    rows = torch.empty(len(thumbs), SCREEN_SIDE * SCREEN_SIDE, dtype=torch.float16)
    for top in range(0, len(thumbs), THUMBNAILS_PER_CHUNK):
        small = thumbs.sides[SCREEN_SIDE][slice(top, top + THUMBNAILS_PER_CHUNK)]
        rows[top : top + len(small)] = centred(small.flip(-1) if mirror else small).flatten(1).half()
    return rows


def candidates(
    graph: Neighbours, thumbs: Thumbnails, splits: list[str], device: torch.device, show: bool = False
) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs worth a check (module docstring, step 1): the later file of each, and the earlier one. The
    embeddings' pairs come from the audit's one neighbour graph; the thumbnails' from a search of their own: the
    pictures and their mirror images ask one index of the pictures, each file only its own and earlier splits."""
    plain = thumbnail_rows(thumbs, False)
    asked = [plain, thumbnail_rows(thumbs, True)]
    what = "audit: similar thumbnails, as is and mirrored"
    found = searches(plain, splits, NEIGHBOURS + 1, device, asked, show, what, earlier=True)
    codes = [earlier_pairs(graph, SHORTLIST_COSINE)] + [earlier_pairs(each, SCREEN) for each in found]
    codes = torch.cat(codes).unique()  # sorted
    return codes // len(splits), codes % len(splits)


def crop_shapes(aspect: torch.Tensor, side: int) -> torch.Tensor:
    """For each pair, the template sizes (height, width) to look for in the other file's ``side`` x ``side``
    thumbnail: each crop of ``FRACTIONS`` at the template's own shape (``aspect``: the other file's width / height
    over the template file's); 0 where the crop would be smaller than ``SMALLEST`` or the picture overflow."""
    shapes = []
    for fraction in FRACTIONS:
        wide, tall = fraction * torch.clamp(1 / aspect, max=1.0), fraction * torch.clamp(aspect, max=1.0)
        shape = torch.stack([(tall * side).round(), (wide * side).round()], dim=1).long()
        shape[torch.minimum(wide, tall) < SMALLEST] = 0
        shapes.append(shape)
    return torch.stack(shapes, dim=1)  # pairs x fractions x 2


def best_match(thumbs: Thumbnails, later: torch.Tensor, earlier: torch.Tensor, side: int) -> torch.Tensor:
    """Each pair's best NCC at ``side`` pixels: the whole pictures, then each file's crops (``crop_shapes``) slid
    over the other, mirrored or not (module docstring, step 2); at ``SIDE``, plain pairs on two bands too (step 3)."""
    best = torch.full((len(later),), -1.0)
    plain = plain_pairs(thumbs, later, earlier) if side == SIDE else torch.zeros(len(later), dtype=torch.bool)
    for template, other in ((later, earlier), (earlier, later)):
        shapes = crop_shapes(thumbs.aspect[other] / thumbs.aspect[template], side)
        if template is later:  # the whole pictures, whatever their shapes (a squashed copy too): once
            shapes = torch.cat([torch.full((len(later), 1, 2), side), shapes], dim=1)
        pair = torch.arange(len(later))[:, None].expand(shapes.shape[:2]).flatten()
        shapes = shapes.flatten(0, 1)
        wanted = shapes[:, 0] > 0
        pair, key = pair[wanted], shapes[wanted, 0] * (side + 1) + shapes[wanted, 1]
        for code in key.unique().tolist():  # one grouped convolution for every pair that wants this size
            height, width = divmod(code, side + 1)
            chosen = pair[key == code].unique()
            pairs = (template[chosen], other[chosen])
            found = correlation(thumbs, side, pairs, (height, width)).flatten(1).amax(1)
            both = plain[chosen]
            if both.any():  # step 3: the fine and the coarse band must match at the same place
                plain_pair = (pairs[0][both], pairs[1][both])
                fine = correlation(thumbs, side, plain_pair, (height, width), PLAIN_CONTRAST)
                coarse = correlation(thumbs, COARSE, plain_pair, (height, width))
                twice = torch.minimum(fine, coarse).flatten(1).amax(1) - PLAIN_MARGIN
                found[both] = torch.maximum(found[both], twice)
            best[chosen] = torch.maximum(best[chosen], found)
    return best


def plain_pairs(thumbs: Thumbnails, later: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Whether both files of each pair are plain: their fine detail (the standard deviation of the ``SIDE``
    high-pass) under ``PLAIN_DETAIL``, measured on the pair's own thumbnails (module docstring, step 3)."""
    detail = thumbs.sides[SIDE][torch.cat([later, earlier])].flatten(1).std(1)
    return torch.maximum(detail[: len(later)], detail[len(later) :]) < PLAIN_DETAIL


def correlation(
    thumbs: Thumbnails,
    band: int | str,
    pair: tuple[torch.Tensor, torch.Tensor],
    size: tuple[int, int],
    contrast: float = CONTRAST,
) -> torch.Tensor:
    """The NCC of each template (the first files of ``pair``, in ``band``) resized to ``size`` at every offset in
    its picture (the second files), as is and mirrored: pairs x 2 x offsets."""
    templates, pictures = thumbs.sides[band][pair[0]], thumbs.sides[band][pair[1]]
    side = pixels(band)
    count, area = len(templates), size[0] * size[1]
    resized = (
        templates if size == (side, side) else F.interpolate(templates, size=size, mode="bilinear", antialias=True)
    )
    kernels = centred(resized, contrast)
    plain, squared = (window_sums(table[pair[1]], size) for table in thumbs.tables[band])  # each window's sums
    norms = ((squared - plain * plain / area).clamp_min(0) + contrast**2 * area).sqrt().flatten(1).float()
    stacked = pictures.reshape(1, count, side, side)  # one channel a pair: groups=count pairs each with its own
    found = [F.conv2d(stacked, kernel, groups=count)[0].flatten(1) / norms for kernel in (kernels, kernels.flip(-1))]
    return torch.stack(found, dim=1)


def window_sums(table: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The sum of every ``size`` window, from an integral image: four look-ups a window."""
    height, width = size
    return (
        table[..., height:, width:]
        - table[..., :-height, width:]
        - table[..., height:, :-width]
        + (table[..., :-height, :-width])
    )


def pixel_scores(
    thumbs: Thumbnails, later: torch.Tensor, earlier: torch.Tensor, done: Callable[[int], object] = lambda _: None
) -> torch.Tensor:
    """Each pair's best NCC at ``SIDE`` (-1 where the screen at ``SCREEN_SIDE`` dropped it), ``PAIRS_PER_CHUNK``
    pairs at a time; ``done`` is told how many pairs each chunk checked."""
    scores = torch.full((len(later),), -1.0)
    with one_thread():
        for start in range(0, len(later), PAIRS_PER_CHUNK):
            part = slice(start, start + PAIRS_PER_CHUNK)
            screened = best_match(*chunk(thumbs, later[part], earlier[part]), SCREEN_SIDE)
            passed = torch.nonzero(screened >= SCREEN).flatten() + start
            if len(passed):
                scores[passed] = best_match(*chunk(thumbs, later[passed], earlier[passed]), SIDE)
            done(len(screened))
    return scores


def chunk(
    thumbs: Thumbnails, later: torch.Tensor, earlier: torch.Tensor
) -> tuple[Thumbnails, torch.Tensor, torch.Tensor]:
    """The thumbnails of a chunk's files only, and its pairs numbered in them: its high-passed bands and integral
    images are made once for the chunk (at most ``2 * PAIRS_PER_CHUNK`` rows: under ``EAGER``), not again for each
    crop size and direction, whatever the number of files."""
    rows, inverse = torch.cat([later, earlier]).unique(return_inverse=True)
    kept = Thumbnails(thumbs.grey[rows], thumbs.aspect[rows], thumbs.chroma[rows])
    return kept, inverse[: len(later)], inverse[len(later) :]


def near_copies(
    graph: Neighbours | torch.Tensor,
    thumbs: Thumbnails,
    splits: list[str],
    threshold: float = MATCH,
    device: torch.device | None = None,
    show: bool = False,
) -> list[tuple[int, int, float]]:
    """(later file, earlier file, NCC) of every pair that shows the same picture, by the audit's order.
    ``graph``: the audit's neighbour graph of the embeddings (``neighbours.search``), or the unit embeddings."""
    device = device or torch.device("cpu")
    if isinstance(graph, torch.Tensor):
        graph = search(graph, splits, NEIGHBOURS + 1, device, earlier=True)  # for copies only: earlier splits
    later, earlier = candidates(graph, thumbs, splits, device, show)
    alike = (thumbs.chroma[later] - thumbs.chroma[earlier]).norm(dim=1) <= COLOUR  # a copy keeps its colours
    later, earlier = later[alike], earlier[alike]
    shown = meter("audit: pixel check", len(later), show, "pairs")
    try:
        scores = pixel_scores(thumbs, later, earlier, shown.update)
    finally:
        shown.close()
    hits = torch.nonzero(scores >= threshold).flatten().tolist()
    return [(int(later[i]), int(earlier[i]), float(scores[i])) for i in hits]
