"""Command line: train | evaluate | predict | similar | export | sample-data | pack-shards, and the parts' commands.

Bad input ends with one line on stderr and exit status 2; ``--debug`` shows
the traceback instead. SIGTERM or Ctrl-C during training checkpoints at the
next step and exits with status 75 (resume with ``--resume auto``).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .core.arguments import DEFAULT_CONFIG, add_config_options, add_train_options, parse_arguments
from .core.errors import UserError
from .core.libraries import check_libraries, import_failure
from .core.parts import part_off, present
from .training.preemption import EXIT_PREEMPTED, Preempted


def positive_int(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive whole number")
    return int(text)


def program_name() -> str:
    """What the user typed: the console script's name, or ``python -m <package>``."""
    script = Path(sys.argv[0]).name if sys.argv and sys.argv[0] else ""
    return f"python -m {__package__}" if script in ("", "__main__.py", "-c") else script


def add_checkpoint_command(commands: Any, name: str, about: str) -> argparse.ArgumentParser:
    """A command that puts a trained checkpoint to use; it runs with the checkpoint's config unless told."""
    command = commands.add_parser(name, help=about)
    add_config_options(command, "the checkpoint's")
    command.add_argument("--checkpoint", required=True, help="a .pt file written by train")
    command.add_argument(
        "--raw-weights",
        action="store_true",
        help="use the trained weights even where the checkpoint holds their moving average (train.ema_decay)",
    )
    return command


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=program_name(), description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true", help="show tracebacks instead of one-line errors")
    commands = parser.add_subparsers(dest="command", required=True)

    add_train_options(commands.add_parser("train", help="train a model"))

    add_evaluate_arguments(
        add_checkpoint_command(commands, "evaluate", "loss, top-1 accuracy and per-class precision/recall/F1")
    )

    predict = add_checkpoint_command(commands, "predict", "top-k classes for image files, or every image in folders")
    predict.add_argument("--topk", type=positive_int, default=3, help="classes to show per file (default: 3)")
    predict.add_argument("--csv", metavar="FILE", help="also write path, then class and probability per rank, as CSV")
    predict.add_argument(
        "--on-bad-file",
        choices=["error", "skip"],
        help="an unreadable file: exit 2 naming it (error) or warn (skip), after predicting every other file "
        "(default: error, whatever data.on_bad_file the model was trained with)",
    )
    predict.add_argument(
        "files",
        nargs="+",
        metavar="FILE_OR_FOLDER",
        help="folders are searched recursively; a folder pack-shards wrote gives every packed image",
    )

    similar = add_checkpoint_command(commands, "similar", "the training images most similar to each query image")
    similar.add_argument("--k", type=int, default=5, help="neighbours to list per query (default: 5)")
    similar.add_argument("--split", default="train", help="sub-folder of data.root to search (default: train)")
    similar.add_argument("queries", nargs="+", metavar="QUERY")

    if present("audit"):  # an optional part's command is offered where the project holds the part (core/parts.py)
        from .commands.audit.arguments import add_audit_arguments

        add_audit_arguments(commands.add_parser("audit", help="find duplicates, label errors, outliers and imbalance"))

    export = add_checkpoint_command(commands, "export", "write a deployable model: TorchScript, torch.export or ONNX")
    export.add_argument("--format", required=True, choices=["torchscript", "exported", "onnx"])
    export.add_argument("--output", metavar="PATH", help="default: beside the checkpoint, e.g. best.pt2")

    if present("sweeps"):
        sweep = commands.add_parser("sweep", help="search hyperparameters with Optuna: one training run per trial")
        add_config_options(sweep, DEFAULT_CONFIG)
        add_sweep_arguments(sweep)

    if present("shards"):
        add_pack_arguments(commands)

    sample = commands.add_parser("sample-data", help="write a small offline ImageFolder of shapes")
    sample.add_argument("dir", help="where to write train/ and val/")
    sample.add_argument("--train-per-class", type=int, default=200)
    sample.add_argument("--val-per-class", type=int, default=50)
    sample.add_argument("--image-size", type=int, default=64)
    sample.add_argument("--seed", type=int, default=0)
    return parser


