import re
from pathlib import Path

import pytest

from depthattn.study import Cell, Study
from depthattn.train import MODEL_PRESETS, TrainConfig
from depthattn.train.config import SHIPPED_CONFIGS, config_path


def write(tmp_path, text):
    path = tmp_path / "run.toml"
    path.write_text(text)
    return path


def test_file_and_overrides(tmp_path):
    path = write(tmp_path, '[optim]\nlr = 1e-3\n[train]\nsteps = 5\n')
    cfg = TrainConfig.load(path, ["--optim.lr", "3e-4", "--train.compile=true", "--model.overrides.depth_stride", "3"])
    assert cfg.optim.lr == 3e-4 and cfg.train.steps == 5 and cfg.train.compile is True
    assert cfg.model.overrides == {"depth_stride": 3}


@pytest.mark.parametrize("text, message", [
    ("[optim]\nlearning_rate = 1e-3\n", "unknown key 'learning_rate'"),
    ("[optimizer]\nlr = 1e-3\n", r"unknown section \[optimizer\] \(did you mean 'optim'\?\)"),
    ("[train]\nsteps = 'ten'\n", "steps must be of type int"),
    ("[train]\nsteps = 0\n", "train.steps must be > 0"),
    ("[model]\npreset = 'huge'\n", "model.preset must be one of"),
    ("[train]\ndtype = 'fp8'\n", "train.dtype must be one of"),
    ("[model]\nmethod = 'densformer'\n", "model.method must be one of"),
    ("[model]\nnum_loops = 0\n", "model.num_loops must be > 0"),
    ("[optim]\nbeta2 = 1.5\n", "optim.beta2 must lie in"),
    ("[optim\nlr = 1\n", "not valid TOML"),
])
def test_bad_files_name_the_problem(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.load(write(tmp_path, text))


@pytest.mark.parametrize("overrides, message", [
    (["--optim.lrr", "1"], "did you mean 'lr'"),
    (["--train.steps", "x"], "not a valid int"),
    (["--train.compile", "maybe"], "not a valid bool"),
    (["lr=3"], "must look like --section.key value"),
    (["--train.steps"], "has no value"),
    (["--optim.lr", "--train.batch_size", "4"], "override --optim.lr has no value"),  # not "override '4' ..."
    (["--optim.lr", "nan"], "optim.lr must be > 0 and finite"),
    (["--optim.weight_decay", "inf"], "must be finite and >= 0"),
])
def test_bad_overrides(overrides, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig.load(None, overrides)


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        TrainConfig.load(tmp_path / "nope.toml")


def test_paper_presets_have_head_dim_64():
    from depthattn import DepthAttentionConfig

    for name in ("360m", "500m", "710m", "1.5b", "3b"):
        config = DepthAttentionConfig(vocab_size=50304, **MODEL_PRESETS[name])
        assert config.head_dim == 64, name


def test_repository_configs_load():
    from pathlib import Path

    from depthattn.study import Study
    from depthattn.study.analyses import analysis_of

    root = Path(__file__).parents[2] / "configs"
    runs = sorted(p for p in root.glob("**/*.toml") if p.parent.name not in ("study", "analysis"))
    studies = sorted((root / "study").glob("*.toml"))
    assert runs and studies
    for path in runs:
        TrainConfig.load(path)
    for path in (root / "analysis").glob("*.toml"):  # analyses across studies: each names its studies
        assert analysis_of(path).load(path).sweeps
    for path in studies:
        study = Study.load(path)  # checks every setting's config
        for method in study.methods:
            study.cell_config(Cell(study.settings()[0], method, study.seeds[0]))


def test_train_help_lists_every_config_key_with_its_type_and_default(capsys):
    import dataclasses

    from depthattn.cli import main

    with pytest.raises(SystemExit):
        main(["train", "--help"])
    out = capsys.readouterr().out
    for section in dataclasses.fields(TrainConfig):
        for name, value in dataclasses.asdict(section.default_factory()).items():
            assert f"{section.name}.{name}" in out and repr(value) in out, name
    assert "optim.warmup_steps                 int    20" in out and "--model.overrides.NAME" in out


def test_a_key_of_another_section_is_named_with_its_section():
    with pytest.raises(ValueError, match="unknown key 'warmup_steps' \\(it is 'optim.warmup_steps'"):
        TrainConfig.load(None, ["--train.warmup_steps", "3"])
    with pytest.raises(ValueError, match="unknown key 'lr' \\(it is 'optim.lr'"):
        TrainConfig.from_dict({"train": {"lr": 1e-3}})


def test_configs_resolve_to_the_installed_copy_outside_a_checkout(tmp_path, monkeypatch):
    """A pip install has no configs/ folder: `configs/...` then reads the copy shipped in the package (the link
    src/depthattn/configs, packaged by pyproject's package-data), extends included; other paths are left alone."""
    repo_configs = Path(__file__).parents[2] / "configs"
    shipped = sorted(p.relative_to(SHIPPED_CONFIGS) for p in SHIPPED_CONFIGS.rglob("*.toml"))
    assert shipped == sorted(p.relative_to(repo_configs) for p in repo_configs.rglob("*.toml"))
    monkeypatch.chdir(tmp_path)
    assert config_path("configs/tiny.toml") == SHIPPED_CONFIGS / "tiny.toml"
    assert TrainConfig.load("configs/tiny.toml") == TrainConfig.load(repo_configs / "tiny.toml")
    assert Study.load("configs/study/moda.toml").parent is not None  # moda extends core
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "tiny.toml").write_text('[train]\nsteps = 3\n')
    assert TrainConfig.load("configs/tiny.toml").train.steps == 3  # a local file wins
    with pytest.raises(FileNotFoundError, match="configs/nope.toml does not exist"):
        TrainConfig.load("configs/nope.toml")


@pytest.mark.parametrize("key, message", [
    ("num_layers", "unknown key 'num_layers' (did you mean 'num_hidden_layers'?)"),
    ("hidden_dim", "(did you mean 'hidden_size'?)"),
    ("depth_window_size", "(did you mean 'depth_window'?)"),
    ("n_layer", "unknown key 'n_layer'; known: vocab_size, hidden_size, "),
    ("dropout", "; known: "),
    ("banana", "; known: "),
    ("num_loops", "(it is 'model.num_loops'"),
    ("cross_layer", "model.overrides.cross_layer is set by model.method"),
])
def test_an_override_that_is_not_a_model_field_is_refused(key, message):
    """DepthAttentionConfig keeps an unknown key as an attribute: the run would train the preset and save the key."""
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig.from_dict({"model": {"overrides": {key: 2}}})
    with pytest.raises(ValueError, match=re.escape(message)):
        TrainConfig.load(None, [f"--model.overrides.{key}", "2"])
    fields = {"num_hidden_layers": 2, "attention_dropout": 0.1, "depth_stride": 2, "hc_streams": 2}
    assert TrainConfig.from_dict({"model": {"overrides": fields}}).model.overrides == fields
