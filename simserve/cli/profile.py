"""`simserve profile`: write a profile directory (op timings + provenance) for a model on a GPU."""

from __future__ import annotations

import datetime
import importlib.metadata
import platform
import shlex
from pathlib import Path

import typer
from rich.table import Table

from simserve import precision
from simserve.catalog import GPU, NETWORKS, NODES
from simserve.catalog.models import resolve_model
from simserve.cli import app
from simserve.cli import run as options  # the shared options live beside `run`
from simserve.cli.console import console as make_console
from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.profiling.schema import SHIPPED_PROFILES, TABLES, profile_dir, read_profile, write_profile

BACKENDS = ("roofline", "torch", "measured")


def parse_tps(text: str) -> list[int]:
    try:
        tps = sorted({int(part) for part in text.split(",") if part.strip()})
    except ValueError:
        raise SimserveError(f"--tp must be comma-separated integers like 1,2,4; got {text!r}") from None
    if not tps or min(tps) < 1:
        raise SimserveError(f"--tp needs positive TP degrees like 1,2,4; got {text!r}")
    return tps


def load_backend(name: str, engine: str = "vllm", engine_version: str | None = None):
    """The backend's `profile` function; torch and the measured database are imported only when asked for."""
    if name == "roofline":
        from simserve.profiling.roofline import profile

        return profile
    if name == "torch":
        try:
            from simserve.profiling.torch_backend import profile
        except ImportError as exc:
            raise SimserveError(
                f"the torch backend is unavailable ({exc}); install torch (`pip install torch`) on a GPU "
                f"machine, or use --backend roofline"
            ) from None
        return profile
    if name == "measured":
        import functools

        from simserve.profiling import measured

        if not measured.installed():
            raise SimserveError(
                f"the measured backend needs NVIDIA's {measured.PACKAGE} package: {measured.INSTALL_HINT}"
            )
        from simserve.profiling.measured_backend import profile

        return functools.partial(profile, engine=engine, engine_version=engine_version)
    raise SimserveError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


