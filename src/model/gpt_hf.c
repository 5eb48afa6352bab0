/* gpt_hf.c — which of the GPT-2 name maps a safetensors file uses, and whether its LM head is
 * tied (gpt.h: zero__gpt_names_of_file).
 *
 * Why the check: zero's GPT computes its logits with the token embedding (as GPT-2 does), so an
 * import reads wte and would silently drop an lm_head.weight that differs from it (a model
 * fine-tuned with the head untied). Files saved by save_pretrained usually leave the tied head
 * out; when it is there it must be the same values, compared as stored, in pieces.
 */
#include "model/gpt.h"

#include "ckpt/ckpt_internal.h"
#include "core/core_internal.h"
#include "core/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Tensor `name` of the header: its dtype string and the [begin, end) of its bytes in the data
 * section; 0 when absent. */
static int entry(const cJSON *hdr, const char *name, const char **dtype, uint64_t range[2]) {
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, name);
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(t, "dtype");
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(t, "data_offsets");
    if (!cJSON_IsString(d) || !cJSON_IsArray(o) || cJSON_GetArraySize(o) != 2) return 0;
    *dtype = d->valuestring;
    range[0] = (uint64_t)cJSON_GetArrayItem(o, 0)->valuedouble;
    range[1] = (uint64_t)cJSON_GetArrayItem(o, 1)->valuedouble;
    return 1;
}

static int same_shape(const cJSON *hdr, const char *a, const char *b) {
    const cJSON *sa =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(hdr, a), "shape");
    const cJSON *sb =
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(hdr, b), "shape");
    char *ja = cJSON_PrintUnformatted(sa), *jb = cJSON_PrintUnformatted(sb);
    const int same = ja && jb && !strcmp(ja, jb);
    cJSON_free(ja);
    cJSON_free(jb);
    return same;
}

/* The bytes of tensors a and b (the header's) are equal: 1; differ: 0; an error: -1 (set). */
static int same_bytes(const char *path, const cJSON *hdr, const char *a, const char *b) {
    const char *da, *db;
    uint64_t ra[2], rb[2];
    if (!entry(hdr, a, &da, ra) || !entry(hdr, b, &db, rb)) return 0;
    if (strcmp(da, db) || ra[1] - ra[0] != rb[1] - rb[0] || !same_shape(hdr, a, b)) return 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        zero__error(ZERO_ERR_IO, "cannot open %s: %s", path, strerror(errno));
        return -1;
    }
    uint8_t len8[8];
    int result = zero__pread_all(fd, len8, 8, 0, path) ? -1 : 1;
    uint64_t base = 8;
    for (int i = 0; i < 8; i++) base += (uint64_t)len8[i] << (8 * i);
    enum { PIECE = 1 << 16 };
    uint8_t *x = malloc(2 * PIECE), *y = x + PIECE;
    if (!x) {
        zero__error(ZERO_ERR_OUT_OF_MEMORY, "%s: out of memory comparing %s with %s", path, a, b);
        result = -1;
    }
    for (uint64_t off = 0; result == 1 && off < ra[1] - ra[0]; off += PIECE) {
        const size_t n = (size_t)ZERO_MIN((uint64_t)PIECE, ra[1] - ra[0] - off);
        if (zero__pread_all(fd, x, n, (int64_t)(base + ra[0] + off), path) ||
            zero__pread_all(fd, y, n, (int64_t)(base + rb[0] + off), path))
            result = -1;
        else if (memcmp(x, y, n))
            result = 0;
    }
    free(x);
    close(fd);
    return result;
}

zero_status_t zero__gpt_names_of_file(const char *path, const zero_ckpt_name_map_t **names) {
    cJSON *hdr = NULL;
    zero_status_t st = zero__st_header_read(path, &hdr);
    if (st) return st;
    const int body = cJSON_GetObjectItemCaseSensitive(hdr, "wte.weight") == NULL &&
                     cJSON_GetObjectItemCaseSensitive(hdr, "transformer.wte.weight") != NULL;
    *names = body ? zero__gpt_names_transformer() : zero__gpt_names();
    const char *wte = body ? "transformer.wte.weight" : "wte.weight";
    if (cJSON_GetObjectItemCaseSensitive(hdr, "lm_head.weight")) {
        const int same = same_bytes(path, hdr, "lm_head.weight", wte);
        if (same < 0)
            st = ZERO_ERR_IO;
        else if (!same)
            st = zero__error(ZERO_ERR_MISMATCH,
                             "%s: lm_head.weight is not %s (dtype, shape or values differ): "
                             "zero's GPT computes its logits with the token embedding, as GPT-2 "
                             "does (expected a tied LM head, or none)",
                             path, wte);
    }
    cJSON_Delete(hdr);
    return st;
}
