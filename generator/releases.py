"""The template's releases: the version in ``pyproject.toml``, an entry in ``CHANGELOG.md``, a git tag.

A release is made in one commit that sets ``version`` in ``pyproject.toml``
and adds its ``## [X.Y.Z]`` entry to the CHANGELOG; ``make tags`` (this
module) then tags that commit ``vX.Y.Z``. copier generates from the newest tag
and runs a release's ``_migrations`` by it, so a clone needs the tags: cloned
with them, nothing is to do; cloned without (or before a release was tagged
upstream), ``make tags`` makes them from the history. A release made before
this rule names its commit in its CHANGELOG heading (``## [0.1.0] - DATE -
commit abc1234``). The tests tag their temporary template copies with the same
functions. ``release_tags`` and ``releases_after`` read them back, as copier does, for
``torch-scaffold status``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from packaging.version import InvalidVersion, Version

ENTRY = re.compile(r"^## \[(\d+\.\d+\.\d+)\](?:.*?\bcommit ([0-9a-f]{7,40}))?", re.MULTILINE)


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def current_version(repo: Path) -> str:
    """The version in ``pyproject.toml``: the one place it is written."""
    match = re.search(r'^version = "([^"]+)"', (repo / "pyproject.toml").read_text(), re.MULTILINE)
    if match is None:
        raise SystemExit(f"{repo / 'pyproject.toml'} has no version")
    return match.group(1)


def changelog_versions(repo: Path) -> dict[str, str | None]:
    """Each ``## [X.Y.Z]`` entry of the CHANGELOG, newest first, with the commit its heading names (if any)."""
    return {version: commit for version, commit in ENTRY.findall((repo / "CHANGELOG.md").read_text())}


def release_commit(repo: Path, version: str, named: str | None) -> str | None:
    """The commit of a release: the one its heading names, else the oldest that set ``version`` to it."""
    if named:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{named}^{{commit}}") or None
    setting = f'-G^version = "{re.escape(version)}"'  # the commits whose diff adds or removes that line
    found = git(repo, "log", "--format=%H", "--reverse", setting, "--", "pyproject.toml")
    return found.splitlines()[0] if found else None


def tag_releases(repo: Path) -> list[str]:
    """Tag every released version that is not tagged yet; the tags made."""
    made = []
    existing = set(git(repo, "tag", "--list", "v*").split())
    for version, named in changelog_versions(repo).items():
        tag = f"v{version}"
        commit = release_commit(repo, version, named)
        if tag in existing or commit is None:
            continue
        git(repo, "tag", tag, commit)
        made.append(f"{tag} {commit[:10]}")
    return made


def release_tags(url: str) -> list[str]:
    """A template's release tags, oldest first: as copier, the PEP 440 tags that are not prereleases.

    ``git ls-remote`` reads a folder and a URL alike without a clone; ``url`` is copier's expanded form
    (``gh:``/``gl:`` already spelled out). A template git cannot read raises ``CalledProcessError``.
    """
    listing = subprocess.run(
        ["git", "ls-remote", "--tags", "--refs", "--", url],
        check=True,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    ).stdout
    versions = {}
    for line in listing.splitlines():
        tag = line.partition("\t")[2].removeprefix("refs/tags/")
        version = parse_release(tag)
        if version is not None and not version.is_prerelease:
            versions[tag] = version
    return sorted(versions, key=versions.__getitem__)


def parse_release(commit: str) -> Version | None:
    """The release a ``_commit`` is at or after: a tag, or ``git describe``'s ``TAG-N-gHASH``; None for a bare hash."""
    tag = re.sub(r"-\d+-g[0-9a-f]+$", "", commit)
    try:
        return Version(tag)
    except InvalidVersion:
        return None


def releases_after(commit: str, tags: list[str]) -> list[str]:
    """The releases newer than a project's ``_commit``; all of them when it names no release."""
    base = parse_release(commit)
    return [tag for tag in tags if base is None or parse_release(tag) > base]  # type: ignore[operator]


def main() -> int:
    repo = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    version, versions = current_version(repo), changelog_versions(repo)
    if version not in versions:
        print(f"pyproject.toml says {version}, which CHANGELOG.md has no '## [{version}]' entry for", file=sys.stderr)
        return 1
    made = tag_releases(repo)
    print("tagged " + ", ".join(made) if made else "every release is tagged already")
    return 0


if __name__ == "__main__":
    sys.exit(main())
