"""The benchmark entry point at --quick size: it runs every candidate and writes the JSON and markdown reports.
No timing is asserted."""

import json
import subprocess
import sys

import pytest
import torch

from benchmarks.bench import main
from benchmarks.candidates import all_candidates, parse_candidate
from depthattn.methods import METHODS


def test_candidates_cover_every_method():
    names = all_candidates({})
    assert names[:2] == ["qwen3", "vanilla"]
    assert {parse_candidate(n, {})[0] for n in names} == {"qwen3", *METHODS}
    # a method's switchable field: set by the candidate's suffix, else by --method-field, else the config's
    assert "depth_attention:reference" in names and "depth_attention:reference" not in all_candidates(
        {"depth_impl": "reference"})
    assert parse_candidate("depth_attention:reference", {}) == ("depth_attention", {"depth_impl": "reference"})
    assert parse_candidate("depth_attention", {"depth_impl": "compiled"}) == ("depth_attention",
                                                                              {"depth_impl": "compiled"})
    assert parse_candidate("moda:merged", {"depth_impl": "compiled"}) == ("moda", {"moda_impl": "merged"})
    assert parse_candidate("vanilla", {"depth_impl": "compiled"}) == ("vanilla", {})
    with pytest.raises(ValueError, match="only a method with one switchable field takes a ':VALUE' suffix"):
        parse_candidate("vanilla:reference", {})
    # a method preset, e.g. AttnRes in the paper's form, which the libraries' kernels compute
    assert parse_candidate("attnres_paper:liger", {}) == ("attnres_paper", {"attnres_impl": "liger"})
    with pytest.raises(ValueError, match="unknown candidate 'attnres_papr'"):
        parse_candidate("attnres_papr", {})


def test_a_preset_candidate_is_built_with_its_settings_and_its_kernel():
    from benchmarks.bench import QUICK_SIZE
    from benchmarks.candidates import build

    size = {**QUICK_SIZE, "max_position_embeddings": 64}
    _, paper = build(["vanilla", "attnres_paper:reference"], size, {}, torch.device("cpu"), torch.float32,
                     log=lambda message: None)
    config = paper.model.config
    assert (config.cross_layer, config.attnres_sources, config.attnres_recency_bias) == ("attnres", "blocks", False)
    assert paper.method_fields == {"attnres_impl": "reference"}


def test_candidates_known_in_a_fresh_process():
    """`python -m benchmarks` imports nothing else first: the registry must be filled by the benchmark's own imports."""
    code = "from benchmarks.candidates import parse_candidate; print(parse_candidate('vanilla', {}))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "('vanilla', {})" in done.stdout


@pytest.mark.slow  # ~15-25 s on 2 busy cores: nine tiny models, three timed phases, profiled memory
def test_quick_run_writes_json_and_markdown(tmp_path, capsys):
    assert main(["--quick", "--reps", "1", "--warmup", "0", "--decode-tokens", "2", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "benchmark.json").read_text())
    for key in ("machine", "size", "workload", "memory_method", "timing_method", "candidates",
                "ratios_to_vanilla", "vanilla_to_qwen3", "goals"):
        assert key in report, key
    assert report["machine"]["torch_threads"] >= 1
    assert set(report["candidates"]) == set(all_candidates({}))
    for name, result in report["candidates"].items():
        for key, samples in (("train_step_s", 1), ("prefill_s", 4), ("decode_token_s", 2)):
            assert result[key]["median"] > 0 and result[key]["n"] == samples, (name, key)
        assert result["peak_train_bytes"] > 0 and result["peak_prefill_bytes"] > 0, name
        assert set(result["tokens_per_s"]) == {"train_step", "prefill", "decode_token"}
        assert set(report["ratios_to_vanilla"][name]) == {
            "train_step", "prefill", "decode_token", "peak_train_memory", "peak_prefill_memory"}
    assert report["ratios_to_vanilla"]["depth_attention"]["decode_token"]["n"] == 2  # paired per decode step
    assert {g["goal"] for g in report["goals"]} >= {"Depth-Attention / vanilla, decode per token",
                                                     "vanilla / Qwen3, training step"}
    table = (tmp_path / "benchmark.md").read_text()
    assert "| candidate |" in table and "× vanilla" in table and "| goal |" in table
    for name in report["candidates"]:
        assert f"| {name} |" in table
    assert "| candidate |" in capsys.readouterr().out


