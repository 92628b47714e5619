"""Profiles to and from Vidur (microsoft/vidur): its CSV layout on one side, simserve's schema on the other.

Vidur keeps `compute/<device>/<hf-model-id>/{mlp,attention}.csv` and
`network/<node>/{all_reduce,send_recv}.csv`, each op as `time_stats.<op>.{min,max,mean,median,std}` in ms.
Import takes the `median` (what Vidur's own predictor trains on) and keeps min/max/mean/std as extra
`time_<stat>_ms` columns, so export gives them back unchanged.

Meaning of Vidur's attention columns (vidur/profiling/attention/attention_input.py): a prefill row is one
request whose `prefill_chunk_size` new tokens follow `kv_cache_size` tokens already processed — simserve's
`chunk` and `kv_len`; a decode row is `batch_size` requests each with `kv_cache_size` cached tokens
(prefill_chunk_size 0). Vidur times decode with the new token appended (kv_cache_size + 1 keys); simserve maps
kv_cache_size to kv_len as is. Collective `size` is bytes; a row whose `devices_per_node` is below
`num_workers` crosses nodes.
"""

from __future__ import annotations

from simserve.catalog import GPU, MODELS, GPUSpec, ModelSpec
from simserve.profiling.schema import Profile
from simserve.profiling.vidur_export import (
    attention_frame,
    collective_frame,
    export_vidur,
    mlp_frame,
    profile_node,
)
from simserve.profiling.vidur_format import (
    EXPORT_MARKER,
    EXTRA_STATS,
    FILES,
    MLP_OPS,
    OP_MAP,
    STATS,
    UNKNOWN_NETWORK,
    VIDUR_DEVICE,
    VIDUR_NODE,
    VIDUR_VOCAB,
    vidur_device,
    vidur_node,
)
from simserve.profiling.vidur_import import (
    exact_text,
    import_vidur,
    locate,
    read_attention,
    read_collective,
    read_mlp,
)

# The public names, importable from here as before the split: the format's names in vidur_format.py,
# reading in vidur_import.py, writing in vidur_export.py.
__all__ = [
    "EXPORT_MARKER",
    "EXTRA_STATS",
    "FILES",
    "MLP_OPS",
    "OP_MAP",
    "STATS",
    "UNKNOWN_NETWORK",
    "VIDUR_DEVICE",
    "VIDUR_NODE",
    "VIDUR_VOCAB",
    "attention_frame",
    "collective_frame",
    "exact_text",
    "export_vidur",
    "import_vidur",
    "locate",
    "mlp_frame",
    "profile_node",
    "read_attention",
    "read_collective",
    "read_mlp",
    "resolve_profile_specs",
    "vidur_device",
    "vidur_node",
]


def resolve_profile_specs(profile: Profile, model: str | None, gpu: str | None) -> tuple[ModelSpec, GPUSpec]:
    """The model and GPU a profile is for: given names win, then provenance, then the profiles/<gpu>/<model>
    path."""
    prov = profile.provenance
    return MODELS.get(model or prov.get("model") or profile.path.name), GPU.get(
        gpu or prov.get("gpu") or profile.path.parent.name
    )