def _versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    for pkg in ("simserve", "numpy", "pandas", "torch"):
        try:
            out[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            continue
    return out


@app.command("profile")
def profile_command(
    gpu: str = typer.Option(..., "--gpu", help="GPU name from the catalog, e.g. a100, a40, h100."),
    model: str = typer.Option(
        ...,
        "--model",
        help="A catalog model (e.g. mistral-7b, qwen3-235b-a22b) or a Hugging Face config.json.",
    ),
    tp: str = typer.Option("1", "--tp", help="Comma-separated TP degrees to profile, e.g. 1,2,4."),
    pp: int = typer.Option(1, "--pp", help="Pipeline stages of the deployment (checked and recorded)."),
    node: str | None = typer.Option(
        None, "--node", help="Box holding the GPUs (default: the GPU's usual box)."
    ),
    network: str | None = typer.Option(None, "--network", help="Network between nodes, e.g. ethernet-100g."),
    backend: str = typer.Option(
        "roofline",
        "--backend",
        help="roofline (analytic, no GPU), torch (timed on this GPU) or measured (NVIDIA's per-op database).",
    ),
    engine: str = typer.Option(
        "vllm",
        "--engine",
        help="--backend measured: the engine whose kernels were measured (vllm, sglang, trtllm).",
    ),
    engine_version: str | None = typer.Option(
        None,
        "--engine-version",
        help="--backend measured: the engine release (default: the database's current).",
    ),
    out: Path = typer.Option(Path("profiles"), "--out", help="Root folder; writes OUT/<gpu>/<model>/."),
    max_model_len: int = typer.Option(
        16384, "--max-model-len", help="Longest context the attention grid covers."
    ),
    max_tokens: int = typer.Option(
        16384, "--max-tokens", help="Largest batch token count the linear grid covers."
    ),
    quick: bool = typer.Option(False, "--quick", help="A coarser grid: for tests and quick looks."),
    force: bool = typer.Option(
        False,
        "--force",
        help="Replace an existing profile (a shipped one included) instead of merging into it.",
    ),
    dtype: str = options.DTYPE,
    kv_dtype: str = options.KV_DTYPE,
    moe_skew: float = options.MOE_SKEW,
) -> None:
    """Profile every op of one transformer layer on one GPU for each TP degree and write a profile
    directory."""
    model_spec, gpu_spec = resolve_model(model), GPU.get(gpu)
    node_spec = NODES.get(node) if node else None
    network_spec = NETWORKS.get(network) if network else None
    tps = parse_tps(tp)
    if max_tokens < 1:
        raise SimserveError(f"--max-tokens must be at least 1, got {max_tokens}")
    # Non-bf16 profiles sit beside the bf16 one: <model>-fp8, <model>-kvfp8, <model>-fp8-kvfp8.
    dtype, kv_dtype = precision.check_dtype(dtype, "--dtype"), precision.check_dtype(kv_dtype, "--kv-dtype")
    target = profile_dir(out, gpu_spec.name, model_spec.name + precision.suffix(dtype, kv_dtype))
    if target.exists() and not force and target.resolve().is_relative_to(SHIPPED_PROFILES):
        raise SimserveError(
            f"{target} is a shipped profile; write yours with --out my-profiles and use it with "
            f"--profiles my-profiles, or pass --force to change the shipped one"
        )
    if backend != "measured" and (engine != "vllm" or engine_version):
        raise SimserveError(
            "--engine and --engine-version choose measured tables; use them with --backend measured"
        )
    run = load_backend(backend, engine, engine_version)
    # The deployments the profile serves: their checks (heads divisible by TP, layers by PP, a node big
    # enough) fail here with the fix, before any work; a replica spanning nodes brings its network's send/recv
    # rows.
    deps = [
        Deployment.create(
            model_spec,
            gpu_spec,
            t,
            pp,
            node_spec,
            network_spec,
            max_model_len=max_model_len,
            dtype=dtype,
            kv_dtype=kv_dtype,
            moe_skew=moe_skew,
        )
        for t in tps
    ]
    node_spec = deps[0].node
    if network_spec is None:
        network_spec = next((d.network for d in deps if d.num_nodes > 1), None)

    if backend in ("roofline", "measured"):
        extra = {"dtype": dtype, "kv_dtype": kv_dtype, "moe_skew": moe_skew}
    elif (dtype, kv_dtype, moe_skew) != ("bf16", "bf16", 0.0) or model_spec.is_moe or model_spec.is_mla:
        raise SimserveError(
            f"the {backend} backend times bf16 dense GQA layers only ({model_spec.name}, {dtype} weights, "
            f"{kv_dtype} KV asked); use --backend roofline"
        )
    else:
        extra = {}
    tables, fields = run(
        model_spec, gpu_spec, tps, node_spec, network_spec, max_model_len, max_tokens, quick, **extra
    )
    command = [
        "simserve",
        "profile",
        "--gpu",
        gpu,
        "--model",
        model,
        "--tp",
        ",".join(map(str, tps)),
        "--pp",
        str(pp),
    ]
    command += ["--node", node] if node else []
    command += ["--network", network] if network else []
    command += ["--backend", backend]
    if backend == "measured":
        command += ["--engine", engine] + (["--engine-version", engine_version] if engine_version else [])
    command += ["--out", str(out), "--max-model-len", str(max_model_len)]
    command += ["--max-tokens", str(max_tokens)] + (["--quick"] if quick else [])
    command += ["--dtype", dtype] if dtype != "bf16" else []
    command += ["--kv-dtype", kv_dtype] if kv_dtype != "bf16" else []
    command += ["--moe-skew", f"{moe_skew:g}"] if moe_skew else []
    provenance = {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(command),
        "deployment": {
            "model": model_spec.name,
            "hf_id": model_spec.hf_id,
            "gpu": gpu_spec.name,
            "tp": tps,
            "pp": pp,
            "node": node_spec.name if node_spec else None,
            "network": network_spec.name if network_spec else None,
            "max_model_len": max_model_len,
            "max_tokens": max_tokens,
            "quick": quick,
        },
        **fields,
    }
    provenance["versions"] = {**_versions(), **fields.get("versions", {})}
    if (target / "provenance.json").exists() and not force:
        from simserve.profiling.merge import merge_profile  # pandas: only when merging a profile

        tables, provenance = merge_profile(read_profile(target), tables, provenance)
    write_profile(target, tables, provenance)
    _print_summary(target, tables, provenance)


def _print_summary(target: Path, tables: dict, provenance: dict) -> None:
    console = make_console()
    table = Table(title=f"{target}  ({provenance['backend']})", title_justify="left")
    for col in ("file", "rows", "what"):
        table.add_column(col)
    for name in TABLES:
        df = tables[name]
        what = ", ".join(sorted(df.iloc[:, 0].astype(str).unique()))
        table.add_row(f"{name}.csv", str(len(df)), what)
    table.add_row("provenance.json", "", provenance["device"])
    console.print(table)
    dep = provenance["deployment"]
    console.print(
        f"{dep['model']} on {dep['gpu']}, TP {','.join(map(str, dep['tp']))}, PP {dep['pp']}; "
        f"node {dep['node']}, network {dep['network']}"
    )
