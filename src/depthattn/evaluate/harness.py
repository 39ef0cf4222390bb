"""`depthattn harness`: downstream tasks through lm-evaluation-harness (the `eval` extra), not a harness of our own.

The model is wrapped in lm-eval's own `HFLM(pretrained=model, tokenizer=tokenizer)` and run with
`lm_eval.simple_evaluate`. Other routes to the same model (after `import depthattn`, which registers the
model type with transformers' Auto classes):
- Python: `HFLM(pretrained="runs/.../final", device="cpu")`, or `HFLM(pretrained=model_instance, tokenizer=tok)`.
- lm-eval's CLI: `python -m depthattn.evaluate.lm_eval_cli --model hf --model_args pretrained=DIR --tasks ...`
  (lm_eval's own command line, with depthattn imported and the local tasks on the include path).

Presets: `paper8` is the paper's eight tasks (LAMBADA, PIQA, WinoGrande, SciQ, HellaSwag, ARC-Easy,
ARC-Challenge, RACE; their data comes from the Hugging Face Hub or the datasets cache); `local` is the two
offline tasks built from the held-out split of the embedded Shakespeare corpus (depthattn/evaluate/tasks): they
measure a model trained on that corpus, so a model whose train_config.json names other data is refused.
Every results file records the lm-eval version, the task versions, dtype, batch size, model folder,
depthattn version and date.
"""

from __future__ import annotations

import contextlib
import difflib
import json
import logging
import os
import socket
import subprocess
from collections.abc import Sequence
from importlib import metadata
from urllib.parse import urlparse

from ..data import DataError, read_manifest
from ..data.prepare import DEFAULT_SEED, DEFAULT_VAL_FRACTION
from ..data.sources import EMBEDDED
from ..loading import check_vocab, max_positions_of, model_dtype_name, open_model, run_metadata, train_config_paths
from .tasks import LOCAL_DATA, LOCAL_TAG, LOCAL_TASKS, TASKS_DIR

PAPER8 = ("lambada_openai", "piqa", "winogrande", "sciq", "hellaswag", "arc_easy", "arc_challenge", "race")
TASK_SETS = {"paper8": PAPER8, "local": LOCAL_TASKS}
DEFAULT_BATCH_SIZE = 8
HUB_PROBE_SECONDS = 3.0


def require_lm_eval() -> str:
    """The installed lm-eval version; ImportError with the fix when it is missing."""
    try:
        import lm_eval  # noqa: F401

        return metadata.version("lm_eval")
    except ImportError:
        raise ImportError("downstream tasks need lm-evaluation-harness: pip install 'depthattn[eval]'") from None


def hub_offline_by_env() -> bool:
    return any(os.environ.get(name, "").upper() in ("1", "ON", "YES", "TRUE")
               for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout: float = HUB_PROBE_SECONDS) -> bool:
    """Whether a TCP connection to the Hugging Face Hub (HF_ENDPOINT) opens within `timeout` seconds."""
    endpoint = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    port = endpoint.port or (443 if endpoint.scheme == "https" else 80)
    try:
        socket.create_connection((endpoint.hostname, port), timeout=timeout).close()
        return True
    except OSError:
        return False


@contextlib.contextmanager
def hub_offline(enabled: bool = True):
    """Put `datasets` and `huggingface_hub` in offline mode for the block: only cached data loads, and a
    missing dataset fails at once instead of retrying the network for a minute per task."""
    if not enabled:
        yield
        return
    import datasets.config
    import huggingface_hub.constants

    saved = datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE
    datasets.config.HF_HUB_OFFLINE = huggingface_hub.constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        datasets.config.HF_HUB_OFFLINE, huggingface_hub.constants.HF_HUB_OFFLINE = saved


def datasets_offline() -> bool:
    import datasets.config

    return bool(datasets.config.HF_HUB_OFFLINE)


def resolve_tasks(tasks: Sequence[str] | str | None = None, task_set: str | None = None) -> list[str]:
    """Task names from a list (items may be comma-separated) or a task set's name."""
    if (task_set is None) == (not tasks):
        raise ValueError(f"pass exactly one of --tasks NAME... or --task-set ({', '.join(TASK_SETS)})")
    if task_set is not None:
        if task_set not in TASK_SETS:
            raise ValueError(f"unknown task set {task_set!r}; use one of {', '.join(TASK_SETS)}")
        return list(TASK_SETS[task_set])
    items = [tasks] if isinstance(tasks, str) else tasks or ()  # tasks is given: checked above
    names = [name.strip() for item in items for name in item.split(",")]
    return [name for name in dict.fromkeys(names) if name]


