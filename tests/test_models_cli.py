"""A MoE model from its config.json through profile → fit → run, in fp8, and the one-line errors on the
way."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from simserve.cli import main

MIXTRAL = str(Path(__file__).parent / "fixtures" / "hf_configs" / "Mixtral-8x7B" / "config.json")


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code or 0
    out = capsys.readouterr()
    return code, out.out, out.err


@pytest.fixture(scope="module")
def fp8_profile(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("profiles")
    main(
        [
            "profile",
            "--gpu",
            "h100",
            "--model",
            MIXTRAL,
            "--tp",
            "2",
            "--dtype",
            "fp8",
            "--kv-dtype",
            "fp8",
            "--quick",
            "--max-model-len",
            "8192",
            "--max-tokens",
            "8192",
            "--out",
            str(root),
        ]
    )
    return root


def test_profile_of_a_config_json_has_expert_rows_per_ep(fp8_profile):
    prof = fp8_profile / "h100-sxm" / "mixtral-8x7b-fp8-kvfp8"  # the config's folder name, marked fp8
    linear = (prof / "linear.csv").read_text()
    assert "moe@ep1" in linear and "moe@ep2" in linear and "router" in linear
    assert json.loads((prof / "provenance.json").read_text())["precision"]["weights"] == "fp8"


def test_moe_fp8_run_from_a_config_json(capsys, tmp_path, fp8_profile):
    args = [
        "run",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--dtype",
        "fp8",
        "--kv-dtype",
        "fp8",
        "--profiles",
        str(fp8_profile),
        "--requests",
        "40",
        "--qps",
        "2",
        "--iterations",
        "none",
    ]
    runs = {}
    for ep in (1, 2):
        code, out, err = _cli(capsys, *args, "--ep", str(ep), "--out", str(tmp_path / f"ep{ep}"))
        assert code == 0, err
        runs[ep] = json.loads((tmp_path / f"ep{ep}" / "summary.json").read_text())
    assert runs[2]["scenario"]["ep"] == 2 and runs[2]["summary"]["completed"] == 40
    # Balanced routing: whole experts on half the GPUs (EP 2) move the same weight bytes and FLOPs per GPU as
    # half-slices of all of them (EP 1), and the combine is the same all-reduce: the same run. (Skew is where
    # they part: tests/test_models_kernels.py.)
    assert runs[1]["summary"]["tbt_p50_s"] == runs[2]["summary"]["tbt_p50_s"]


def test_bf16_run_without_its_profile_names_the_command(capsys, tmp_path, fp8_profile):
    code, _, err = _cli(
        capsys,
        "run",
        "--model",
        MIXTRAL,
        "--gpu",
        "h100",
        "--tp",
        "2",
        "--profiles",
        str(fp8_profile),
        "--requests",
        "5",
        "--out",
        str(tmp_path / "o"),
    )
    assert code == 2 and len(err.strip().splitlines()) == 1
    assert "no profile for Mixtral-8x7B on H100-SXM" in err and "simserve profile" in err


@pytest.mark.parametrize(
    "args, words",
    [
        (["--ep", "3", "--tp", "2"], "EP 3 does not divide Mixtral-8x7B's 8 experts"),
        (["--dtype", "fp4"], "--dtype 'fp4' is not supported; use one of bf16, fp8"),
    ],
)
def test_bad_moe_input_is_one_line(capsys, tmp_path, args, words):
    code, _, err = _cli(
        capsys, "run", "--model", MIXTRAL, "--gpu", "h100", *args, "--out", str(tmp_path / "o")
    )
    assert code == 2 and words in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_unmodelled_config_is_one_line(capsys, tmp_path):
    cfg = tmp_path / "gpt" / "config.json"
    cfg.parent.mkdir()
    cfg.write_text(json.dumps({"architectures": ["FalconForCausalLM"]}))
    code, _, err = _cli(capsys, "run", "--model", str(cfg), "--out", str(tmp_path / "o"))
    assert code == 2 and "['FalconForCausalLM'] is not modelled; supported:" in err


def test_vllm_command_names_precision_and_expert_parallelism():
    from simserve.errors import SimserveError
    from simserve.sim.scenario import Scenario
    from simserve.tune.engine import check_engine_scenario, vllm_command

    s = Scenario(
        model="qwen3-235b-a22b", gpu="h100", tp=8, ep=8, dtype="fp8", kv_dtype="fp8", prefix_caching=True
    )
    cmd = vllm_command(s, {"max-num-batched-tokens": 2048, "max-num-seqs": 256})
    assert cmd.endswith(
        "--tensor-parallel-size 8 --max-model-len 8192 --quantization fp8 --kv-cache-dtype fp8 "
        "--enable-expert-parallel"
    )
    with pytest.raises(SimserveError, match="--ep 4 has no vLLM flag"):
        check_engine_scenario(Scenario(model="qwen3-235b-a22b", gpu="h100", tp=8, ep=4))


def test_probe_cache_keys_read_the_fp8_profile_and_the_config(fp8_profile):
    # a cached capacity probe must go stale when the fp8 profile or the config.json it was simulated on
    # changes
    from simserve.sim.scenario import Scenario
    from simserve.tune.probe import input_digests

    s = Scenario(model=MIXTRAL, gpu="h100", tp=2, dtype="fp8", kv_dtype="fp8", profiles_root=str(fp8_profile))
    digests = input_digests(s)
    assert {"profile", "model_config"} <= set(digests)
    assert "profile" not in input_digests(
        Scenario(model=MIXTRAL, gpu="h100", tp=2, profiles_root=str(fp8_profile))
    )


def test_default_output_of_a_config_json_run_is_named_by_its_folder():
    from simserve.cli.run import _default_out

    out = _default_out(MIXTRAL, "h100", 2, 1, "sarathi", None, "sharegpt", 1.0, 0)
    assert out.parts[0] == "runs" and out.name.startswith("Mixtral-8x7B-h100-tp2")
