/* replicas.c — the replica check: ranks that hold the same parameters (stages 0-2: every unit;
 * stage 3: the persistent units; stage 0 with 16-bit compute also the full fp32 master) compare
 * a hash of them, unit by unit, and a rank whose copy drifted is named with the step and the
 * first unit that differs.
 *
 * Not here: the weights fingerprint (accounting.c), which hashes the canonical fp32 weights
 * however they are sharded; this check hashes each rank's own replicated bytes, padding
 * included, so it costs one pass over them and one all-gather of a hash per unit.
 * Invariants: every rank hashes the same units in the same order (the layout is the same on
 * every rank); the all-gather's traffic is moved out of the step's window, as the fingerprint's.
 */
#include "engine_internal.h"

#include <stdlib.h>
#include <string.h>

/* The replicated bytes of unit un on this rank hashed, or 0 when this rank holds no replica of it
 * (stage 3, not persistent). */
static uint64_t unit_hash(const zero_engine_t *eng, const zero__unit_t *un) {
    if (eng->pol.shard_params && !un->persistent) return 0;
    uint64_t h = 0xcbf29ce484222325ull;
    h = zero__hash_bytes(h, un->full, un->padded_count * eng->ce);
    if (un->master && !eng->pol.shard_optim)
        h = zero__hash_bytes(h, un->master, un->padded_count * sizeof(float));
    return h | 1; /* never 0, the "no replica" mark */
}

/* Compare the hashes of the units of group g (ranks outside it hold other parameters). */
static zero_status_t check_group(zero_engine_t *eng, const zero__group_t *g) {
    if (g->size == 1) return ZERO_OK;
    int n = 0;
    for (int u = 0; u < eng->unit_count; u++) n += eng->units[u].grp == g;
    if (n == 0) return ZERO_OK;
    const size_t W = (size_t)g->size;
    uint64_t *mine = malloc((size_t)n * sizeof *mine), *all = NULL;
    int *unit_of = malloc((size_t)n * sizeof *unit_of);
    if (!mine || !unit_of) {
        free(mine);
        free(unit_of);
        return zero__error(ZERO_ERR_OUT_OF_MEMORY, "replica check: out of memory for %d hashes", n);
    }
    uint64_t all_units = 0xcbf29ce484222325ull;
    for (int u = 0, k = 0; u < eng->unit_count; u++) {
        if (eng->units[u].grp != g) continue;
        unit_of[k] = u;
        mine[k] = unit_hash(eng, &eng->units[u]);
        all_units = zero__hash_bytes(all_units, &mine[k], sizeof mine[k]);
        k++;
    }
    /* First a constant-size agreement: the maximum of each 16-bit quarter of the hash and of
     * its negation is the same everywhere iff every rank has the same hash. The table of all
     * ranks' unit hashes (W x units x 8 bytes on every rank, W^2 in a process of thread ranks)
     * is gathered only to name a difference. */
    int32_t q[8];
    for (int k = 0; k < 4; k++) {
        q[k] = (int32_t)((all_units >> (16 * k)) & 0xffff);
        q[4 + k] = -q[k];
    }
    zero_status_t st = zero__xfer_max(eng, g, q, 8);
    int same = 1;
    for (int k = 0; k < 4; k++) same &= q[k] == -q[4 + k];
    if (!st && !same) {
        if (!(all = malloc((size_t)n * W * sizeof *all)))
            st = zero__error(ZERO_ERR_OUT_OF_MEMORY, "replica check: out of memory for %zu hashes",
                             (size_t)n * W);
        else
            st = zero__xfer_gather(eng, g, ZERO__XFER_CHECK, mine, all, (size_t)n * sizeof *mine,
                                   ZERO_DTYPE_UINT8, NULL);
    }
    free(mine);
    if (st) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", zero_last_error());
        free(all);
        free(unit_of);
        return zero__engine_fail(eng, st, "replica check: exchanging the hashes failed: %s", msg);
    }
    if (same) {
        free(unit_of);
        return ZERO_OK;
    }
    /* Every rank reads the same table, so every rank reaches the same verdict and message. */
    char ranks[256] = "";
    size_t len = 0;
    int bad = 0, first_unit = -1, first_rank = -1;
    for (size_t r = 1; r < W; r++) {
        int unit = -1;
        for (int k = 0; k < n && unit < 0; k++)
            if (all[r * (size_t)n + (size_t)k] != all[k]) unit = k;
        if (unit < 0) continue;
        if (bad++ == 0) {
            first_unit = unit;
            first_rank = (int)r;
        }
        if (len + 16 < sizeof ranks)
            len += (size_t)snprintf(ranks + len, sizeof ranks - len, "%s%zu", len ? ", " : "", r);
        else if (len + 5 < sizeof ranks && ranks[len - 1] != '.')
            len += (size_t)snprintf(ranks + len, sizeof ranks - len, ", ...");
    }
    uint64_t h0 = first_unit >= 0 ? all[first_unit] : 0;
    uint64_t hr = first_unit >= 0 ? all[(size_t)first_rank * (size_t)n + (size_t)first_unit] : 0;
    const char *unit_name = first_unit >= 0 ? eng->units[unit_of[first_unit]].name : "?";
    free(all);
    free(unit_of);
    if (!bad) return ZERO_OK;
    return zero__error(ZERO_ERR_MISMATCH,
                       "replica check after step %lld: the replicated parameters of rank%s %s "
                       "differ from rank 0's (first in unit '%s': hash %016llx on rank %d, "
                       "%016llx on rank 0; expected the same bits on every rank: the ranks "
                       "train different models)",
                       (long long)eng->step, bad > 1 ? "s" : "", ranks, unit_name,
                       (unsigned long long)hr, first_rank, (unsigned long long)h0);
}

zero_status_t zero_engine_check_replicas(zero_engine_t *eng) {
    if (!eng) return zero__error(ZERO_ERR_INVALID_ARG, "zero_engine_check_replicas: NULL engine");
    if (eng->failure) return zero__error(eng->failure, "%s", eng->failure_msg);
    zero_status_t st = zero__overlap_refuse(eng, "zero_engine_check_replicas");
    for (int g = 0; g < eng->group_count && !st; g++) st = check_group(eng, &eng->groups[g]);
    return st;
}