def _local_only(task_names: Sequence[str]) -> bool:
    return all(name in (*LOCAL_TASKS, LOCAL_TAG) for name in task_names)


def _uses_local(task_names: Sequence[str]) -> bool:
    return any(name in (*LOCAL_TASKS, LOCAL_TAG) for name in task_names)


def training_data(model_dir: str | os.PathLike) -> tuple[str, dict] | None:
    """(path, manifest) of the prepared dataset that the train_config.json of the run the model folder sits in
    names (`train_config_paths`), when it can be read."""
    for config_path in train_config_paths(model_dir):
        try:
            data_path = json.loads(config_path.read_text())["data"]["path"]
            return data_path, read_manifest(data_path)
        except (OSError, ValueError, KeyError, TypeError, DataError):
            continue
    return None


def local_tasks_origin(model_dir: str | os.PathLike, any_corpus: bool = False) -> str:
    """A line saying where the local tasks come from and whether the model was trained on that corpus; ValueError,
    unless `any_corpus`, when its training data is known to be another (the scores would say nothing about it)."""
    trained = training_data(model_dir)
    if trained is None:
        return (f"warning: the local tasks come from {LOCAL_DATA}; the model's training data is unknown (no "
                f"train_config.json naming a prepared dataset in or above {model_dir}), so they may not measure it")
    data_path, manifest = trained
    split = (manifest.get("source"), manifest.get("seed"), manifest.get("val_fraction"))
    # a held-out document cut into pieces (a smaller --max-document-chars) is split piece by piece: most go to train
    cut = (manifest.get("document_cut") or {}).get("num_documents_cut", 0)
    if split == ([EMBEDDED], DEFAULT_SEED, DEFAULT_VAL_FRACTION) and not cut:
        return f"local tasks: {LOCAL_DATA}, which the model's training data ({data_path}) held out"
    problem = (f"the model was trained on {data_path} (source {', '.join(map(str, split[0] or ['?']))}, seed "
               f"{split[1]}, val_fraction {split[2]}" + (f", {cut} documents cut into pieces split one by one by "
                                                         f"--max-document-chars" if cut else "") + ")")
    if any_corpus:
        return f"warning: the local tasks come from {LOCAL_DATA}, but {problem}"
    raise ValueError(
        f"the local tasks come from {LOCAL_DATA}, but {problem}: they measure nothing a model of other text learnt, "
        "and a model trained on another split of the embedded corpus has seen some of their passages. Score it on "
        "tasks of its own domain (--task-set paper8, or lm-eval task names), or pass --any-corpus to run the local "
        "tasks anyway")


def quiet_git_hash() -> str | None:
    """lm-eval's record of `git describe --always` in the working directory, without git's "fatal: not a git
    repository" on the terminal outside a checkout (git has no switch or variable that silences it)."""
    try:
        return subprocess.check_output(["git", "describe", "--always"], stderr=subprocess.DEVNULL, text=True).strip()
    except (subprocess.CalledProcessError, FileNotFoundError):
        return None


@contextlib.contextmanager
def quiet_lm_eval_git_probe():
    """lm-eval's evaluator with `quiet_git_hash` in place of its git probe, for the block."""
    import lm_eval.evaluator

    probe = lm_eval.evaluator.get_git_commit_hash
    lm_eval.evaluator.get_git_commit_hash = quiet_git_hash
    try:
        yield
    finally:
        lm_eval.evaluator.get_git_commit_hash = probe


def make_task_manager(task_names: Sequence[str]):
    """lm-eval's TaskManager with the local tasks on its include path; lm-eval's own task index (several
    seconds to build) only when a task is not a local one."""
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS_DIR), include_defaults=not _local_only(task_names))


