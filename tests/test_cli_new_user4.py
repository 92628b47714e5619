"""A new user's pass, turn four (issue 33): bad input gets one line naming the problem and the fix, exit 2,
nothing written; printed text keeps its brackets; headers say the parallelism that ran."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from cli_runner import cli

from simserve.cli import main

FIXTURES = Path(__file__).parent / "fixtures" / "hf_configs"
MIXTRAL = FIXTURES / "Mixtral-8x7B" / "config.json"


def one_line(code: int, err: str) -> bool:
    return code == 2 and err.count("\n") == 1 and err.startswith("error: ") and "Traceback" not in err


def mixtral_config(tmp_path: Path, folder: str = "m", **fields) -> Path:
    cfg = json.loads(MIXTRAL.read_text())
    cfg.update(fields)
    path = tmp_path / folder / "config.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(cfg))
    return path


# -- 1-4: a config.json's fields, its bytes, a folder without one --------------------------------------------


@pytest.mark.parametrize(
    "fields, words",
    [
        ({"num_attention_heads": 0}, "num_attention_heads must be a positive whole number, got 0"),
        ({"hidden_size": -4096}, "hidden_size must be a positive whole number, got -4096"),
        ({"hidden_size": 4096.5}, "hidden_size must be a whole number, got 4096.5"),
        ({"hidden_size": "4096"}, "hidden_size must be a whole number, got '4096'"),
        (
            {"hidden_size": 10**40},
            "hidden_size 10000000000000000000000000000000000000000 is beyond any model's",
        ),
        ({"hidden_size": 4001}, "hidden_size 4001 is not a multiple of num_attention_heads 32"),
        ({"num_key_value_heads": 5}, "num_attention_heads 32 is not a multiple of num_key_value_heads 5"),
        ({"num_key_value_heads": 0}, "num_key_value_heads must be a positive whole number, got 0"),
        ({"num_hidden_layers": True}, "num_hidden_layers must be a whole number, got True"),
        ({"vocab_size": -1}, "vocab_size must be a positive whole number"),
        ({"max_position_embeddings": 0}, "max_position_embeddings must be a positive whole number"),
        ({"num_local_experts": 0}, "num_local_experts must be a positive whole number"),
        ({"num_experts_per_tok": 9}, "num_experts_per_tok 9 exceeds num_local_experts 8"),
        ({"intermediate_size": 0}, "intermediate_size must be a positive whole number"),
        ({"sliding_window": -1}, "sliding_window must be 0 or more, got -1"),
        ({"head_dim": 0.5}, "head_dim must be a whole number"),
        ({"tie_word_embeddings": "false"}, "tie_word_embeddings must be true or false, got 'false'"),
    ],
)
def test_every_size_and_count_of_a_config_is_checked_and_named(capsys, tmp_path, fields, words):
    cfg = mixtral_config(tmp_path, **fields)
    code, _, err = cli(
        capsys, "run", "--model", str(cfg), "--gpu", "h100", "--tp", "2", "--out", str(tmp_path / "o")
    )
    assert one_line(code, err) and words in err and "correct it in the config.json" in err, err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "model, fields, words",
    [
        ("DeepSeek-V3", {"n_routed_experts": 0}, "n_routed_experts must be a positive whole number"),
        ("DeepSeek-V3", {"first_k_dense_replace": 61}, "first_k_dense_replace 61 leaves no MoE layer"),
        ("DeepSeek-V3", {"q_lora_rank": -1}, "q_lora_rank must be 0 or more"),
        ("DeepSeek-V3", {"kv_lora_rank": 0}, "kv_lora_rank must be a positive whole number"),
        (
            "Qwen3-235B-A22B",
            {"moe_intermediate_size": "1536"},
            "moe_intermediate_size must be a whole number",
        ),
        (
            "Qwen3-235B-A22B",
            {"decoder_sparse_step": 0},
            "decoder_sparse_step must be a positive whole number",
        ),
        ("Llama-3.1-8B", {"head_dim": -128}, "head_dim must be a positive whole number"),
    ],
)
def test_each_architectures_own_fields_are_checked(tmp_path, model, fields, words):
    from simserve.catalog.hf_config import spec_from_config
    from simserve.errors import SimserveError

    cfg = {**json.loads((FIXTURES / model / "config.json").read_text()), **fields}
    with pytest.raises(SimserveError, match=words):
        spec_from_config(cfg, "x/config.json")


def test_a_zero_head_count_in_a_catalog_file_is_one_line(capsys, tmp_path):
    catalog = tmp_path / "models.yaml"
    catalog.write_text(
        "models:\n  - {name: m0, hf_id: m0, num_layers: 2, hidden: 64, num_heads: 0, num_kv_heads: 1, ffn: "
        "128, vocab: 100, max_position: 512, source: here}\n"
    )
    code, _, err = cli(capsys, "--catalog", str(catalog), "list", "models")
    assert one_line(code, err) and "num_heads must be a positive whole number, got 0" in err, err


def test_a_config_of_non_utf8_bytes_is_one_line(capsys, tmp_path):
    cfg = tmp_path / "m" / "config.json"
    cfg.parent.mkdir()
    cfg.write_bytes(b'{"architectures": ["\xff\xfe"]}')
    code, _, err = cli(capsys, "run", "--model", str(cfg), "--out", str(tmp_path / "o"))
    assert one_line(code, err) and "is not UTF-8 text" in err, err
    assert not (tmp_path / "o").exists()


def test_a_folder_without_config_json_says_so(capsys, tmp_path):
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "tokenizer.json").write_text("{}")
    code, _, err = cli(capsys, "run", "--model", str(folder), "--out", str(tmp_path / "o"))
    assert one_line(code, err) and f"{folder} is a folder with no config.json in it" in err, err
    assert "unknown model" not in err and not (tmp_path / "o").exists()


# -- 5-7: requests, a run that serves nothing, a number too large --------------------------------------------


@pytest.mark.parametrize(
    "command", [["run"], ["sweep", "--policies", "sarathi"], ["plan"]], ids=lambda c: c[0]
)
def test_requests_are_bounded_up_front(capsys, tmp_path, command):
    code, _, err = cli(capsys, *command, "--requests", "99999999999999999999", "--out", str(tmp_path / "o"))
    assert one_line(code, err) and "--requests must be between 1 and 1,000,000" in err, err
    assert not (tmp_path / "o").exists()


def test_a_run_whose_every_request_is_too_long_is_an_error(capsys, tmp_path):
    args = [
        "run",
        "--policy",
        "vllm-v1",
        "--trace",
        "random:100000000:128:0.1",
        "--qps",
        "inf",
        "--max-concurrency",
        "8",
        "--requests",
        "50",
        "--out",
        str(tmp_path / "o"),
    ]
    code, out, err = cli(capsys, *args)
    assert one_line(code, err) and "no request was served: all 50 were dropped" in err, err
    assert "nan" not in out and not (tmp_path / "o").exists()


@pytest.mark.parametrize("value", ["1e400", "-1e400", "1e4000", "9" * 400])
def test_a_number_that_overflows_is_refused_not_infinite(capsys, tmp_path, value):
    code, _, err = cli(capsys, "run", "--qps", value, "--requests", "8", "--out", str(tmp_path / "o"))
    assert one_line(code, err) and "--qps" in err and "is beyond the largest number" in err, err
    assert not (tmp_path / "o").exists()


def test_the_word_inf_still_means_infinite():
    from simserve.cli.coercion import check_finite

    for word in ("inf", "+inf", "Infinity", "-inf"):
        check_finite(word, float(word))  # no error
    check_finite("1e300", 1e300)


# -- 8: advice that works ------------------------------------------------------------------------------------


class Accepted(Exception):
    pass


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
@pytest.mark.parametrize("dp", ["2", "3"])
def test_attention_dp_advice_is_a_command_that_runs(capsys, tmp_path, monkeypatch, engine, dp):
    import shlex

    import simserve.resolve as resolve
    from simserve.sim.scenario import check_scenario

    def accept(scenario):
        # the deployment, its memory, the engine's flags: all that a run checks first
        check_scenario(scenario)
        raise Accepted

    monkeypatch.setattr(resolve, "for_scenario", accept)
    base = ["run", "--engine", engine, "--model", "mixtral-8x7b", "--gpu", "h100", "--requests", "8"]
    code, _, err = cli(capsys, *base, "--tp", "8", "--dp-attention", dp, "--out", str(tmp_path / "o"))
    assert one_line(code, err) and "; use " in err, err
    advice = shlex.split(err.split("; use ", 1)[1].split(" (DP ")[0])
    given = {"--tp": "8", "--dp-attention": dp} | dict(zip(advice[::2], advice[1::2], strict=True))
    with pytest.raises(Accepted):
        main([*base, *(x for kv in given.items() for x in kv), "--out", str(tmp_path / "o")])


# -- 9: cache clear that cannot delete -----------------------------------------------------------------------


def test_cache_clear_that_cannot_delete_says_what_and_why(capsys, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    for i in range(3):
        entry = root / "probes" / f"{i}.json"
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text("{}")
    monkeypatch.setenv("SIMSERVE_CACHE", str(root))
    unlink = Path.unlink

    def refuse(self, *args, **kwargs):
        if self.name != "0.json":
            raise PermissionError(13, "Permission denied", str(self))
        return unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", refuse)
    code, out, err = cli(capsys, "cache", "clear")
    assert one_line(code, err), err
    assert "removed 1 entries" in err and "but 2 could not be removed" in err and "Permission denied" in err
    assert str(root / "probes") in err and out == ""


# -- 10: the option parser's errors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "args, words",
    [
        (["run", "--qps", "abc"], "Invalid value for '--qps'"),
        (["run", "--budget", "nan"], "Invalid value for '--budget'"),
        (["run", "--qps"], "Option '--qps' requires an argument; see `simserve run --help`"),
        (["sweep", "--slo"], "Option '--slo' requires an argument; see `simserve sweep --help`"),
        (["run", "--bogus"], "No such option: --bogus"),
        (["bogus"], "No such command 'bogus'; commands: cache, fit, list"),
        (["cache", "bogus"], "No such command 'bogus'; commands: clear, info"),
        (["trace", "stats"], "Missing argument 'FILE'; see `simserve trace stats --help`"),
    ],
)
def test_usage_errors_are_one_line(capsys, args, words):
    code, out, err = cli(capsys, *args)
    assert one_line(code, err) and words in err, err
    assert "╭" not in err and "Usage:" not in err and out == ""


def test_a_command_alone_still_shows_its_help(capsys):
    code, out, err = cli(capsys, "cache")
    assert code == 2 and "Usage:" in out and "clear" in out and err == ""


# -- 13, 14: regress from anywhere; trace stats of a bench dataset -------------------------------------------


def test_regress_finds_the_projects_baseline_from_any_directory(capsys, tmp_path, monkeypatch):
    import simserve.tune.regress as regress

    seen = []
    monkeypatch.setattr(regress, "check", lambda path, *a, **k: seen.append(path) or regress.Report([], []))
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(capsys, "regress")
    assert code == 0 and seen == [Path(__file__).resolve().parents[1] / "regress" / "baseline.json"], err


def test_regress_names_the_baseline_option_where_the_project_is_not_there(capsys, tmp_path, monkeypatch):
    import simserve.tune.regress as regress

    code, _, err = cli(capsys, "regress", "--baseline", str(tmp_path / "b.json"))
    assert one_line(code, err) and f"simserve regress --update --baseline {tmp_path / 'b.json'}" in err, err
    monkeypatch.setattr(regress, "default_baseline", lambda: None)  # an installed wheel: no checkout
    code, _, err = cli(capsys, "regress")
    assert one_line(code, err) and "pass --baseline PATH" in err, err


def test_trace_stats_takes_the_bench_datasets_run_takes(capsys):
    code, out, err = cli(capsys, "trace", "stats", "random:2000:200")
    assert code == 0 and "random:2000:200: 1,000 requests" in out, err
    code, out, _ = cli(capsys, "trace", "stats", "fixed:100:10", "--requests", "7")
    assert code == 0 and "fixed:100:10: 7 requests" in out  # not "fixed💯10" (an emoji code)
    code, _, err = cli(capsys, "trace", "stats", "sharegpt", "--requests", "7")
    assert one_line(code, err) and "drop --requests" in err


# -- 15, 22: brackets kept; the header's parallelism; a profile named after the model ------------------------


def test_printed_text_keeps_its_brackets(capsys, tmp_path, monkeypatch):
    import simserve.profiling.measured as measured

    monkeypatch.setenv("SIMSERVE_CACHE", str(tmp_path / "cache"))
    # the roofline's note names the extra to install
    monkeypatch.setattr(measured, "installed", lambda: False)
    out_dir = tmp_path / "o[1]"
    args = ["run", "--model", "llama-3.1-8b", "--gpu", "h200", "--requests", "8", "--iterations", "none"]
    code, out, err = cli(capsys, *args, "--out", str(out_dir))
    text = " ".join((out + err).split())  # rich wraps long lines
    assert code == 0 and "pip install -e '.[measured]'" in text and f"wrote {out_dir}/" in text, out + err


def test_the_run_header_names_dp_ep_and_replicas():
    from simserve.cli.run import _parallelism
    from simserve.deployment import Deployment
    from simserve.sim.scenario import Scenario

    dep = Deployment.create("qwen3-235b-a22b", "h200", tp=1, ep=8, dp=8, dtype="fp8")
    assert _parallelism(Scenario(), dep) == "DP8×TP1 EP8"
    mixtral = Deployment.create("mixtral-8x7b", "h100", tp=2, ep=2)
    assert _parallelism(Scenario(num_replicas=3), mixtral) == "3×(TP2 PP1 EP2)"


def test_a_checkpoints_precision_mark_is_not_part_of_the_models_name(tmp_path):
    from simserve.catalog.hf_config import load_hf_config
    from simserve.deployment import Deployment

    folder = tmp_path / "Mixtral-8x7B-FP8"
    folder.mkdir()
    shutil.copy(MIXTRAL, folder / "config.json")
    spec = load_hf_config(folder)
    assert spec.name == "Mixtral-8x7B"
    # not -FP8-fp8
    assert Deployment.create(spec, "h100", tp=2, dtype="fp8").profile_model == "Mixtral-8x7B-fp8"


@pytest.mark.parametrize("grid", ["0.1,1e400", "nan", "inf"])
def test_a_list_of_numbers_is_finite_too(capsys, tmp_path, grid):
    code, _, err = cli(capsys, "sweep", "--slo-grid", grid, "--out", str(tmp_path / "o"))
    assert one_line(code, err) and "--slo-grid takes finite numbers" in err, err
    assert not (tmp_path / "o").exists()
