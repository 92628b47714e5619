# Does the next token start a new KV block (computed % block_size == 0)? The test every decode of every batch
# makes (state.ReplicaState.schedule_decodes, sglang's page growth), inline here so that each module calling it
# compiles it into its own loops: a method of CoreBlocks would be a vtable call from another module, which the C
# compiler cannot inline (it was inlined when the core was one file). blockstart.py is the same for the source
# run uncompiled (SIMSERVE_CORE=python); tests/test_sim_core.py holds both to the reference.
cdef inline bint block_start(long long computed, long long block_mask, long long block_size) noexcept:
    if block_mask >= 0:  # NOTE: a mask, not a division: this runs for every decode of every batch
        return (computed & block_mask) == 0
    return computed % block_size == 0
