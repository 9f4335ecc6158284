/* The bytes one token adds to decoded text when it sits in the middle of a sequence, for
 * byte-level consumers such as the structured-output grammar (sampler/grammar.c) that must know
 * exactly what text each token spells, including the raw bytes of a split UTF-8 character.
 *
 * This follows the decoder chain of tokenizer_decode.c stage by stage, but for one token, as
 * "not the first token" sees it, and without the repairs decode makes to invalid UTF-8:
 *   ByteLevel     each character back through the GPT-2 byte table (the raw token when one is
 *                 not in it, as decode does); everything after it sees one fused token
 *   ByteFallback  <0xNN> is the byte NN itself (decode turns an invalid run into U+FFFD; the
 *                 bytes are what the token means)
 *   Replace       applied to the token
 *   Fuse          later stages see one token, so their per-token edge effects vanish
 *   Strip         per token before any fusing; after fusing it trims only the ends of the whole
 *                 text, which a mid-sequence token never is
 *   Metaspace     the replacement character is a space (the first token's drop does not apply)
 *   no decoder    tokens are joined with " ", so a mid-sequence token brings its leading space */
#include <stdlib.h>
#include <string.h>

#include "tokenizer_internal.h"

/* One decoder stage over a whole token: src -> dst. Returns -1 on allocation failure. */
static int stage(const flint_tok_dec *dc, int fused, const char *s, size_t n, flint_tok_buf *dst) {
    flint_err err = {0};
    dst->n = 0;
    switch (dc->kind) {
    case FT_DEC_BYTELEVEL:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
            int b = l ? flint_tok_char_byte(cp) : -1;
            if (b < 0) {
                dst->n = 0;
                return flint_tok_buf_put(dst, s, n, &err);
            }
            char c = (char)b;
            if (flint_tok_buf_put(dst, &c, 1, &err)) return -1;
            i += (size_t)l;
        }
        return 0;
    case FT_DEC_BYTEFALLBACK: {
        int b = fused ? -1 : flint_tok_byte_token(s, n);
        if (b < 0) return flint_tok_buf_put(dst, s, n, &err);
        char c = (char)b;
        return flint_tok_buf_put(dst, &c, 1, &err);
    }
    case FT_DEC_REPLACE: {
        flint_tok_span *sp;
        size_t ns;
        if (flint_tok_pattern_find(&dc->pat, s, n, &sp, &ns, &err)) return -1;
        int rc = 0;
        for (size_t i = 0; i < ns && !rc; i++)
            rc = sp[i].match ? flint_tok_buf_put(dst, dc->content, dc->content_len, &err)
                             : flint_tok_buf_put(dst, s + sp[i].start, sp[i].end - sp[i].start, &err);
        free(sp);
        return rc;
    }
    case FT_DEC_STRIP: {
        size_t a = 0, z = n;
        if (!fused) {
            for (int i = 0; i < dc->start && a < n; i++) {
                uint32_t cp;
                int l = flint_tok_utf8_len((const unsigned char *)s + a, n - a, &cp);
                if (!l || cp != dc->strip_cp) break;
                a += (size_t)l;
            }
            for (int i = 0; i < dc->stop && z > a; i++) {
                size_t q = z;
                while (q > a && ((unsigned char)s[q - 1] & 0xC0) == 0x80) q--;
                if (q > a) q--;
                uint32_t cp;
                if (!flint_tok_utf8_len((const unsigned char *)s + q, z - q, &cp) || cp != dc->strip_cp) break;
                z = q;
            }
        }
        return flint_tok_buf_put(dst, s + a, z - a, &err);
    }
    case FT_DEC_METASPACE:
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int l = flint_tok_utf8_len((const unsigned char *)s + i, n - i, &cp);
            if (!l) l = 1, cp = 0xFFFD;
            int rc = cp == dc->rep_cp ? flint_tok_buf_put(dst, " ", 1, &err) : flint_tok_buf_put(dst, s + i, (size_t)l, &err);
            if (rc) return -1;
            i += (size_t)l;
        }
        return 0;
    case FT_DEC_FUSE:
        return flint_tok_buf_put(dst, s, n, &err);
    }
    FLINT_ASSERT(0);
    return -1;
}

int flint_tokenizer_token_bytes(const flint_tokenizer *t, int32_t id, char *out, size_t cap) {
    if (id < 0 || id >= t->n_ids) return -1;
    if (t->id_len[id] == UINT32_MAX) return 0; /* no token has this id: decode skips it */
    const char *s = t->pool + t->id_off[id];
    size_t n = t->id_len[id];
    flint_tok_buf a = {0}, b = {0};
    flint_err err = {0};
    int rc = 0;
    if (!t->has_decoder) {
        rc = flint_tok_buf_put(&a, " ", 1, &err) || flint_tok_buf_put(&a, s, n, &err);
    } else {
        rc = flint_tok_buf_put(&a, s, n, &err);
        int fused = 0;
        for (int k = 0; k < t->n_dec && !rc; k++) {
            rc = stage(&t->dec[k], fused, a.p ? a.p : "", a.n, &b);
            flint_tok_buf tmp = a;
            a = b, b = tmp;
            if (t->dec[k].kind == FT_DEC_BYTELEVEL || t->dec[k].kind == FT_DEC_FUSE) fused = 1;
        }
    }
    int len = rc ? -1 : (int)a.n;
    if (len > 0) memcpy(out, a.p, a.n < cap ? a.n : cap);
    flint_tok_buf_free(&a);
    flint_tok_buf_free(&b);
    return len;
}
