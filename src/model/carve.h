/* carve.h — carving named views out of one flat activation block (gpt.c, moe_mlp.c): a first
 * pass with base == NULL only counts the bytes, a second one on the allocated block sets the
 * views. Every view starts 64-byte aligned.
 */
#ifndef ZERO_MODEL_CARVE_H
#define ZERO_MODEL_CARVE_H

#include <stddef.h>

/* View of `count` elements of `es` bytes at *off into *(void **)out (when base is not NULL);
 * advances *off past it, rounded up to 64 bytes. */
static inline void zero__carve(char *base, size_t *off, size_t count, size_t es, void *out) {
    if (base) *(void **)out = base + *off;
    *off += (count * es + 63) / 64 * 64;
}

#endif /* ZERO_MODEL_CARVE_H */
