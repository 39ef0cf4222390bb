"""--resume with another train.steps or schedule settings: fewer steps than the run has is an error, a change of
the learning-rate schedule (by the length, or by optim.schedule and its shape) needs --reschedule, and final/ keeps
the files a user added to it (docs/serving.md's chat template)."""

import json

import pytest

from depthattn.train import TrainConfig, train
from depthattn.train.config import OptimSection
from depthattn.train.optim import schedule_change

CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }}{% endfor %}"


def config(data, out_dir, steps, *overrides):
    return TrainConfig.load(None, [
        "--data.path", str(data), "--data.seq_len", "32", "--train.out_dir", str(out_dir), "--train.batch_size", "4",
        "--train.steps", str(steps), "--train.eval_every", "4", "--train.eval_batches", "1",
        "--train.checkpoint_every", "4", "--train.progress", "false", "--optim.warmup_steps", "2", *overrides])


def finished_run_with_chat_template(data, tmp_path, steps):
    """A finished run whose final/ has a chat template added as docs/serving.md says."""
    run = tmp_path / "run"
    train(config(data, run, steps))
    (run / "final" / "chat_template.jinja").write_text(CHAT_TEMPLATE)
    return run


def test_a_finished_run_resumed_with_fewer_steps_is_an_error_and_keeps_final(tiny_data, tmp_path):
    run = finished_run_with_chat_template(tiny_data, tmp_path, 8)
    with pytest.raises(ValueError, match=r"already has 8 steps.*--train.steps 6.*new --train.out_dir"):
        train(config(tiny_data, run, 6), resume=True)
    assert (run / "final" / "chat_template.jinja").read_text() == CHAT_TEMPLATE


def test_a_finished_run_resumed_leaves_final_as_it_is(tiny_data, tmp_path):
    run = finished_run_with_chat_template(tiny_data, tmp_path, 4)
    (run / "final" / "tokenizer_config.json").write_text("{}")  # a user's edit of a file the trainer writes
    summary = train(config(tiny_data, run, 4), resume=True)
    assert summary["step"] == 4
    assert (run / "final" / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert (run / "final" / "tokenizer_config.json").read_text() == "{}"


def test_extending_a_cosine_run_needs_reschedule_which_keeps_added_files_and_records_it(tiny_data, tmp_path):
    run = finished_run_with_chat_template(tiny_data, tmp_path, 4)
    with pytest.raises(ValueError, match=r"cosine schedule was laid out for 4 steps.*wsd.*--reschedule"):
        train(config(tiny_data, run, 8), resume=True)
    train(config(tiny_data, run, 8), resume=True, reschedule=True)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r.get("rescheduled_from_steps") for r in records] == [None] * 4 + [4, None, None, None]
    final = run / "final"
    assert (final / "chat_template.jinja").read_text() == CHAT_TEMPLATE
    assert "chat_template.jinja" in json.loads((final / "checksums.json").read_text())["sha256"]
    train(config(tiny_data, run, 8), resume=True)  # its checkpoints now follow the 8-step schedule


def test_changing_the_schedule_on_resume_needs_reschedule_and_keeps_train_config_until_then(tiny_data, tmp_path):
    run = tmp_path / "run"
    train(config(tiny_data, run, 4))
    written = (run / "train_config.json").read_text()
    with pytest.raises(ValueError, match=r'optim.schedule = "cosine" \(now "wsd"\).*learning rate would go from.*'
                                         r"Resume with --optim.schedule cosine.*--reschedule"):
        train(config(tiny_data, run, 4, "--optim.schedule", "wsd", "--optim.decay_fraction", "0.5"), resume=True)
    assert (run / "train_config.json").read_text() == written
    train(config(tiny_data, run, 8, "--optim.schedule", "wsd", "--optim.decay_fraction", "0.5"), resume=True,
          reschedule=True)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert records[4]["rescheduled_from_steps"] == 4
    assert records[4]["rescheduled_from_optim"] == {"schedule": "cosine", "decay_fraction": 0.2}
    assert json.loads((run / "train_config.json").read_text())["optim"]["schedule"] == "wsd"
    # its checkpoints now follow the WSD schedule: resuming as WSD needs nothing, as cosine is refused
    train(config(tiny_data, run, 8, "--optim.schedule", "wsd", "--optim.decay_fraction", "0.5"), resume=True)
    with pytest.raises(ValueError, match=r'optim.schedule = "wsd" \(now "cosine"\)'):
        train(config(tiny_data, run, 8), resume=True)


def test_schedule_change_names_a_changed_schedule_setting():
    wsd = OptimSection(lr=3e-3, warmup_steps=10, schedule="wsd", decay_fraction=0.2)
    cosine = OptimSection(lr=3e-3, warmup_steps=10)
    change = schedule_change(150, 200, 200, cosine, saved=wsd)  # the stable phase, resumed as a cosine run
    assert 'optim.schedule = "wsd" (now "cosine")' in change
    assert "from 3.00e-03 at step 150" in change
    assert schedule_change(5, 200, 200, cosine, saved=wsd) is None  # within the warmup both are the same
    shorter_warmup = OptimSection(lr=3e-3, warmup_steps=5)
    assert "optim.warmup_steps = 10 (now 5)" in schedule_change(150, 200, 200, shorter_warmup, saved=cosine)


def test_schedule_change_spares_warmup_and_a_wsd_stable_phase():
    cosine = OptimSection(lr=3e-3)  # the run: warmup 20, to 10% of the peak
    assert schedule_change(20, 200, 300, cosine) is None  # warmup alone does not depend on the length
    assert "from 3.00e-04 at step 200 to 1.06e-03 at step 201" in schedule_change(200, 200, 300, cosine)
    wsd = OptimSection(lr=3e-3, warmup_steps=10, schedule="wsd", decay_fraction=0.2)
    assert schedule_change(150, 200, 300, wsd) is None  # still before the 200-step run's decay (step 160)
    assert schedule_change(200, 200, 300, wsd) is not None  # decayed: the longer run is at its peak there
