"""Does a profile cover a deployment? Which TP degree and which links' collectives it must have, and the
fix."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from simserve.deployment import Deployment
from simserve.errors import SimserveError
from simserve.ops import ELEMENTWISE_OPS, a2a_op, timed_linear_ops
from simserve.predictor.fitted import ModelKey
from simserve.profiling.nccl import stage_hop
from simserve.profiling.schema import SHIPPED_PROFILES, Profile, slug

# profile_keys by profile object (kept in the entry, so its id is not reused while the entry exists): a plan
# asks for the keys of one or two profiles (read once per process, load.read_profile_cached) some 25 times, 15
# ms each.
_KEYS: dict[int, tuple[Profile, frozenset[ModelKey]]] = {}
MAX_KEYS = 8


def profile_keys(profile: Profile) -> set[ModelKey]:
    """The model keys a profile's rows would produce (without fitting anything)."""
    hit = _KEYS.get(id(profile))
    if hit is not None and hit[0] is profile:
        return set(hit[1])
    keys = _profile_keys(profile)
    if len(_KEYS) >= MAX_KEYS:
        _KEYS.pop(next(iter(_KEYS)))
    _KEYS[id(profile)] = (profile, frozenset(keys))
    return keys


def _profile_keys(profile: Profile) -> set[ModelKey]:
    keys: set[ModelKey] = set()
    for family, df in (("linear", profile.linear), ("elementwise", profile.elementwise)):
        keys |= {
            ModelKey(family, str(op), int(tp))
            for op, tp in df[["op", "tp"]].drop_duplicates().itertuples(index=False)
        }
    att = profile.attention[["phase", "tp"]].drop_duplicates()
    keys |= {ModelKey(f"attention_{ph}", str(ph), int(tp)) for ph, tp in att.itertuples(index=False)}
    col = profile.collectives[["op", "link", "num_workers"]].drop_duplicates()
    keys |= {
        ModelKey("collective", str(op), 0, str(link), int(w)) for op, link, w in col.itertuples(index=False)
    }
    return keys


def node_link(dep: Deployment) -> str:
    if dep.node is None:
        raise SimserveError(
            f"deployment of {dep.model.name} on {dep.gpu.name} names no node, so its collectives have no "
            "link; pass --node"
        )
    return dep.node.name


def stage_link(dep: Deployment, stage: int) -> str:
    """The profile link the activations of `stage` cross to reach stage + 1 (`nccl.stage_hop`, which the
    profile writer uses too): the network when they leave the node, else NVLink or PCIe as the box's topology
    decides."""
    if dep.crosses_nodes(stage) and dep.network is None:
        raise SimserveError(f"{dep.describe()} spans nodes but names no network; pass --network")
    node_link(dep)  # a clear error when there is no node
    return stage_hop(dep.node, dep.network, dep.tp, stage).link


def find_collective(keys: Iterable[ModelKey], op: str, link: str, num_workers: int | None) -> ModelKey | None:
    """The collective model for `op` over `link`; num_workers None takes the smallest group (send/recv is a
    pair)."""
    matches = [k for k in keys if k.family == "collective" and k.op == op and slug(k.link) == slug(link)]
    if num_workers is not None:
        matches = [k for k in matches if k.num_workers == num_workers]
    return min(matches, key=lambda k: k.num_workers) if matches else None


def profile_command(dep: Deployment, root: str | Path | None = None) -> str:
    """The `simserve profile` command that writes a profile covering `dep` into `root`.

    It adds TP degrees to an existing profile (profile merges them), so the hint never loses data. A shipped
    profile is never changed by a hint: for one, the command writes beside it, into a folder of the user's.
    """
    model = dep.model.source if Path(dep.model.source).is_file() else slug(dep.model.name)  # a config.json
    # attention DP: all-reduce rows for dp
    tps = ",".join(str(t) for t in sorted({dep.tp, dep.dp} - {1} or {1}))
    cmd = f"simserve profile --gpu {slug(dep.gpu.name)} --model {model} --tp {tps}"
    if dep.dtype != "bf16":
        cmd += f" --dtype {dep.dtype}"
    if dep.kv_dtype != "bf16":
        cmd += f" --kv-dtype {dep.kv_dtype}"
    if dep.moe_skew:
        cmd += f" --moe-skew {dep.moe_skew:g}"
    if dep.pp > 1:
        cmd += f" --pp {dep.pp}"
    if dep.node is not None:
        cmd += f" --node {dep.node.name}"
    if dep.num_nodes > 1 and dep.network is not None:
        cmd += f" --network {dep.network.name}"
    cmd += (
        _measured_flags(Path(root) / slug(dep.gpu.name) / slug(dep.profile_model)) if root is not None else ""
    )
    if root is not None and Path(root).resolve() == SHIPPED_PROFILES:
        target = Path(root) / slug(dep.gpu.name) / slug(dep.profile_model)
        if target.exists():
            return f"{cmd} --out my-profiles` and rerun with `--profiles my-profiles"
        root = None  # a new profile may join the shipped ones, which is where `run` looks by default
    return cmd + (f" --out {root}" if root is not None else "")


