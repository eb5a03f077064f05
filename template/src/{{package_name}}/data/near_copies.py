"""Near copies: pairs of files that show the same picture, resized, re-compressed, cropped, mirrored or recoloured.

Embeddings alone cannot tell a copy from another part of the same scene: two crops of one photo that share no
pixel score as high a cosine as a resized copy, and a cropped copy often scores lower (benchmarks/data_audit.py).
So the audit asks the embeddings only for candidates and settles each candidate on the pixels:

1. Candidates, for each file, among the files before it (train, then val, then test): its ``NEIGHBOURS`` nearest
   files of each earlier split and its nearest earlier file of its own split, by the embeddings' cosine (from
   ``SHORTLIST_COSINE``: a crop keeps its meaning) and, as many again, by the correlation of small grey
   thumbnails, mirror image included, from ``SCREEN`` (a resized, re-compressed, recoloured or mirrored copy,
   whatever the network).
   A file's real copy is never hidden behind another look-alike: every split gets its own nearest files. A pair
   whose mean colours differ by more than ``COLOUR`` is dropped: a copy keeps its colours.
2. The check: does one file's picture appear in the other's, whole or as a crop of ``FRACTIONS`` of a side (at the
   crop's own shape), at any offset, mirrored or not? Normalized cross-correlation (NCC) of high-passed grey
   thumbnails, so brightness and contrast changes cancel out and a plain gradient of sky matches nothing; every
   candidate at ``SCREEN_SIDE`` pixels, those past ``SCREEN`` again at ``SIDE`` pixels, whose best NCC is the pair's
   score. A pair scoring at least the threshold (``MATCH``, ``audit --near-duplicate-similarity``) is a near copy.
   Two bands: the fine one (each thumbnail less its blur of ``BLUR``) for every pair, and where both pictures have
   little fine detail (``PLAIN``: a blurred photo of wood, fur, clouds, and its copy) also a coarser one (less its
   blur of ``COARSE``), the better NCC of the two kept. A blurred picture keeps little in the fine band, and
   re-compression noise is much of that: its copies scored under the threshold there. The coarse band is not asked
   where either picture has detail: there its larger shapes (a tower against a dusk sky, a dark field of stars) let
   other crops of one scene match.

Written here with torch (grouped ``conv2d`` for the correlation, integral images for the windows' variances) rather
than with a library: the image-dedup libraries hash or embed whole pictures (imagededup, cleanvision: no crops),
and OpenCV's ``matchTemplate`` (not a dependency of the project) takes one pair at a time.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image
from torchvision.transforms.v2 import functional as TF

SIDE, SCREEN_SIDE = 32, 16  # thumbnail sides (pixels, squashed to a square) of the check and of the screen
BLUR = {SIDE: 2.0, SCREEN_SIDE: 1.0}  # the high-pass: each thumbnail less its Gaussian blur of this sigma (pixels)
# The coarse band's blur, and the fine band's standard deviation (grey levels, at SIDE) under which a picture is
# plain: a pair of plain pictures is compared on the coarse band too. Measured on 144 val crops of the benchmark's
# ten photos (benchmarks/real_photos.py), Gaussian-blurred by 2-4 % of a side, cropped to 90-95 % a side and saved at
# JPEG quality 65-75: the fine band alone found 73 % of the copies, both bands 95 %, with 3 pairs of val crops sharing
# no pixel above 0.7 among 1,620 (2 with the fine band alone); the same crops unblurred 99 % (91 %). Against 2,140
# pairs of a val and a training crop of one photo that share no pixel, 1 above 0.7 (0). Half of the blurred crops are
# under 9.5 in the fine band, an unblurred crop's median is 15.8. With the coarse band for a pair where either
# picture was plain (and PLAIN 14), the injected-defect benchmark's precision across splits fell from 0.99 to 0.91:
# crops of rocket's dusk sky and hubble's field, of little fine detail, matched other crops there.
COARSE = {SIDE: 4.0, SCREEN_SIDE: 2.0}
PLAIN = 12.0
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
PAIRS_PER_CHUNK = 1024  # candidate pairs compared at once: 1,024 x 32 x 32 floats a step
ROWS_PER_CHUNK = 1024  # rows of a similarity matrix made at once


@dataclass(frozen=True)
class Thumbnails:
    """Every file's grey thumbnails, high-passed (N x 1 x side x side, by side), its width / height and its colour;
    ``coarse``: the same less a wider blur (``COARSE``), for the pictures that are ``plain`` (``PLAIN``)."""

    sides: dict[int, torch.Tensor]
    aspect: torch.Tensor
    chroma: torch.Tensor  # N x 2: each picture's mean colour, Cb and Cr (0 for grey)
    coarse: dict[int, torch.Tensor] = field(default_factory=dict)  # by side, as ``sides``
    plain: torch.Tensor | None = None  # N booleans: little fine detail; two such are compared on the coarse band too

    @cached_property
    def tables(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """Each thumbnail's integral image and its square's (float64: no rounding where sums of squares are
        subtracted), by side: the sum over any window in four look-ups (``window_sums``)."""
        return {side: (integral(images), integral(images * images)) for side, images in self.sides.items()}

    @cached_property
    def coarse_tables(self) -> dict[int, tuple[torch.Tensor, torch.Tensor]]:
        """``tables`` of the coarse band."""
        return {side: (integral(images), integral(images * images)) for side, images in self.coarse.items()}


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


def thumbnails(images: Iterable[object]) -> Thumbnails:
    """The thumbnails of decoded files (``square``'s kinds), in their order."""
    squares, aspects = [], []
    for image in images:
        rgb, aspect = square(image)
        squares.append(rgb)
        aspects.append(aspect)
    colours = torch.stack(squares) if squares else torch.zeros(0, 3, SIDE, SIDE)
    large = torch.einsum("nchw,c->nhw", colours, LUMA)[:, None]  # ITU-R 601 luma, as Pillow's "L"
    small = (
        F.interpolate(large, size=(SCREEN_SIDE, SCREEN_SIDE), mode="bilinear", antialias=True)
        if squares
        else (torch.zeros(0, 1, SCREEN_SIDE, SCREEN_SIDE))
    )
    sides = {SIDE: highpass(large, BLUR[SIDE]), SCREEN_SIDE: highpass(small, BLUR[SCREEN_SIDE])}
    chroma = torch.einsum("nchw,kc->nk", colours, CHROMA) / (SIDE * SIDE)  # each picture's mean Cb and Cr
    return with_coarse_band(Thumbnails(sides, torch.tensor(aspects, dtype=torch.float32), chroma), large, small)


def with_coarse_band(thumbs: Thumbnails, large: torch.Tensor, small: torch.Tensor) -> Thumbnails:
    """``thumbs`` with the coarse band (``COARSE``) of the grey thumbnails ``large`` (``SIDE``) and ``small``
    (``SCREEN_SIDE``), and which pictures are plain (``PLAIN``: their fine band's standard deviation at ``SIDE``)."""
    coarse = {SIDE: highpass(large, COARSE[SIDE]), SCREEN_SIDE: highpass(small, COARSE[SCREEN_SIDE])}
    plain = thumbs.sides[SIDE].flatten(1).std(1) < PLAIN if len(large) else torch.zeros(0, dtype=torch.bool)
    return Thumbnails(thumbs.sides, thumbs.aspect, thumbs.chroma, coarse, plain)


def centred(templates: torch.Tensor) -> torch.Tensor:
    """Templates less their mean, divided by their norm (``CONTRAST`` added): the dot product of two is their NCC."""
    templates = templates - templates.mean((-2, -1), keepdim=True)
    count = templates.shape[-2] * templates.shape[-1]
    return templates / (templates.pow(2).sum((-2, -1), keepdim=True) + CONTRAST**2 * count).sqrt()


def nearest_earlier(
    vectors: torch.Tensor, mirrored: torch.Tensor | None, splits: list[str], floor: float
) -> set[tuple[int, int]]:
    """(file, earlier file) pairs: each file's ``NEIGHBOURS`` most similar files of each earlier split and its most
    similar earlier file of its own split, at least ``floor`` similar (unit rows, so a matrix product, P17);
    ``mirrored``: the rows of the mirror images, compared too."""
    names = list(dict.fromkeys(splits))
    codes = torch.tensor([names.index(split) for split in splits])
    pairs: set[tuple[int, int]] = set()
    for code in range(len(names)):
        columns = torch.nonzero(codes == code).flatten()
        later = torch.nonzero(codes >= code).flatten()
        for start in range(0, len(later), ROWS_PER_CHUNK):
            rows = later[start : start + ROWS_PER_CHUNK]
            similarity = vectors[rows] @ vectors[columns].T
            if mirrored is not None:
                similarity = torch.maximum(similarity, mirrored[rows] @ vectors[columns].T)
            similarity = similarity.masked_fill(columns[None, :] >= rows[:, None], float("-inf"))  # earlier only
            values, where = similarity.topk(min(NEIGHBOURS, len(columns)), dim=1)
            # In its own split, the nearest earlier file only (a burst of photos of one scene would list every pair).
            own = (codes[rows] == code)[:, None] & (torch.arange(where.shape[1]) > 0)[None, :]
            keep = (values >= floor) & ~own
            pairs |= set(zip(rows[:, None].expand_as(where)[keep].tolist(), columns[where[keep]].tolist(), strict=True))
    return pairs


def candidates(features: torch.Tensor, thumbs: Thumbnails, splits: list[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs worth a check (module docstring, step 1): the later file of each, and the earlier one."""
    small = thumbs.sides[SCREEN_SIDE]
    plain, mirror = centred(small).flatten(1), centred(small.flip(-1)).flatten(1)  # whole pictures: a dot is the NCC
    pairs = nearest_earlier(features, None, splits, SHORTLIST_COSINE) | nearest_earlier(plain, mirror, splits, SCREEN)
    ordered = sorted(pairs)
    return torch.tensor([p[0] for p in ordered], dtype=torch.long), torch.tensor(
        [p[1] for p in ordered], dtype=torch.long
    )


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


def best_match(thumbs: Thumbnails, side: int, later: torch.Tensor, earlier: torch.Tensor) -> torch.Tensor:
    """Each pair's best NCC at ``side`` pixels, on the fine band; for a pair of plain pictures, the better of the
    fine and the coarse band's (module docstring, step 2)."""
    best = band_match((thumbs.sides[side], thumbs.tables[side]), thumbs.aspect, side, (later, earlier))
    if thumbs.plain is None or not thumbs.coarse:
        return best
    low = torch.nonzero(thumbs.plain[later] & thumbs.plain[earlier]).flatten()  # both plain: a copy of a plain one
    if len(low):
        band = (thumbs.coarse[side], thumbs.coarse_tables[side])
        best[low] = torch.maximum(best[low], band_match(band, thumbs.aspect, side, (later[low], earlier[low])))
    return best


def band_match(
    band: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]],
    aspect: torch.Tensor,
    side: int,
    pairs: tuple[torch.Tensor, torch.Tensor],
) -> torch.Tensor:
    """Each pair's best NCC on one band (its thumbnails and their integral ``tables``): the whole pictures, then
    each file's crops (``crop_shapes``) slid over the other, mirrored or not. ``pairs``: the later and earlier files."""
    later, earlier = pairs
    best = torch.full((len(later),), -1.0)
    for template, other in ((later, earlier), (earlier, later)):
        shapes = crop_shapes(aspect[other] / aspect[template], side)
        if template is later:  # the whole pictures, whatever their shapes (a squashed copy too): once
            shapes = torch.cat([torch.full((len(later), 1, 2), side), shapes], dim=1)
        pair = torch.arange(len(later))[:, None].expand(shapes.shape[:2]).flatten()
        shapes = shapes.flatten(0, 1)
        wanted = shapes[:, 0] > 0
        pair, key = pair[wanted], shapes[wanted, 0] * (side + 1) + shapes[wanted, 1]
        for code in key.unique().tolist():  # one grouped convolution for every pair that wants this size
            height, width = divmod(code, side + 1)
            chosen = pair[key == code].unique()
            found = correlation(band, side, (template[chosen], other[chosen]), (height, width))
            best[chosen] = torch.maximum(best[chosen], found)
    return best


def correlation(
    band: tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]],
    side: int,
    pair: tuple[torch.Tensor, torch.Tensor],
    size: tuple[int, int],
) -> torch.Tensor:
    """The best NCC of each template (the first files of ``pair``) resized to ``size``, mirrored too, over every
    offset in its picture (the second files), on ``band`` (thumbnails, and their integral tables)."""
    images, tables = band
    templates, pictures = images[pair[0]], images[pair[1]]
    count, area = len(templates), size[0] * size[1]
    resized = (
        templates if size == (side, side) else F.interpolate(templates, size=size, mode="bilinear", antialias=True)
    )
    kernels = centred(resized)
    plain, squared = (window_sums(table[pair[1]], size) for table in tables)  # each window's sums
    norms = ((squared - plain * plain / area).clamp_min(0) + CONTRAST**2 * area).sqrt().flatten(1).float()
    stacked = pictures.reshape(1, count, side, side)  # one channel a pair: groups=count pairs each with its own
    best = torch.full((count,), -1.0)
    for kernel in (kernels, kernels.flip(-1)):
        scores = F.conv2d(stacked, kernel, groups=count)[0].flatten(1) / norms
        best = torch.maximum(best, scores.amax(1))
    return best


