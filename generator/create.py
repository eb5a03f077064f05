"""``torch-scaffold new``: copier copy from this template, then what to type next.

copier itself asks the questions and validates the answers; this wrapper only
fixes the flags a user would otherwise have to remember and prints the next
steps with the project's real package name.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from copier import run_copy

from .project import UsageError, local_template, read_project


def create(dest: Path, template: str, data: dict[str, str], vcs_ref: str | None, defaults: bool) -> int:
    check_timm_model(data.get("model", ""))
    # copier records the source as given; a relative path would be read from inside the project later.
    template = local_template(template)
    # unsafe=True: this is our own template; its migrations run commands on update.
    run_copy(template, dest, data=data, vcs_ref=vcs_ref, defaults=defaults, unsafe=True, quiet=True)
    project = read_project(dest)
    package = project.answers["package_name"]
    print(f"Created {dest} from torch-scaffold {project.version}. Next steps:")
    print(f"  cd {dest}")
    print("  git init && git add -A && git commit -m 'Generated project'   # copier update needs git")
    print('  python -m pip install -e ".[dev]"')
    print(f"  python -m {package} sample-data data/sample")
    print(f"  python -m {package} train --config configs/default.yaml")
    return 0


def parse_data(items: list[str]) -> dict[str, str]:
    """``-d KEY=VALUE`` as in copier's own command; copier casts each value to its question's type."""
    data = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise UsageError(f"-d {item!r} is malformed: write -d KEY=VALUE, e.g. -d model=resnet18")
        data[key] = value
    return data


def check_timm_model(model: str) -> None:
    """A ``timm/<name>`` answer against timm's registry, where timm is installed beside this command.

    copier's validator (copier.yml) sees only the answer's form: its Jinja cannot import timm. Without timm
    here the project's ``train`` checks the name where it runs, with timm installed (its ``timm`` extra).
    """
    if not model.startswith("timm/"):
        return
    try:
        import timm
    except ImportError:
        return
    name = model.removeprefix("timm/")
    architecture = name.partition(".")[0]
    if not timm.is_model(architecture) or ("." in name and name not in timm.list_pretrained(f"{architecture}.*")):
        close = difflib.get_close_matches(name, timm.list_pretrained() + timm.list_models(), n=3)
        hint = f" (did you mean {', '.join('timm/' + c for c in close)}?)" if close else ""
        raise UsageError(f"-d model={model}: timm {timm.__version__} has no model {name!r}{hint}")
