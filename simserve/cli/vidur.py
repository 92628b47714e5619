"""`simserve vidur import|export`: move profiles between Vidur's CSV layout and simserve's profile
directory."""

from __future__ import annotations

import shlex
from pathlib import Path

import typer

from simserve.catalog import GPU, MODELS, NETWORKS, NODES
from simserve.catalog.hardware import DEFAULT_NODE
from simserve.cli import app
from simserve.errors import SimserveError

vidur_app = typer.Typer(
    help="Convert profiles between Vidur's format (microsoft/vidur) and simserve's.",
    no_args_is_help=True,
)
app.add_typer(vidur_app, name="vidur")


@vidur_app.command("import")
def import_cmd(
    src: Path = typer.Argument(
        ...,
        help="Folder with Vidur's mlp.csv / attention.csv / all_reduce.csv / "
        "send_recv.csv, flat or in Vidur's data/profiling tree.",
    ),
    model: str = typer.Option(..., "--model", help="Model the files were measured for, e.g. llama-2-7b."),
    gpu: str = typer.Option(..., "--gpu", help="GPU the files were measured on, e.g. a100."),
    node: str | None = typer.Option(
        None,
        "--node",
        help="Box the collectives were measured in "
        "(default: the GPU's usual box, e.g. a100-pairwise-nvlink).",
    ),
    network: str | None = typer.Option(
        None,
        "--network",
        help="Network between nodes for cross-node rows "
        "(devices_per_node < num_workers); unnamed, they are labelled "
        "'unknown-network' and the simulator will not use them.",
    ),
    fill_from: Path | None = typer.Option(
        None, "--fill-from", help="simserve profile to take the tables of missing Vidur files from."
    ),
    out: Path = typer.Option(Path("profiles"), "--out", help="Root of the profiles tree."),
) -> None:
    """Import a Vidur profile as profiles/<gpu>/<model>/ (times copied exactly; median column)."""
    from simserve.profiling.schema import profile_dir, read_profile, write_profile
    from simserve.profiling.vidur import import_vidur

    model_spec, gpu_spec = MODELS.get(model), GPU.get(gpu)
    node_name = node or DEFAULT_NODE.get(gpu_spec.name)
    if node_name is None:
        raise SimserveError(
            f"{gpu_spec.name} has no default node; pass --node (known: {', '.join(NODES.names())})"
        )
    node_spec = NODES.get(node_name)
    network_spec = NETWORKS.get(network) if network else None
    fill = read_profile(fill_from) if fill_from else None
    tables, provenance = import_vidur(src, model_spec, gpu_spec, node_spec, network_spec, fill)
    args = ["simserve", "vidur", "import", str(src), "--model", model, "--gpu", gpu, "--node", node_name]
    args += ["--network", network] if network else []
    args += ["--fill-from", str(fill_from)] if fill_from else []
    provenance["command"] = shlex.join([*args, "--out", str(out)])
    path = write_profile(profile_dir(out, gpu_spec.name, model_spec.name), tables, provenance)
    counts = ", ".join(f"{name} {len(df)}" for name, df in tables.items())
    typer.echo(
        f"wrote {path} ({counts} rows; tables from: {', '.join(sorted(set(provenance['tables'].values())))})"
    )


@vidur_app.command("export")
def export_cmd(
    profile: Path = typer.Argument(
        ..., help="simserve profile directory, e.g. profiles/a100-80gb/llama-2-7b."
    ),
    out: Path = typer.Option(
        ..., "--out", help="New folder; Vidur runs from it (it gets data/profiling/...)."
    ),
    network_name: str | None = typer.Option(
        None,
        "--network-name",
        help="Vidur's name for the box, the "
        "folder under data/profiling/network (default from the node, e.g. "
        "a100_pairwise_nvlink).",
    ),
    as_model: str | None = typer.Option(
        None,
        "--as-model",
        help="File the times under this model's Vidur "
        "name (it must have the same layer shapes), for models Vidur lacks.",
    ),
    model: str | None = typer.Option(None, "--model", help="Model of the profile (default: its provenance)."),
    gpu: str | None = typer.Option(None, "--gpu", help="GPU of the profile (default: its provenance)."),
    node: str | None = typer.Option(
        None, "--node", help="Node of its collectives (default: its provenance)."
    ),
) -> None:
    """Write a simserve profile in Vidur's layout and columns, so Vidur can run on it."""
    from simserve.profiling.schema import read_profile
    from simserve.profiling.vidur import export_vidur, profile_node, resolve_profile_specs

    prof = read_profile(profile)
    model_spec, gpu_spec = resolve_profile_specs(prof, model, gpu)
    node_spec = NODES.get(node) if node else profile_node(prof)
    vidur_model = MODELS.get(as_model) if as_model else None
    files = export_vidur(prof, out, model_spec, gpu_spec, node_spec, network_name, vidur_model)
    for rel in files:
        typer.echo(f"wrote {out / rel}")
