"""The audit command's options, which cli.py adds to its parser where the project holds the audit part."""

from __future__ import annotations

import argparse

from ...core.arguments import DEFAULT_CONFIG, add_config_options


def add_audit_arguments(audit: argparse.ArgumentParser) -> None:
    add_config_options(audit, f"{DEFAULT_CONFIG}, or the checkpoint's with --checkpoint")
    audit.add_argument("--checkpoint", help="embed with a trained checkpoint (default: model.pretrained_weights)")
    audit.add_argument("--out", metavar="DIR", help="where the CSVs and pictures go (default: <train.out_dir>/audit)")
    audit.add_argument(
        "--near-duplicate-similarity",
        type=float,
        metavar="NCC",
        help="files whose pixels match at least this well are near duplicates (default 0.7: docs/audit.md)",
    )
    audit.add_argument(
        "--max-files",
        type=int,
        metavar="N",
        help="audit at most N files, an even share of every class folder (default: all; docs/audit.md, At scale)",
    )