def test_candidates_share_the_backbone_tensors():
    from benchmarks.bench import QUICK_SIZE
    from benchmarks.candidates import build

    size = {**QUICK_SIZE, "max_position_embeddings": 64}
    qwen3, vanilla, depth = build(["qwen3", "vanilla", "depth_attention"], size, {}, torch.device("cpu"),
                                  torch.float32, log=lambda message: None)
    reference = dict(qwen3.model.named_parameters())
    for candidate in (vanilla, depth):
        for name, param in candidate.model.named_parameters():
            assert param.data_ptr() == reference[name].data_ptr(), (candidate.name, name)
            assert param.requires_grad


def test_paired_ratio_pairs_samples_in_order():
    from benchmarks.measure import paired_ratio

    ratio = paired_ratio([2.0, 3.0, 8.0], [1.0, 3.0, 2.0])  # per pair: 2, 1, 4
    assert ratio["median"] == 2.0 and ratio["n"] == 3
    assert paired_ratio([1.0], [0.0]) is None


def test_compiled_training_and_decoding_steps(tmp_path):
    torch._dynamo.reset()
    # aot_eager: dynamo and AOT autograd, without inductor's slow C++ code generation on a CPU
    assert main(["--quick", "--methods", "vanilla,depth_attention", "--phases", "train,decode", "--reps", "1",
                 "--warmup", "1", "--decode-tokens", "3", "--compile", "aot_eager", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["workload"]["compile"] == "aot_eager"
    assert "torch.compile'd models (backend aot_eager;" in (tmp_path / "benchmark.md").read_text()
    for result in report["candidates"].values():
        assert result["train_step_s"]["n"] == 1 and result["decode_token_s"]["n"] == 3
    with pytest.raises(SystemExit, match="--warmup 1"):
        main(["--quick", "--compile", "--warmup", "0", "--out", str(tmp_path)])
    with pytest.raises(SystemExit, match="unknown --compile backend 'inductr'.*inductor"):
        main(["--quick", "--compile", "inductr", "--out", str(tmp_path)])


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_quick_run_on_gpu_reports_mfu(tmp_path):
    assert main(["--quick", "--device", "cuda", "--methods", "qwen3,vanilla,depth_attention", "--reps", "2",
                 "--warmup", "1", "--decode-tokens", "2", "--peak-tflops", "100", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "benchmark.json").read_text())
    assert report["workload"]["dtype"] == "bfloat16" and report["machine"]["gpu"]
    assert report["candidates"]["depth_attention"]["depth_impl"] == "auto"
    for name, result in report["candidates"].items():
        assert 0 < result["mfu"] < 1, name
        assert result["peak_train_bytes"] > result["parameters"] * 2, name  # bf16 weights alone are 2 bytes each
    assert "MFU" in (tmp_path / "benchmark.md").read_text()


def test_decode_profile_writes_where_the_time_goes(tmp_path):
    from benchmarks.profile_decode import main as profile_main

    assert profile_main(["--quick", "--methods", "depth_attention", "--decode-tokens", "2", "--threads", "1",
                         "--out", str(tmp_path)]) == 0
    text = (tmp_path / "profile.md").read_text()
    assert "| vanilla |" in text and "| depth_attention |" in text  # vanilla added: differences are to it
    assert "## depth_attention minus vanilla" in text
    assert "| depth_mix reference |" in text and "| depth_mix compiled |" in text
    report = json.loads((tmp_path / "profile.json").read_text())
    ops_added = report["results"]["depth_attention"]["ops"].keys() - report["results"]["vanilla"]["ops"].keys()
    assert ops_added  # the mixing's own ops, absent from vanilla's step
    assert (tmp_path / "trace-depth_attention.json.gz").stat().st_size > 0
