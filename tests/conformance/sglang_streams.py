"""Token ids for a conformance workload's requests, for the engine side (SGLang's driver): simserve has no
ids.

Request i's tokens are its prompt then its outputs. The first `shared[i]` of them lie on its group's stream
(`group[i]` ≥ 0: a shared system prompt, or a conversation whose later turns carry the earlier ones) and are
that stream's tokens; the rest are its own. So two requests share exactly the tokens simserve's prefix model
says they share (sim/radix_cache.py's identity), and the driver's model "samples" a request's next token as
the next of its stream, which a later turn of the conversation carries in its prompt. Ids are drawn from [1,
VOCAB) with numpy's seeded generator: no id is an EOS (no tokenizer is loaded), none out of the vocabulary.
"""

from __future__ import annotations

import numpy as np

VOCAB = 32000


def token_streams(w: dict) -> list[list[int]]:
    streams: dict[int, np.ndarray] = {}
    out = []
    for i, (p, o) in enumerate(zip(w["prompt"], w["output"], strict=True)):
        own = np.random.default_rng([2, i]).integers(1, VOCAB, p + o)
        g, k = w["group"][i], w["shared"][i]
        if g >= 0 and k > 0:
            if g not in streams:
                streams[g] = np.random.default_rng([1, g]).integers(1, VOCAB, w["max_model_len"])
            own[:k] = streams[g][:k]
        out.append(own.tolist())
    return out