def add_pack_arguments(commands: Any) -> None:
    pack = commands.add_parser("pack-shards", help="pack an ImageFolder into tar shards once; train from them after")
    add_config_options(pack, "the defaults")
    pack.add_argument("data_root", metavar="DATA_ROOT", help="the folder that holds train/ and val/ (and test/)")
    pack.add_argument("out_dir", metavar="OUT_DIR", help="a new or empty folder for the shards and shards.json")
    pack.add_argument("--shard-size", default="256M", help="bytes per shard, e.g. 256M or 1G (default: 256M)")


def add_sweep_arguments(sweep: argparse.ArgumentParser) -> None:
    sweep.add_argument("--space", default="configs/sweep.yaml", help="search space (default: configs/sweep.yaml)")
    sweep.add_argument("--trials", type=positive_int, required=True, help="trials the study should hold in all")
    sweep.add_argument("--storage", metavar="URL", help="study database (default: sqlite:///<out_dir>/optuna.db)")
    sweep.add_argument("--study", default="sweep", help="study name in the storage (default: sweep)")


def add_evaluate_arguments(evaluate: argparse.ArgumentParser) -> None:
    evaluate.add_argument("--split", default="val", help="sub-folder of data.root to evaluate (default: val)")
    evaluate.add_argument(
        "--csv",
        metavar="PATH",
        help="also write the per-class precision/recall/F1 table as CSV (above 50 classes, whose table the terminal "
        "shows in part, per_class.csv beside the checkpoint by default; '' for none)",
    )
    evaluate.add_argument(
        "--matrix",
        metavar="PATH",
        help="the confusion counts as CSV (default: confusion_matrix.csv beside the checkpoint, or "
        "confusion_pairs.csv, a row per non-zero pair, above 256 classes; '' for none)",
    )
    evaluate.add_argument(
        "--confusion",
        metavar="PATH",
        help="confusion-matrix PNG (default: confusion_matrix.png beside the checkpoint; '' for none)",
    )
    evaluate.add_argument(
        "--top-losses",
        metavar="PATH",
        help="PNG of the images with the highest loss (default: top_losses.png beside the checkpoint; '' for none)",
    )
    evaluate.add_argument(
        "--compare-excluded",
        action="store_true",
        help="also score the split with data.exclude's files kept in: both figures printed, to compare like with like",
    )


def sample_data_command(args: argparse.Namespace) -> int:
    from .data import CLASSES, write_sample_data

    root = write_sample_data(args.dir, args.train_per_class, args.val_per_class, args.image_size, args.seed)
    total = len(CLASSES) * (args.train_per_class + args.val_per_class)
    print(f"wrote {total} images of {len(CLASSES)} classes to {root}/train and {root}/val")
    return 0


def pack_shards_command(args: argparse.Namespace) -> int:
    """The files checked as training checks them (data.format, data.on_bad_file from --config/--set), then packed."""
    from .commands.pack_shards import pack_shards, shard_bytes
    from .core.config import load_config

    cfg = load_config(args.config or [], args.overrides)
    print(pack_shards(args.data_root, args.out_dir, cfg.data, shard_bytes(args.shard_size)))
    return 0


def train_command(args: argparse.Namespace) -> int:
    from .core.config import load_config

    cfg = load_config(args.config or [DEFAULT_CONFIG], args.overrides)  # a bad value is said before torch loads

    from .training.trainer import train

    row = train(cfg, resume=args.resume)
    if row and os.environ.get("RANK", "0") == "0":  # under torchrun, one process speaks for the run
        ended = f"stopped after epoch {row['epoch']} ({row['stop_reason']}); " if "stop_reason" in row else ""
        print(f"done: {ended}val_acc {100 * row['val_acc']:.1f}%, checkpoints and metrics in {cfg.train.out_dir}")
    return 0


def sweep_command(args: argparse.Namespace) -> int:
    """The sweep command (the sweep extra): one training run per trial, then the summary."""
    from .commands.sweep import run_sweep

    configs = args.config or [DEFAULT_CONFIG]
    print(run_sweep(configs, args.overrides, args.space, args.trials, args.storage, args.study, program_name()))
    return 0