def load_tasks(task_names: Sequence[str], task_manager, skip_unreachable: bool = False) -> tuple[list, dict]:
    """Build lm-eval's task objects (this loads each task's data); returns (objects, {skipped task: cause}).

    Raises ValueError for an unknown task name, and, unless `skip_unreachable`, one naming every task whose
    data could not be loaded."""
    objects, unreachable = [], {}
    for name in task_names:
        try:
            loaded = task_manager.load([name])
        except KeyError:
            close = difflib.get_close_matches(name, task_manager.all_tasks, 3)
            raise ValueError(f"unknown lm-eval task {name!r}" + (f" (did you mean {', '.join(close)}?)" if close else
                             "; list them with `lm-eval ls tasks`")) from None
        except Exception as error:  # noqa: BLE001 - any failure to get the data: report it with the task
            unreachable[name] = f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
            continue
        if name in loaded["groups"]:
            objects.append(loaded["groups"][name])
        else:
            objects.extend(loaded["tasks"].values())
    if unreachable and not skip_unreachable:
        offline = datasets_offline()
        first_cause = next(iter(unreachable.values()))
        raise ValueError(
            f"the data of {len(unreachable)} task(s) is unreachable: {', '.join(unreachable)} "
            + ("(the Hugging Face Hub is offline or unreachable, and the datasets cache lacks them). "
               if offline else f"(first error: {first_cause}). ")
            + "Run once where the Hub is reachable to fill the datasets cache (HF_DATASETS_CACHE), "
              "or pass --skip-unreachable to run the other tasks")
    if not objects:
        raise ValueError(f"none of the tasks {', '.join(task_names)} could be loaded")
    return objects, unreachable


def harness_lm(model, tokenizer, batch_size, max_length):
    """The lm-eval model `depthattn harness` scores with: `context_checked_lm`, whose log-softmax and sums run in
    float32 whatever the model's dtype, as `depthattn eval`'s (in bfloat16 lm-eval rounded each loglikelihood to a
    grid as coarse as a nat)."""
    return context_checked_lm(pretrained=model, tokenizer=tokenizer, backend="causal", batch_size=batch_size,
                              max_length=max_length, softmax_dtype="float32")


def context_checked_lm(**kwargs):
    """lm-eval's HFLM(**kwargs), except that a task whose continuations do not fit in the context is a ValueError
    naming the task and the --max-length it needs (lm-eval itself stops on a bare assert)."""
    from lm_eval.models.huggingface import HFLM

    class ContextCheckedLM(HFLM):
        def loglikelihood(self, requests, disable_tqdm: bool = False):
            try:
                return super().loglikelihood(requests, disable_tqdm=disable_tqdm)
            except AssertionError:
                # task -> its longest continuation in tokens, where longer than max_length
                too_long: dict[str, int] = {}
                for request in requests:
                    context, continuation = request.args
                    tokens = self._encode_pair(context, continuation)[1] if context else self.tok_encode(continuation)
                    if len(tokens) > self.max_length:
                        too_long[request.task_name] = max(len(tokens), too_long.get(request.task_name, 0))
                if not too_long:
                    raise
            longest = max(too_long.values())
            limit = max_positions_of(self.model.config) or longest
            fix = (f"pass --max-length {longest} or more (the model takes up to {limit})" if longest <= limit
                   else f"the model takes at most {limit}")
            raise ValueError(
                f"task(s) {', '.join(f'{task} (up to {n} tokens)' for task, n in too_long.items())} score "
                f"continuations longer than the context of {self.max_length} tokens (--max-length, by default the "
                f"training seq_len): {fix}, or leave out those tasks")

    return ContextCheckedLM(**kwargs)


def _json_safe(obj):
    from lm_eval.utils import handle_non_serializable

    return json.loads(json.dumps(obj, default=handle_non_serializable))


@contextlib.contextmanager
def _lm_eval_log_level(level: int):
    logger = logging.getLogger("lm_eval")
    saved = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(saved)


def check_options(num_fewshot: Sequence[int] | int, batch_size: int, max_length: int | None,
                  limit: int | float | None, bootstrap_iters: int) -> list[int]:
    """The few-shot counts, once the options are ones lm-eval can run (before any model is loaded)."""
    shots = [num_fewshot] if isinstance(num_fewshot, int) else list(num_fewshot)
    if not shots or any(n < 0 for n in shots):
        raise ValueError(f"--num-fewshot takes counts >= 0, got {shots}")
    if batch_size < 1:
        raise ValueError(f"--batch-size must be >= 1, got {batch_size}")
    if max_length is not None and max_length < 2:
        raise ValueError(f"--max-length must be at least 2 tokens (context and a scored token), got {max_length}")
    if limit is not None and not (0 < limit < 1 or (limit >= 1 and float(limit).is_integer())):
        raise ValueError(f"--limit takes a number of examples (1 or more) or a fraction of each task (between 0 "
                         f"and 1), got {limit}")
    if bootstrap_iters < 0:
        raise ValueError(f"--bootstrap-iters must be >= 0 (0: no bootstrap stderr), got {bootstrap_iters}")
    return shots


