"""A method from another package (docs/methods.md's toy, `prev_mix`), installed without pip: its code and entry
point are written as an installed distribution into a folder on PYTHONPATH, and every command finds it."""

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from depthattn.loading import check_shapes_fit
from depthattn.methods import DESCRIPTIONS, ENTRY_POINT_GROUP, METHODS, load_entry_points, unregister

GUIDE = Path(__file__).parents[2] / "docs" / "methods.md"


def install(site: Path, package: str, files: dict[str, str], entry_points: dict[str, str]) -> None:
    """`package` as pip would leave it: its files (path in the package: code), and a dist-info with its entry points
    in the methods' group."""
    (site / package).mkdir(parents=True)
    for path, code in files.items():
        (site / package / path).write_text(code)
    info = site / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package.replace('_', '-')}\nVersion: 0.1\n")
    lines = "".join(f"{name} = {value}\n" for name, value in entry_points.items())
    (info / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n{lines}")


def guide_method() -> tuple[dict[str, str], dict[str, str]]:
    """docs/methods.md's method files (each code block after the line naming its file) and the entry points its
    pyproject.toml snippet declares."""
    text = GUIDE.read_text()
    files = dict(re.findall(r"`toy_method/(\w+\.py)`:\n\n```python\n(.*?)```", text, flags=re.S))
    assert len(files) == text.count("```python"), "a code block of docs/methods.md names no file"
    (toml,) = re.findall(r"```toml\n(.*?)```", text, flags=re.S)
    return files, tomllib.loads(toml)["project"]["entry-points"][ENTRY_POINT_GROUP]


@pytest.fixture
def site(tmp_path):
    files, entry_points = guide_method()
    install(tmp_path / "site", "toy_method", files, entry_points)
    return tmp_path / "site"


def depthattn(site: Path, *argv: str) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-m", "depthattn", *argv], env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, f"depthattn {' '.join(argv)}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    return done.stdout


def test_every_command_takes_a_method_installed_by_entry_point(site, tiny_data, tmp_path):
    run = tmp_path / "run"
    depthattn(site, "train", "--data.path", str(tiny_data), "--data.seq_len", "16", "--train.out_dir", str(run),
              "--train.batch_size", "2", "--train.steps", "3", "--train.eval_every", "3", "--train.eval_batches", "1",
              "--train.checkpoint_every", "3", "--train.progress", "false", "--optim.warmup_steps", "1",
              "--model.method", "prev_mix", "--model.overrides.num_hidden_layers", "2")
    assert '"cross_layer": "prev_mix"' in (run / "final" / "config.json").read_text()
    assert "perplexity" in depthattn(site, "eval", str(run / "final"), "--data", str(tiny_data)).lower()
    assert depthattn(site, "generate", str(run / "final"), "the", "--max-new-tokens", "4").strip()
    row = next(line for line in depthattn(site, "costs", "--preset", "tiny", "--methods", "vanilla,prev_mix")
               .splitlines() if line.startswith("| prev_mix "))
    extra, flops = (cell.strip() for cell in row.split("|")[3:5])
    assert (extra, flops) == ("3", "3.84e2"), row  # the tiny preset's 4 layers: a_1 .. a_3, 2 d_kv FLOPs each

    # this process has not installed it: the folder says which method is missing and how to get it
    with pytest.raises(ValueError, match=r"names cross_layer='prev_mix', a method not installed here .*: install "
                                         r"the package that provides it .*'depthattn.methods'"):
        check_shapes_fit(run / "final")


def test_loading_a_folder_of_a_method_not_installed_from_python_says_how_to_get_it(tmp_path):
    import json

    import transformers

    from depthattn import DepthAttentionForCausalLM
    from tests.helpers import tiny_model

    folder = tmp_path / "outside"
    tiny_model().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "cross_layer": "prev_mix"}))
    missing = (r"names cross_layer='prev_mix', a method not installed here \(installed: 'vanilla', .*\): install the "
               r"package that provides it .*'depthattn.methods'.*depthattn.methods.register")
    for load in (DepthAttentionForCausalLM.from_pretrained, transformers.AutoModelForCausalLM.from_pretrained,
                 transformers.AutoConfig.from_pretrained):
        with pytest.raises(ValueError, match=missing):
            load(folder)
    with pytest.raises(ValueError, match=rf"{re.escape(str(folder / 'config.json'))} {missing}"):  # the CLI's way
        check_shapes_fit(folder)


def test_entry_points_register_the_method_in_this_process_too(site, monkeypatch):
    monkeypatch.syspath_prepend(str(site))
    load_entry_points()
    try:
        assert DESCRIPTIONS["prev_mix"].__module__ == "toy_method"
        assert METHODS["prev_mix"].__module__ == "toy_method.model"
        load_entry_points()  # again: already registered, nothing to do
    finally:
        unregister("prev_mix")


def test_a_broken_entry_point_names_its_package(tmp_path, monkeypatch):
    install(tmp_path, "broken_method", {"__init__.py": "raise RuntimeError('no GPU here')\n"},
            {"broken": "broken_method:Broken"})
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.raises(ImportError, match=r"the package broken-method declares the cross-layer method 'broken' "
                                          r"\(broken_method:Broken, .*cannot be loaded \(RuntimeError: no GPU here\); "
                                          "fix or reinstall broken-method"):
        load_entry_points()
    assert "broken" not in METHODS


def test_a_described_method_is_read_without_its_module(site):
    """The config, the presets and `depthattn convert --help` read the guide's method from its description: neither
    its module nor any of depthattn's modules that import torch is imported."""
    code = """
import contextlib, io, sys
from depthattn.cli import main
from depthattn.config import method_fields
from depthattn.methods import DESCRIPTIONS
from depthattn.presets import METHOD_PRESETS

assert DESCRIPTIONS["prev_mix"].inference_state and "prev_mix" in METHOD_PRESETS
method_fields()
with contextlib.redirect_stdout(io.StringIO()) as out, contextlib.suppress(SystemExit):
    main(["convert", "--help"])
assert "prev_mix" in out.getvalue()
print(sorted(m for m in sys.modules if m in ("toy_method.model", "depthattn.methods.base", "depthattn.modeling")))
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")]))}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
