"""`depthattn harness`: lm-eval on the local offline tasks, lm-eval's own routes to a saved folder, and the paper8
task set failing clearly without network (skipped without the `eval` extra)."""

import argparse
import json
from importlib import metadata

import pytest

pytest.importorskip("lm_eval", reason="the harness needs the eval extra (lm-eval)")

from depthattn.commands import harness as harness_command  # noqa: E402
from depthattn.evaluate import harness  # noqa: E402
from depthattn.evaluate.tasks import LOCAL_TASKS, TASKS_DIR  # noqa: E402


def test_harness_runs_the_local_tasks_offline(trained_model, tmp_path, capfd, monkeypatch):
    monkeypatch.chdir(tmp_path)  # outside a git checkout: lm-eval's git probe must not print git's "fatal: ..."
    # lm-eval forks a process pool for the perplexity bootstrap; forked from this test worker (execnet's, torch's
    # and tqdm's threads) a child once hung the whole run (Python 3.11.2). Its single-process path draws the same.
    monkeypatch.setenv("DISABLE_MULTIPROC", "1")
    parser = argparse.ArgumentParser()
    harness_command.add_arguments(parser)
    out = tmp_path / "harness.json"
    args = parser.parse_args([str(trained_model), "--task-set", "local", "--num-fewshot", "0", "2", "--limit", "24",
                              "--batch-size", "16", "--bootstrap-iters", "50", "--out", str(out), "--any-corpus"])
    assert harness_command.run(args) == 0
    printed = capfd.readouterr()
    assert "depthattn_shakespeare_mc" in printed.out and "fatal" not in printed.err
    assert "warning: the local tasks come from the held-out split of the embedded Shakespeare corpus" in printed.err
    result = json.loads(out.read_text())
    assert result["lm_eval_version"] == metadata.version("lm_eval")
    assert result["task_versions"] == {task: 1.0 for task in LOCAL_TASKS}
    assert result["dtype"] == "float32" and result["batch_size"] == 16 and result["model"] == str(trained_model)
    assert result["max_length"] == 64  # the training seq_len, from train_config.json
    assert {"depthattn_version", "date", "torch_version", "transformers_version"} <= result.keys()
    assert result["num_fewshot"] == [0, 2] and result["skipped_tasks"] == {} and result["hub_offline"]
    for shots in ("0", "2"):
        run = result["results"][shots]
        assert run["n-shot"] == {task: int(shots) for task in LOCAL_TASKS}
        mc, lastword = (run["results"][task] for task in LOCAL_TASKS)
        assert 0 <= mc["acc,none"] <= 1 and 0 <= mc["acc_norm,none"] <= 1
        assert 0 <= lastword["acc,none"] <= 1 and lastword["perplexity,none"] > 1
    assert result["n_samples"]["depthattn_shakespeare_mc"] == {"original": 150, "effective": 24}
    assert "the model was trained on" in result["local_tasks"]


def test_local_tasks_refuse_a_model_trained_on_other_data(trained_model):
    """The fixture's data is a jsonl slice split with seed 0: not the split the local tasks hold out."""
    with pytest.raises(ValueError, match=r"the local tasks come from the held-out split .* trained on .*"
                                         r"seed 0, val_fraction 0.2\).*--task-set paper8.*--any-corpus"):
        harness.run_harness(trained_model, task_set="local")


def write_run(folder, manifest: dict | None):
    """A model folder in a run whose train_config.json names a prepared dataset with `manifest` (none: no config)."""
    from depthattn.data.manifest import FORMAT, FORMAT_VERSION, MANIFEST_NAME

    (folder / "data").mkdir(parents=True)
    (folder / "final").mkdir()
    if manifest is not None:
        (folder / "data" / MANIFEST_NAME).write_text(json.dumps(
            {"format": FORMAT, "format_version": FORMAT_VERSION, **manifest}))
        (folder / "train_config.json").write_text(json.dumps({"data": {"path": str(folder / "data")}}))
    return folder / "final"