def load_checkpoint_for(args: argparse.Namespace) -> Any:
    """The trained model of ``--checkpoint`` for the commands that use one; says which weights when it matters."""
    from .training.inference import load_trained

    loaded = load_trained(args.checkpoint, args.config, tuple(args.overrides), raw_weights=args.raw_weights)
    if loaded.weights_note:
        print(loaded.weights_note, file=sys.stderr)
    return loaded


def picture_path(named: str | None, default: Path, drawn: bool) -> str | Path:
    """A picture ``evaluate`` draws: the PATH named ('' for none), else ``default`` unless train.pictures is off."""
    if named is not None:
        return named
    return default if drawn else ""


def evaluate_command(args: argparse.Namespace) -> int:
    from .core.provenance import one_line as provenance_line
    from .outputs.evaluation_report import (
        READABLE_CLASSES,
        default_confusion_path,
        format_confused,
        matrix_name,
        pictures_missing,
        report_extras,
        save_confusion,
        save_top_losses,
    )
    from .training.inference import format_report, run_evaluate

    loaded = load_checkpoint_for(args)
    if args.compare_excluded and not loaded.config.data.exclude:
        raise UserError(
            "evaluate --compare-excluded compares with and without the files of a list, and data.exclude names none: "
            "add --set data.exclude=FILE (the exclude.txt that audit wrote)"
        )
    drawn = loaded.config.train.pictures  # false: no picture beside the checkpoint; a PATH named draws all the same
    picture = picture_path(args.confusion, default_confusion_path(args.checkpoint, args.split), drawn)
    losses = picture_path(args.top_losses, default_confusion_path(args.checkpoint, args.split, "top_losses"), drawn)
    many = len(loaded.classes) > READABLE_CLASSES  # the terminal shows the table's worst rows: the whole goes to a file
    csv_path = beside(args.csv, args.checkpoint, args.split, "per_class") if many else args.csv
    matrix = beside(args.matrix, args.checkpoint, args.split, matrix_name(len(loaded.classes)))
    # Without matplotlib: one line for both pictures, and no per-image losses kept. Not imported when none is drawn.
    missing = pictures_missing() if picture or losses else None
    show = loaded.config.train.progress and sys.stderr.isatty()
    result = run_evaluate(loaded, args.split, progress=show, per_sample=bool(losses and not missing))
    for line in result["lists"].lines():  # what data.exclude and data.relabel did to the split
        print(line)
    if args.compare_excluded:  # the same checkpoint on both sets: the figure a run without the list would show
        kept = run_evaluate(loaded, args.split, progress=show, excluded=False)
        gone = result["lists"].left[args.split]
        print(f"with the {gone} file(s) data.exclude lists:  {format_report(kept, loaded.classes)}")
        print(f"without them (as training scored): {format_report(result, loaded.classes)}")
    else:
        print(format_report(result, loaded.classes))  # with the metrics models/extensions.py adds
    print(provenance_line(loaded.provenance))
    defaults = [path for path, named in ((csv_path, args.csv), (matrix, args.matrix)) if named is None]
    print(report_extras(result["confusion"], loaded.classes, csv_path, matrix, defaults))  # before any picture
    print(format_confused(result["confusion"], loaded.classes))  # where the model fails, by class pair
    if missing:
        print(missing)
    elif losses:
        print(save_top_losses(result, loaded.classes, losses))  # and file by file
    if picture and not missing:  # last: a picture that cannot be drawn is one line and costs nothing above
        print(save_confusion(result["confusion"], loaded.classes, picture))
    return 0


def beside(named: str | None, checkpoint: str, split: str, name: str) -> str | Path:
    """A CSV ``evaluate`` writes: the PATH named ('' for none), else ``<name>[_<split>].csv`` beside the checkpoint."""
    from .outputs.evaluation_report import default_confusion_path

    return named if named is not None else default_confusion_path(checkpoint, split, name, ".csv")


def predict_command(args: argparse.Namespace) -> int:
    from .training.inference import run_predict

    loaded = load_checkpoint_for(args)
    # Every readable file is predicted (and written to --csv); unreadable ones are named after, per --on-bad-file.
    return run_predict(loaded, args.files, args.topk, args.csv, args.on_bad_file)


