"""`simserve list models|gpus|nodes|networks|traces`: what the catalog and the shipped data hold."""

from __future__ import annotations

import dataclasses

import typer

from simserve.cli import app
from simserve.errors import SimserveError

KINDS = ("models", "gpus", "nodes", "networks", "traces")
# Long or bookkeeping fields: the table stays one screen wide; `source` is shown by --sources.
HIDDEN = {"source", "aliases", "hf_id", "max_position", "dtype_bytes", "head_size", "tied_embeddings", "expert_ffn",
          "shared_expert_ffn", "first_dense_layers", "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim",
          "qk_rope_head_dim", "v_head_dim"}  # fmt: skip


@app.command("list")
def list_command(
    kind: str = typer.Argument(..., help=f"What to list: {' | '.join(KINDS)}."),
    sources: bool = typer.Option(False, "--sources", help="Add each entry's cited source."),
) -> None:
    """List the known models, GPUs, nodes, networks (built in plus --catalog files) or shipped traces."""
    from rich.console import Console
    from rich.table import Table

    if kind not in KINDS:
        raise SimserveError(f"unknown list {kind!r}; choose one of {', '.join(KINDS)}")
    header, rows = _traces() if kind == "traces" else _specs(kind, sources)
    table = Table(title=kind)
    for col in header:
        table.add_column(col, overflow="fold")
    for row in rows:
        table.add_row(*(str(v) for v in row))
    Console(soft_wrap=True).print(table)


def _specs(kind: str, sources: bool) -> tuple[list[str], list[list[object]]]:
    from simserve.catalog import GPU, MODELS, NETWORKS, NODES

    table = {"models": MODELS, "gpus": GPU, "nodes": NODES, "networks": NETWORKS}[kind]
    specs = list(table)
    fields = [f.name for f in dataclasses.fields(specs[0]) if f.name not in HIDDEN or (sources and f.name == "source")]
    # NOTE: dataclass fields, so a field added to a spec shows up here without touching this command.
    rows = [[_show(getattr(s, f)) for f in fields] + [", ".join(getattr(s, "aliases", ()))] for s in specs]
    header = [f.removeprefix("num_").replace("_", " ") for f in fields] + ["aliases"]
    if kind == "gpus":  # which GPUs `--backend measured` (and plan, sweep, run) can build a measured profile for
        header.append("measured tables")
        for spec, row in zip(specs, rows, strict=True):
            row.append(_measured(spec.name))
    return header, rows


def _measured(gpu: str) -> str:
    from simserve.profiling import measured

    if not measured.installed():
        return f"? ({measured.INSTALL_HINT})" if gpu in measured.SYSTEMS else "none"
    system = measured.SYSTEMS.get(gpu)
    have = measured.engines(system) if system else {}
    return "; ".join(f"{e} {', '.join(v)}" for e, v in have.items()) or "none"


def _traces() -> tuple[list[str], list[list[object]]]:
    import numpy as np

    from simserve.workload import load_trace
    from simserve.workload.trace import SHIPPED, TRACES_DIR

    rows = []
    for name, file in SHIPPED.items():
        t = load_trace(name)
        rows.append(
            [name, TRACES_DIR / file, len(t), int(np.median(t.prompt_tokens)), int(np.median(t.output_tokens))]
        )
    return ["name", "file", "requests", "prompt p50", "output p50"], rows


def _show(value: object) -> object:
    return "" if value is None else value