def test_local_tasks_say_where_they_come_from(tmp_path):
    from depthattn.data.prepare import DEFAULT_SEED, DEFAULT_VAL_FRACTION

    held_out = write_run(tmp_path / "a", {"source": ["embedded"], "seed": DEFAULT_SEED,
                                          "val_fraction": DEFAULT_VAL_FRACTION})
    assert harness.local_tasks_origin(held_out).startswith("local tasks: the held-out split of the embedded")
    checkpoint = held_out.parent / "checkpoints" / "step_00000010"  # as train writes one
    checkpoint.mkdir(parents=True)
    assert harness.local_tasks_origin(checkpoint).startswith("local tasks: the held-out split of the embedded")
    unknown = write_run(tmp_path / "b", None)
    assert "the model's training data is unknown" in harness.local_tasks_origin(unknown)
    wikipedia = write_run(tmp_path / "c", {"source": ["wikipedia"], "seed": DEFAULT_SEED,
                                           "val_fraction": DEFAULT_VAL_FRACTION})
    with pytest.raises(ValueError, match="source wikipedia"):
        harness.local_tasks_origin(wikipedia)
    assert harness.local_tasks_origin(wikipedia, any_corpus=True).startswith("warning: ")
    # prepared with a smaller --max-document-chars: the held-out plays' pieces went to train one by one
    pieces = write_run(tmp_path / "d", {"source": ["embedded"], "seed": DEFAULT_SEED,
                                        "val_fraction": DEFAULT_VAL_FRACTION,
                                        "document_cut": {"max_chars": 16384, "num_documents_cut": 202}})
    with pytest.raises(ValueError, match="202 documents cut into pieces split one by one by --max-document-chars"):
        harness.local_tasks_origin(pieces)


def test_lm_evals_git_probe_is_quiet_outside_a_checkout(tmp_path, monkeypatch, capfd):
    import lm_eval.evaluator

    monkeypatch.chdir(tmp_path)
    with harness.quiet_lm_eval_git_probe():
        assert lm_eval.evaluator.get_git_commit_hash() is None
    assert capfd.readouterr().err == ""


def test_lm_evals_hf_model_loads_a_saved_folder_after_import(trained_model):
    """lm-eval's `--model hf --model_args pretrained=DIR` route (HFLM with a path) and the instance route agree."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from depthattn import DepthAttentionForCausalLM
    from depthattn.loading import find_tokenizer, load_model

    by_path = HFLM(pretrained=str(trained_model), device="cpu", batch_size=2, dtype="float32")
    assert isinstance(by_path.model, DepthAttentionForCausalLM)
    by_instance = HFLM(pretrained=load_model(trained_model, device="cpu"), tokenizer=find_tokenizer(trained_model),
                       batch_size=2)
    requests = [Instance("loglikelihood", {}, ("KING LEAR.\nGive me the map there.", " Know"), 0),
                Instance("loglikelihood", {}, ("ROMEO.\n", "But soft"), 1)]
    scores = [logprob for logprob, _ in by_path.loglikelihood(requests, disable_tqdm=True)]
    assert all(logprob < 0 for logprob in scores)
    assert scores == pytest.approx([lp for lp, _ in by_instance.loglikelihood(requests, disable_tqdm=True)], rel=1e-5)


def test_a_bfloat16_model_is_scored_in_float32(trained_model):
    """lm-eval's log-softmax and sums in the model's bfloat16 put each loglikelihood on a grid up to a nat coarse."""
    import torch
    from lm_eval.api.instance import Instance

    from depthattn.loading import find_tokenizer, load_model

    model, tokenizer = load_model(trained_model, device="cpu").to(torch.bfloat16), find_tokenizer(trained_model)
    context, continuation = "KING LEAR.\nGive me the map there. Know that we have divided", " in three our kingdom"
    lm = harness.harness_lm(model, tokenizer, batch_size=1, max_length=None)
    (score, _), = lm.loglikelihood([Instance("loglikelihood", {}, (context, continuation), 0)], disable_tqdm=True)
    whole = tokenizer(context + continuation).input_ids
    start = len(tokenizer(context).input_ids)
    with torch.no_grad():
        logits = model(torch.tensor([whole])).logits[0].float()  # (T, V)
    expected = logits.log_softmax(-1)[torch.arange(start - 1, len(whole) - 1), torch.tensor(whole[start:])].sum()
    assert score == pytest.approx(expected.item(), abs=1e-3)


def test_lm_eval_cli_wrapper_adds_the_local_tasks(monkeypatch):
    """`python -m depthattn.evaluate.lm_eval_cli ARGS` is lm-eval's CLI with ARGS and the local task folder (the
    full CLI run is left out: lm-eval's task index alone takes seconds)."""
    import sys

    import lm_eval.__main__

    from depthattn.evaluate import lm_eval_cli

    seen = []
    monkeypatch.setattr(lm_eval.__main__, "cli_evaluate", lambda: seen.append(list(sys.argv)))
    args = ["--model", "hf", "--model_args", "pretrained=runs/x/final", "--tasks", "depthattn_local"]
    lm_eval_cli.main(args)
    lm_eval_cli.main(["run", *args, "--include_path", "mine"])
    lm_eval_cli.main(["run", *args, "--include_path=mine"])  # the user's folder, spelt otherwise, kept alone
    lm_eval_cli.main(["run", *args, "--include", "mine"])
    assert seen == [["lm_eval", *args, "--include_path", str(TASKS_DIR)],
                    ["lm_eval", "run", *args, "--include_path", "mine"],
                    ["lm_eval", "run", *args, "--include_path=mine"],
                    ["lm_eval", "run", *args, "--include", "mine"]]
    assert sys.argv[0] != "lm_eval"  # restored


