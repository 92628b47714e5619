"""Output files of small `simserve run`s, pinned by hash.

The hashes were computed from the code before the tables were streamed to disk (issue 11, item 3) and before
the start-up path stopped importing pandas/scikit-learn (item 1): any change to the bytes a run writes (a
column, a float format, a row order, a different fitted timer) fails here. If a change is intended, say why in
the commit and regenerate with `python tests/test_sim_golden.py`. (summary.json is hashed without its
`scenario` echo, which gains a key with every new option, and without its `profile` label, which names the
input profile's kind; it was re-pinned once when it gained the `notes` list; the tables and trace kept their
hashes. Re-pinned for issue 20 when the fit's baseline NNLS and the reported percentiles moved into simserve's
own arithmetic: the same hashes then came out under numpy 1.26 / pandas 2.1 / scikit-learn 1.4 / scipy 1.12
and numpy 2.3 / pandas 3.1 / scikit-learn 1.9 / scipy 1.17. Re-pinned when the decode-stretch fast paths went
(issue 22): the iteration table has one row per iteration instead of compressed stretch rows, so
iterations.csv and trace.json moved, and sarathi's summary with them (its stage-busy sum over the rows,
0.9999999999999999 → 1.0); requests.csv kept its hashes. Re-pinned for issue 23 when summary.json gained
`vllm_bench_serve`, the run reported as `vllm bench serve` prints it, and again when `simserve run`'s TTFT,
end-to-end and normalized latencies came to include the serving front end's 10.2 ms (sim/frontend.py,
`--frontend-ms`; summary.json's `frontend_s`); the tables, the trace, TBT and scheduling delay did not move.
Re-pinned for issue 30 when `run`'s default front end became the API server as a server (sim/api_server.py):
requests reach the engine after its input work, so every file moved; `sarathi-constant` (`--frontend
constant`, the old default) keeps the old tables and trace. Re-pinned for issue 30 when summary.json gained
`step_parts` (sim/step_parts.py: the mean step by part and step kind); the tables and the trace kept their
hashes. Re-pinned for issue 30 when the API server's PLACEHOLDER costs (3.8 ms per request, 0.10 ms per
streamed token) became vLLM 0.33.0's measured ones at the default host speed 2.0 (sim/frontend.api_server_cpu:
1.39 ms, 2.7 µs per prompt token, 0.042 ms per token): every file of the three `--frontend server` cases
moved; `sarathi-constant` kept its hashes. Re-pinned vllm-exact-2rep's summary.json when a run of several
replicas gained `per_replica` (requests, mean outstanding, prefix-cache hit rate per replica); without that
key it hashes as before, 3623b0e5e13da931, and its tables and trace kept their hashes.)
"""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
HAS_PROFILE = (REPO / "profiles" / "a100-80gb" / "mistral-7b").is_dir()

CASES = {
    "sarathi": ["--requests", "200", "--qps", "2"],
    "vllm-exact-2rep": [
        "--requests",
        "150",
        "--qps",
        "3",
        "--policy",
        "vllm",
        "--exact",
        "--replicas",
        "2",
        "--router",
        "lor",
        "--seed",
        "5",
    ],
    "orca-arxiv": ["--requests", "60", "--qps", "0.5", "--policy", "orca", "--trace", "arxiv", "--seed", "1"],
    # `run`'s default before the API-server model (the 10.2 ms constant alone): its old hashes, unchanged
    "sarathi-constant": ["--requests", "200", "--qps", "2", "--frontend", "constant"],
}
FILES = ("requests.csv", "iterations.csv", "summary.json", "trace.json")

GOLDEN = {
    "orca-arxiv": {
        "requests.csv": "2498aa40a31c8613",
        "iterations.csv": "6b5bb60746662faf",
        "summary.json": "c8e464023a13965e",
        "trace.json": "a74d29ba778d4cfd",
    },
    "sarathi": {
        "requests.csv": "bbf210254e8d10ab",
        "iterations.csv": "91636eaabfc9adea",
        "summary.json": "d5bda6b6d4c2e865",
        "trace.json": "b442bdcd6c244581",
    },
    "sarathi-constant": {
        "requests.csv": "1ef4c98609fc2c2d",
        "iterations.csv": "49df1f6293c12a7e",
        "summary.json": "d8c28282dac10f18",
        "trace.json": "6b2c038fbbd93798",
    },
    "vllm-exact-2rep": {
        "requests.csv": "156a8517e32f33d1",
        "iterations.csv": "e3fe05d08541017f",
        "summary.json": "cb86d3b01733744b",
        "trace.json": "113d6788c9b2400f",
    },
}


def _bytes(path: Path) -> bytes:
    if path.name != "summary.json":
        return path.read_bytes()
    # The scenario echo grows a key with every new Scenario option; the results (summary, notes) must not
    # move.
    doc = json.loads(path.read_text())
    doc.pop("scenario")
    doc.pop("trace_dropped", None)  # added with the context limits: a count beside the results, not a result
    doc.pop("profile", None)  # which kind of profile the run read (an echo of the input, like the scenario)
    return json.dumps(doc, indent=2, sort_keys=True).encode()


def _hashes(out: Path) -> dict[str, str]:
    return {f: hashlib.sha256(_bytes(out / f)).hexdigest()[:16] for f in FILES}


def _run(args: list[str], out: Path) -> dict[str, str]:
    from simserve.cli import main

    main(["run", *args, "--out", str(out)])
    return _hashes(out)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    # one cache for the module: the first case fits the timer (cold), later ones load it (warm)
    return tmp_path_factory.mktemp("cache")


@pytest.mark.skipif(not HAS_PROFILE, reason="needs the shipped mistral-7b/a100 profile")
@pytest.mark.parametrize("case", sorted(CASES))
def test_run_outputs_are_byte_identical_to_the_pinned_ones(case, tmp_path, monkeypatch, capsys, cache_dir):
    monkeypatch.setenv("SIMSERVE_CACHE", str(cache_dir))
    assert _run(CASES[case], tmp_path / "out") == GOLDEN[case]
    # a warm cache (compiled timer, parsed trace) must give the same bytes as the cold one
    assert _run(CASES[case], tmp_path / "out2") == GOLDEN[case]


if __name__ == "__main__":  # regenerate: prints the GOLDEN dict
    import tempfile

    sys.path.insert(0, str(REPO))
    with tempfile.TemporaryDirectory() as d:
        print({c: _run(a, Path(d) / c) for c, a in sorted(CASES.items())})