def _measured_flags(path: Path) -> str:
    """A measured profile grows only with rows made the same way (merge.py): the hint names its engine
    release."""
    import json

    try:
        prov = json.loads((path / "provenance.json").read_text())
    except (OSError, ValueError):
        return ""
    m = prov.get("measured") if prov.get("backend") == "measured" else None
    return f" --backend measured --engine {m['engine']} --engine-version {m['engine_version']}" if m else ""


def needed_keys(keys: set[ModelKey], dep: Deployment, where: str | Path) -> list[ModelKey]:
    """The models `dep`'s timer reads, out of a profile's `keys`; raises one SimserveError naming the first
    thing the profile lacks, with the command that fixes it."""
    cmd = profile_command(dep, Path(where).parents[1])
    tps = {
        k.tp for k in keys if k.family in ("linear", "elementwise", "attention_prefill", "attention_decode")
    }
    if dep.tp not in tps:
        have = ", ".join(str(t) for t in sorted(tps)) or "none"
        raise SimserveError(f"profile {where} has no TP {dep.tp} rows (it has TP {have}); run `{cmd}`")
    needed = [ModelKey("linear", op, dep.tp) for op, _ in timed_linear_ops(dep)]
    needed += [ModelKey("elementwise", op, dep.tp) for op in ELEMENTWISE_OPS]
    needed += [
        ModelKey("attention_prefill", "prefill", dep.tp),
        ModelKey("attention_decode", "decode", dep.tp),
    ]
    for k in needed:
        if k not in keys:
            raise SimserveError(
                f"profile {where} has no TP {dep.tp} rows for {k.op} ({k.family}); run `{cmd}`"
            )
    if dep.tp > 1:
        if (ar := find_collective(keys, "all_reduce", node_link(dep), dep.tp)) is None:
            raise SimserveError(
                f"profile {where} has no all_reduce rows for {dep.tp} workers over {node_link(dep)}; "
                f"run `{cmd}`"
            )
        needed.append(ar)
    if (op := a2a_op(dep)) is not None:  # DeepEP dispatch + combine: measured rows only
        if (a2a := find_collective(keys, op, node_link(dep), dep.ep)) is None:
            raise SimserveError(
                f"profile {where} has no {op} rows for EP {dep.ep} over {node_link(dep)}: DeepEP's dispatch "
                "and combine come only from NVIDIA's measured tables (EP 8 on one HGX/DGX node, EP 4 on a "
                f"GB200/GB300 tray; hidden 3072-7168, top-6/8); build a measured profile (`{cmd}` with "
                "--backend measured) or use --all2all-backend allgather_reducescatter"
            )
        needed.append(a2a)
    # attention DP: each MoE layer's dispatch and combine over the dp ranks (ops.exchange_bytes)
    elif dep.dp > 1:
        if (a2a := find_collective(keys, "all_reduce", node_link(dep), dep.dp)) is None:
            raise SimserveError(
                f"profile {where} has no all_reduce rows for {dep.dp} workers over {node_link(dep)} (the "
                f"dispatch and combine of {dep.dp} attention-DP ranks); run `{cmd}`"
            )
        needed.append(a2a)
    for stage in range(dep.pp - 1):
        link = stage_link(dep, stage)
        if (sr := find_collective(keys, "send_recv", link, None)) is None:
            raise SimserveError(
                f"profile {where} has no send_recv rows over {link} (needed between pipeline stages "
                f"{stage} and {stage + 1}); run `{cmd}`"
            )
        needed.append(sr)
    return needed


def require(keys: set[ModelKey], dep: Deployment, where: str | Path) -> None:
    """Raise one SimserveError naming the first thing the profile lacks for `dep`, with the command that fixes
    it."""
    needed_keys(keys, dep, where)