@pytest.fixture(scope="module")
def full_task_manager():
    """lm-eval's task index with its own tasks (takes a few seconds)."""
    return harness.make_task_manager(harness.PAPER8)


def test_paper8_without_network_names_the_unreachable_tasks(full_task_manager, monkeypatch):
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(harness, "hub_reachable", lambda timeout=0: False)  # as without network: no retries
    tasks = harness.resolve_tasks(task_set="paper8")
    assert tasks == ["lambada_openai", "piqa", "winogrande", "sciq", "hellaswag", "arc_easy", "arc_challenge", "race"]
    offline = harness.hub_offline_by_env() or not harness.hub_reachable()
    with harness.hub_offline(offline), pytest.raises(ValueError, match="unreachable: " + ", ".join(tasks)) as error:
        harness.load_tasks(tasks, full_task_manager)
    assert "--skip-unreachable" in str(error.value)
    with harness.hub_offline(True):
        objects, skipped = harness.load_tasks(["piqa", "depthattn_shakespeare_mc"], full_task_manager,
                                              skip_unreachable=True)
    assert [task.task_name for task in objects] == ["depthattn_shakespeare_mc"] and list(skipped) == ["piqa"]
    with pytest.raises(ValueError, match="unknown lm-eval task 'pika' .*did you mean.*piqa"):
        harness.load_tasks(["pika"], full_task_manager)


def test_task_selection_errors():
    assert harness.resolve_tasks(["a,b", "c", "a"]) == ["a", "b", "c"]
    assert harness.resolve_tasks(task_set="local") == list(LOCAL_TASKS)
    with pytest.raises(ValueError, match="exactly one of --tasks"):
        harness.resolve_tasks(["piqa"], task_set="paper8")
    with pytest.raises(ValueError, match="unknown task set"):
        harness.resolve_tasks(task_set="paper9")


@pytest.mark.parametrize("option, message", [
    (["--limit", "0"], "--limit takes a number of examples (1 or more) or a fraction"),
    (["--limit", "-3"], "--limit takes"),
    (["--limit", "2.5"], "--limit takes"),
    (["--max-length", "0"], "--max-length must be at least 2 tokens"),
    (["--bootstrap-iters", "-1"], "--bootstrap-iters must be >= 0"),
])
def test_options_lm_eval_cannot_run_are_refused_before_the_model_loads(tmp_path, capsys, option, message):
    from depthattn.cli import main

    # no model folder at all: the options are refused first
    assert main(["harness", str(tmp_path / "none"), "--tasks", "depthattn_local", *option]) == 1
    assert f"depthattn harness: error: {message}" in capsys.readouterr().err
