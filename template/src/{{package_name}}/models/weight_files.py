"""Where a weights file lives, and fetching it: torch.hub's cache, the Hugging Face cache, or a local path.

Each kind of file says where it is (``find``: no network), and ``fetch``
downloads it into its library's own cache where a network is reachable.
Without one, ``fetch`` ends in one line that names the file, where to fetch
it on a machine with network and where to put it here: never a traceback,
never a silent random start. Before a Hugging Face download, one connection
is tried with a short timeout (``unreachable``): without a network that is the
line, at once, not huggingface_hub's five retries. ``HF_HUB_OFFLINE=1`` (Hugging Face's switch,
which timm obeys) turns downloads off for torch.hub too: the tests set it,
and so may a cluster whose nodes have no network.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import http.client
import os
import socket
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import torch

from ..core.errors import UserError

SOCKET_TIMEOUT_S = 30.0  # a download that stalls this long fails with its reason instead of hanging
PROBE_TIMEOUT_S = 5.0  # the one connection tried before a Hugging Face download: no answer by then is no network
OFF = {"1", "ON", "YES", "TRUE"}  # the values huggingface_hub reads as true


def downloads_off() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").upper() in OFF


def short_digest(path: Path) -> str:
    """The file's SHA-256, first 12 hex digits: what the start line and the checkpoint name it by."""
    stat = path.stat()
    return file_digest(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def file_digest(path: str, size: int, mtime_ns: int) -> str:
    """Read once per file and version (size, modification time): the start line and the checkpoint both ask."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:12]


@contextlib.contextmanager
def socket_timeout(seconds: float) -> Iterator[None]:
    """urllib (torch.hub's downloader) waits forever on a silent server unless sockets have a default timeout."""
    previous = socket.getdefaulttimeout()
    socket.setdefaulttimeout(seconds)
    try:
        yield
    finally:
        socket.setdefaulttimeout(previous)


def hub_endpoint() -> str:
    """Where huggingface_hub downloads from: ``HF_ENDPOINT`` (a mirror), else huggingface.co."""
    from huggingface_hub import constants

    return constants.ENDPOINT


def unreachable(url: str, timeout: float = PROBE_TIMEOUT_S) -> str:
    """'' where a connection to ``url``'s host (or the proxy that reaches it) opens within ``timeout``; else why not.

    One attempt, before huggingface_hub's own: without a network it retries five times with growing waits (half a
    minute, a warning line each) before its error; this says it in one line, at once.
    """
    parts = urlparse(url)
    target = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(target[0]):  # the proxy is what a download connects to
        via = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        target = via.hostname or "", via.port or 80
    try:
        socket.create_connection(target, timeout=timeout).close()
    except OSError as exc:  # name resolution, refused, unreachable network, timeout
        reason = exc.strerror or str(exc) or type(exc).__name__
        return f"cannot reach {target[0]}:{target[1]} ({reason})"
    return ""


def cannot_download(what: str, missing: str, why: str, fix: str) -> UserError:
    """The one line: what is missing, why it could not be downloaded here, and what to do about it."""
    return UserError(f"{what}: {missing} and cannot be downloaded here ({why}): {fix}")


@dataclass(frozen=True)
class LocalFile:
    """A file the config names by its path; nothing to download."""

    path: Path

    def find(self) -> Path | None:
        return self.path if self.path.is_file() else None

    def fetch(self, what: str) -> Path:
        if not self.path.is_file():
            raise UserError(f"{what}: {self.path} not found: give the path of a local weights file, or a name")
        return self.path

    def where(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class TorchHubFile:
    """A file of torch.hub's cache (``$TORCH_HOME/hub/checkpoints``), named as the last part of its URL."""

    url: str

    @property
    def path(self) -> Path:
        return Path(torch.hub.get_dir()) / "checkpoints" / os.path.basename(urlparse(self.url).path)

    def find(self) -> Path | None:
        return self.path if self.path.is_file() else None

    def fetch(self, what: str) -> Path:
        if self.find():
            return self.path
        why = "downloads are off: HF_HUB_OFFLINE is set" if downloads_off() else self.download()
        if not why:
            return self.path
        fix = (
            f"on a machine with network, download {self.url} (e.g. curl -LO URL) and put the file in "
            f"{self.path.parent}/ here, or set TORCH_HOME to a folder whose hub/checkpoints/ holds it"
        )
        raise cannot_download(what, f"{self.path.name} is not in torch.hub's cache {self.path.parent}", why, fix)

    def download(self) -> str:
        """Into the cache, checked against the hash prefix in the file's name; '' when done, else why not."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        found = torch.hub.HASH_REGEX.search(self.path.name)  # torchvision's names end in -<sha256 prefix>
        try:
            with socket_timeout(SOCKET_TIMEOUT_S):
                torch.hub.download_url_to_file(self.url, str(self.path), found.group(1) if found else None)
        except (OSError, http.client.HTTPException, RuntimeError) as exc:  # URLError, timeouts, a hash mismatch
            return f"{type(exc).__name__}: {exc}".splitlines()[0]
        return ""

    def where(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class HubFile:
    """A file of a Hugging Face repository (timm's weights), in huggingface_hub's cache (``HF_HUB_CACHE``)."""

    repo: str
    filenames: tuple[str, ...]  # the first the repository has: timm prefers safetensors
    revision: str | None = None

    def find(self) -> Path | None:
        from huggingface_hub import try_to_load_from_cache

        for filename in self.filenames:
            cached = try_to_load_from_cache(self.repo, filename, revision=self.revision)
            if isinstance(cached, str):  # else None (not cached) or a marker that the repository lacks it
                return Path(cached)
        return None

    def fetch(self, what: str) -> Path:
        found = self.find()
        if found is not None:
            return found
        why = "downloads are off: HF_HUB_OFFLINE is set" if downloads_off() else unreachable(hub_endpoint())
        for filename in self.filenames if not why else ():
            path, why, absent = self.download(filename)
            if path is not None:
                return path
            if not absent:  # the hub could not be asked: the next name would wait just as long
                break
        from huggingface_hub import constants

        fix = (
            f"on a machine with network, run `hf download {self.repo} {self.filenames[0]}` and copy "
            f"{constants.HF_HUB_CACHE}/models--{self.repo.replace('/', '--')} to the same place here (or set "
            "HF_HUB_CACHE to a copy of that cache), or set model.pretrained_weights to the downloaded file"
        )
        missing = f"{self.repo}'s {self.filenames[0]} is not in the Hugging Face cache {constants.HF_HUB_CACHE}"
        raise cannot_download(what, missing, why, fix)

    def download(self, filename: str) -> tuple[Path | None, str, bool]:
        """(the cached file, '', False), or (None, why not, whether the hub said the repository lacks the file);
        huggingface_hub has its own timeouts, retries and locks."""
        from huggingface_hub import hf_hub_download
        from huggingface_hub.errors import EntryNotFoundError, LocalEntryNotFoundError

        try:
            return Path(hf_hub_download(self.repo, filename, revision=self.revision)), "", False
        except LocalEntryNotFoundError as exc:  # offline, or the hub not reachable: a subclass of the next one
            return None, f"{type(exc).__name__}: {exc}".splitlines()[0], False
        except EntryNotFoundError:
            return None, f"{self.repo} has no {filename}", True  # the next name may be there
        except (OSError, ValueError) as exc:  # HTTP errors, connection errors, a repository that does not exist
            return None, f"{type(exc).__name__}: {exc}".splitlines()[0], False

    def where(self) -> str:
        return f"{self.repo} (Hugging Face cache)"


WeightFile = LocalFile | TorchHubFile | HubFile