def similar_command(args: argparse.Namespace) -> int:
    from .commands.similarity import SimilarityIndex

    index = SimilarityIndex(load_checkpoint_for(args), args.split)
    for query, matches in zip(args.queries, index.search(args.queries, args.k), strict=True):
        print(f"{query}:")
        for rank, match in enumerate(matches, 1):
            print(f"  {rank}. {match.similarity:.4f}  {match.path}  ({match.label})")
    return 0


def audit_command(args: argparse.Namespace) -> int:
    """The audit: CSVs, pictures and a summary table; it never moves or deletes a file."""
    from .commands.audit.audit import run_audit
    from .commands.audit.findings import NEAR_DUPLICATE_SIMILARITY

    configs = args.config or ([] if args.checkpoint else [DEFAULT_CONFIG])  # a checkpoint brings its own config
    similarity = args.near_duplicate_similarity or NEAR_DUPLICATE_SIMILARITY
    print(run_audit(configs, args.overrides, args.checkpoint, args.out, similarity, args.max_files))
    return 0


def export_command(args: argparse.Namespace) -> int:
    from .commands.export import export_checkpoint

    print(export_checkpoint(load_checkpoint_for(args), args.checkpoint, args.format, args.output))
    return 0


# One table of commands: the parser's sub-commands (build_parser) and the function each runs. A new
# command is a parser entry there and a line here; each handler imports what it needs, so that
# `--help` and `sample-data` start without torch's training stack.
COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "train": train_command,
    "evaluate": evaluate_command,
    "predict": predict_command,
    "similar": similar_command,
    "audit": audit_command,
    "export": export_command,
    "sweep": sweep_command,
    "sample-data": sample_data_command,
    "pack-shards": pack_shards_command,
}


# The commands of the optional parts (core/parts.py), by part: not in the parser where the part is absent.
OPTIONAL_COMMANDS = {"audit": "audit", "sweep": "sweeps", "pack-shards": "shards"}


def offered() -> list[str]:
    """The commands this project offers: COMMANDS, less those of the optional parts it was made without."""
    return [name for name in COMMANDS if name not in OPTIONAL_COMMANDS or present(OPTIONAL_COMMANDS[name])]


WITHOUT_TORCH = {"sample-data"}  # the commands that never import torch: no need for a matching torchvision


def run(args: argparse.Namespace) -> int:
    if args.command not in WITHOUT_TORCH:
        check_libraries()  # torch and torchvision as one set, read from their files before either is imported
    return COMMANDS[args.command](args)


def one_line(error: UserError) -> str:
    """The message alone, also when a DataLoader worker wrapped it in its traceback."""
    last = str(error).strip().splitlines()[-1]
    prefix = f"{type(error).__module__}.{type(error).__qualname__}: "
    return last.removeprefix(prefix)


def absent_command(argv: Sequence[str]) -> str | None:
    """The one line for a command of a part this project was made without (argv's first word that is no option)."""
    command = next((word for word in argv if not word.startswith("-")), None)
    part = OPTIONAL_COMMANDS.get(command or "")
    return None if part is None or present(part) else str(part_off(part, f"the {command} command"))


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    absent = absent_command(sys.argv[1:] if argv is None else argv)
    if absent is not None:
        print(f"error: {absent}", file=sys.stderr)
        sys.exit(2)
    return parse_arguments(build_parser(), argv)


def entry() -> None:
    """The program (console script, ``python -m``): ``main``, then the process ends as core/distributed.py says.

    core/distributed.py imports torch (2 CPU-seconds): a command that never did (``--help``, ``sample-data``,
    a config error) has no process group to race at exit, and ends at once.
    """
    code = main()
    if "torch" not in sys.modules:
        sys.exit(code)
    from .core.distributed import end_process

    end_process(code)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(argv)
    try:
        return run(args)
    except UserError as exc:
        if args.debug:
            raise
        rank = f"rank {os.environ['RANK']}: " if int(os.environ.get("WORLD_SIZE", "1")) > 1 else ""
        print(f"error: {rank}{one_line(exc)}", file=sys.stderr)  # under torchrun: which process says it
        return 2
    except RuntimeError as error:
        said = None if args.debug else import_failure(error)  # torchvision's operators missing: another torch's build
        if said is None:
            raise
        print(f"error: {said}", file=sys.stderr)
        return 2
    except Preempted as stop:
        stop.report()
        return EXIT_PREEMPTED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
