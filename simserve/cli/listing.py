"""`simserve list models|gpus|nodes|networks|traces`: what the catalog and the shipped data hold."""

from __future__ import annotations

import dataclasses

import typer

from simserve.cli import app
from simserve.errors import SimserveError

KINDS = ("models", "gpus", "nodes", "networks", "traces")
# Not table columns: bookkeeping fields, and the long text (aliases, --sources) listed under the table,
# where it wraps as prose instead of squeezing the columns.
# (and the MoE / MLA shape fields: most entries leave them empty)
HIDDEN = {
    "source",
    "aliases",
    "hf_id",
    "max_position",
    "dtype_bytes",
    "head_size",
    "tied_embeddings",
    "expert_ffn",
    "shared_expert_ffn",
    "first_dense_layers",
    "q_lora_rank",
    "kv_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "num_experts",
    "experts_per_token",
}
# Shown with --wide only, so that the default table fits an 80-column terminal without splitting a number.
DETAIL = {
    "activation",
    "norm",
    "parallel_attn_mlp",
    "sliding_window",
    "nvlink_bus_gbps",
    "pcie_bus_gbps",
    "nvls_bus_gbps",
    "sm_version",
    "power_w",
    "sustained_tflops",
    "fp8_weight_block",
}
# Column headings with the unit (the fields' `gbps` are gigabytes per second); others are the field's name.
LABELS = {
    "gpus_per_node": "GPUs",
    "memory_gib": "GiB",
    "peak_tflops": "TFLOPS",
    "power_w": "W",
    "sustained_tflops": "sustained TFLOPS",
    "hbm_gbps": "HBM GB/s",
    "nvlink_gbps": "NVLink GB/s",
    "pcie_gbps": "PCIe GB/s",
    "nvlink_bus_gbps": "NVLink bus GB/s",
    "pcie_bus_gbps": "PCIe bus GB/s",
    "nvls_bus_gbps": "NVLS bus GB/s",
    "gbps": "GB/s",
    "bus_gbps": "bus GB/s",
    "latency_us": "latency µs",
    "parallel_attn_mlp": "parallel attn",
    "sliding_window": "window",
}
# A file path folds onto several lines; names and numbers never split (a split number read as two).
FOLD = {"file"}


@app.command("list")
def list_command(
    kind: str = typer.Argument(..., help=f"What to list: {' | '.join(KINDS)}."),
    sources: bool = typer.Option(False, "--sources", help="Add each entry's cited source."),
    wide: bool = typer.Option(
        False,
        "--wide",
        help="Every field (models' activation, norm, parallel attention, sliding window; nodes' bus "
        "bandwidths), "
        "and each entry's aliases under the table.",
    ),
) -> None:
    """List the known models, GPUs, nodes, networks (built in plus --catalog files) or shipped traces."""
    import sys

    from rich import box
    from rich.table import Table

    from simserve.cli.console import console as make_console

    if kind not in KINDS:
        raise SimserveError(f"unknown list {kind!r}; choose one of {', '.join(KINDS)}")
    header, rows = _traces() if kind == "traces" else _specs(kind, wide)
    table = Table(title=kind, box=box.SIMPLE_HEAD, pad_edge=False, padding=(0, 1), collapse_padding=True)
    for i, (field, label) in enumerate(header):
        numeric = all(isinstance(row[i], int | float) and not isinstance(row[i], bool) for row in rows)
        table.add_column(
            label, justify="right" if numeric else "left", no_wrap=field not in FOLD, overflow="fold"
        )
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    # Piped into a file or another program: the table's own width, so nothing folds (and rich adds no colour).
    piped = not sys.stdout.isatty()
    console = make_console(
        width=max(80, make_console(width=10_000).measure(table).maximum) if piped else None
    )
    console.print(table)
    if kind != "traces":
        for line in _under_table(kind, sources, wide):  # piped: one entry a line, whole, for grep
            console.print(line, highlight=False, markup=False, soft_wrap=piped)


def _catalog(kind: str) -> list:
    from simserve.catalog import GPU, MODELS, NETWORKS, NODES

    return list({"models": MODELS, "gpus": GPU, "nodes": NODES, "networks": NETWORKS}[kind])


def _specs(kind: str, wide: bool) -> tuple[list[tuple[str, str]], list[list[object]]]:
    specs = _catalog(kind)
    # NOTE: dataclass fields, so a field added to a spec shows up here without touching this command.
    fields = [
        f.name
        for f in dataclasses.fields(specs[0])
        if f.name not in HIDDEN and (wide or f.name not in DETAIL)
    ]
    rows = [[_value(getattr(s, f)) for f in fields] for s in specs]
    header = [(f, LABELS.get(f, f.removeprefix("num_").replace("_", " "))) for f in fields]
    if kind == "models":  # a mixture of experts in one column: "8 of 256" experts per token
        header.append(("experts", "experts"))
        for row, s in zip(rows, specs, strict=True):
            row.append(f"{s.experts_per_token} of {s.num_experts}" if s.num_experts else "")
    if kind == "gpus":  # which GPUs `--backend measured` (and plan) can build a measured profile for; the
        header.append(("measured", "measured"))  # engines and releases are listed under the table
        for row, s in zip(rows, specs, strict=True):
            row.append(_measured(s.name)[0])
    return header, rows


def _measured(gpu: str) -> tuple[str, str]:
    """(yes / no / ?, the engines and releases NVIDIA's per-op database measured this GPU with)."""
    from simserve.profiling import measured

    if gpu not in measured.SYSTEMS:
        return "no", ""
    if not measured.installed():
        return "?", f"tables unknown: {measured.INSTALL_HINT}"
    have = measured.engines(measured.SYSTEMS[gpu])
    return ("yes" if have else "no"), "; ".join(f"{e} {', '.join(v)}" for e, v in have.items())


def _under_table(kind: str, sources: bool, wide: bool) -> list[str]:
    """Aliases (--wide) and cited sources (--sources), one entry a line, wrapped as text."""
    lines = []
    for spec in _catalog(kind):
        if wide and getattr(spec, "aliases", ()):
            lines.append(f"{spec.name} also: {', '.join(spec.aliases)}")
        if sources and getattr(spec, "source", None):
            lines.append(f"{spec.name} source: {spec.source}")
        if kind == "gpus" and (tables := _measured(spec.name)[1]):
            lines.append(f"measured tables of {spec.name}: {tables}")
    if not wide:
        lines.append("--wide adds every field and each entry's aliases; --sources the cited sources")
    return lines


def _traces() -> tuple[list[str], list[list[object]]]:
    import numpy as np

    from simserve.workload import load_trace
    from simserve.workload.trace import SHIPPED, TRACES_DIR

    rows = []
    for name, file in SHIPPED.items():
        t = load_trace(name)
        rows.append(
            [
                name,
                TRACES_DIR / file,
                len(t),
                int(np.median(t.prompt_tokens)),
                int(np.median(t.output_tokens)),
            ]
        )
    return [(h, h) for h in ("name", "file", "requests", "prompt p50", "output p50")], rows


def _value(value: object) -> object:
    return ", ".join(str(v) for v in value) if isinstance(value, tuple | list) else value


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:g}"  # 2039.0 -> 2039, 79.15 stays
    return str(value)