def harness_evaluate(
    model,
    tokenizer,
    tasks: Sequence[str],
    *,
    num_fewshot: Sequence[int] | int = (0,),
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    limit: int | float | None = None,
    skip_unreachable: bool = False,
    bootstrap_iters: int = 100_000,
    seed: int = 0,
    verbose: bool = False,
) -> dict:
    """Run lm-eval tasks on a model instance, once per few-shot count; returns results with metadata.

    `tasks`: lm-eval task, group or tag names (the local tasks included). The data of all tasks is loaded
    first; with the Hub unreachable only cached data is used, and tasks without data raise ValueError
    (or are skipped and listed under "skipped_tasks" with `skip_unreachable`)."""
    lm_eval_version = require_lm_eval()
    import lm_eval

    shots = check_options(num_fewshot, batch_size, max_length, limit, bootstrap_iters)
    check_vocab(model, tokenizer)
    offline = hub_offline_by_env() or _local_only(tasks) or not hub_reachable()
    level = logging.INFO if verbose else logging.ERROR
    runs, versions, n_samples, configs = {}, {}, {}, {}
    skipped: dict = {}
    with _lm_eval_log_level(level), hub_offline(offline), quiet_lm_eval_git_probe():
        lm = harness_lm(model, tokenizer, batch_size, max_length)
        task_manager = make_task_manager(tasks)
        for n in shots:
            objects, skipped = load_tasks(tasks, task_manager, skip_unreachable)  # fresh objects for each count
            out = lm_eval.simple_evaluate(
                model=lm, tasks=objects, num_fewshot=n, batch_size=batch_size, limit=limit, task_manager=task_manager,
                bootstrap_iters=bootstrap_iters, log_samples=False, random_seed=seed, numpy_random_seed=seed,
                torch_random_seed=seed, fewshot_random_seed=seed,
            )
            runs[str(n)] = {key: out.get(key) for key in ("results", "groups", "n-shot", "higher_is_better")}
            versions.update(out.get("versions", {}))
            n_samples.update(out.get("n-samples", {}))
            configs.update({task: {k: v for k, v in config.items() if k in ("dataset_path", "dataset_name",
                                                                              "test_split", "output_type")}
                            for task, config in out.get("configs", {}).items()})
    return _json_safe({
        "lm_eval_version": lm_eval_version,
        "task_versions": versions,
        "tasks": list(tasks),
        "num_fewshot": shots,
        "results": runs,
        "n_samples": n_samples,
        "task_data": configs,
        "skipped_tasks": skipped,
        "dtype": model_dtype_name(model),
        "batch_size": batch_size,
        "max_length": lm.max_length,
        "limit": limit,
        "seed": seed,
        "device": str(next(model.parameters()).device),
        "hub_offline": offline,
        **run_metadata(),
    })


def run_harness(
    model_dir: str | os.PathLike,
    *,
    tasks: Sequence[str] | str | None = None,
    task_set: str | None = None,
    num_fewshot: Sequence[int] | int = (0,),
    batch_size: int = DEFAULT_BATCH_SIZE,
    max_length: int | None = None,
    limit: int | float | None = None,
    tokenizer: str | os.PathLike | None = None,
    dtype: str = "float32",
    device: str | None = None,
    skip_unreachable: bool = False,
    bootstrap_iters: int = 100_000,
    seed: int = 0,
    verbose: bool = False,
    any_corpus: bool = False,
) -> dict:
    """`harness_evaluate` on the model saved in `model_dir` (with its own tokenizer unless `tokenizer`); the local
    tasks only for a model trained on their corpus unless `any_corpus` (`local_tasks_origin`, under "local_tasks")."""
    require_lm_eval()
    check_options(num_fewshot, batch_size, max_length, limit, bootstrap_iters)
    task_names = resolve_tasks(tasks, task_set)
    origin = local_tasks_origin(model_dir, any_corpus) if _uses_local(task_names) else None
    opened = open_model(model_dir, dtype=dtype, device=device, tokenizer=tokenizer)
    max_positions = opened.max_positions
    if max_length is None:
        max_length = opened.default_context_length()
    elif max_positions is not None and max_length > max_positions:
        raise ValueError(f"--max-length {max_length} exceeds the model's max_position_embeddings ({max_positions})")
    result = harness_evaluate(opened.model, opened.tokenizer, task_names, num_fewshot=num_fewshot,
                              batch_size=batch_size, max_length=max_length, limit=limit,
                              skip_unreachable=skip_unreachable, bootstrap_iters=bootstrap_iters, seed=seed,
                              verbose=verbose)
    return {"model": str(opened.path), "task_set": task_set, "local_tasks": origin, **result}