def window_sums(table: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """The sum of every ``size`` window, from an integral image: four look-ups a window."""
    height, width = size
    return (
        table[..., height:, width:]
        - table[..., :-height, width:]
        - table[..., height:, :-width]
        + (table[..., :-height, :-width])
    )


def near_copies(
    features: torch.Tensor, thumbs: Thumbnails, splits: list[str], threshold: float = MATCH
) -> list[tuple[int, int, float]]:
    """(later file, earlier file, NCC) of every pair that shows the same picture, by the audit's order."""
    later, earlier = candidates(features, thumbs, splits)
    alike = (thumbs.chroma[later] - thumbs.chroma[earlier]).norm(dim=1) <= COLOUR  # a copy keeps its colours
    later, earlier = later[alike], earlier[alike]
    scores = torch.full((len(later),), -1.0)
    for start in range(0, len(later), PAIRS_PER_CHUNK):
        part = slice(start, start + PAIRS_PER_CHUNK)
        screened = best_match(thumbs, SCREEN_SIDE, later[part], earlier[part])
        passed = torch.nonzero(screened >= SCREEN).flatten() + start
        if len(passed):
            scores[passed] = best_match(thumbs, SIDE, later[passed], earlier[passed])
    hits = torch.nonzero(scores >= threshold).flatten().tolist()
    return [(int(later[i]), int(earlier[i]), float(scores[i])) for i in hits]
