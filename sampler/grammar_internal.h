/* What the grammar files share and nothing else includes. Split by concern:
 *   grammar_vocab.c    the token trie of a vocabulary (built once per tokenizer)
 *   grammar_compile.c  response_format / JSON Schema -> the node graph below
 *   grammar.c          the byte automaton, states, advance and the mask walk
 *
 * The automaton is a pushdown machine over bytes with one frame per open JSON value. A frame is
 * 8 bytes and a parse ("configuration") is a small stack of them, so states copy with memcpy
 * and compare with memcmp. Nodes are the compiled schema; a frame points at its node. */
#ifndef FLINT_SAMPLER_GRAMMAR_INTERNAL_H
#define FLINT_SAMPLER_GRAMMAR_INTERNAL_H

#include <stdint.h>

#include "sampler/grammar.h"

/* ---- limits (documented in grammar.h) ---- */
#define GR_STRING_MAX 64  /* default maxLength */
#define GR_ARRAY_MAX 8    /* default maxItems */
#define GR_FREE_KEYS 16   /* keys of a free-form object */
#define GR_FREE_LEVELS 16 /* nested containers of a free-form value */
#define GR_DIGITS 15      /* digits before the exponent */
#define GR_EXP_DIGITS 2
#define GR_MAX_DEPTH 64   /* frames in one parse */
#define GR_MAX_CFG 16     /* parses kept in a state */
#define GR_MAX_PROPS 64   /* properties of one object (a 64-bit set) */
#define GR_MAX_SCHEMA_DEPTH 32

/* ---- the vocabulary trie ----
 * Nodes in preorder: node 0 is the root (empty prefix); the children of node i are i+1, then
 * end[i+1], ... up to end[i]. Token ids sit in `order` in the same preorder, so the tokens of a
 * node are order[tok_begin[i] .. tok_begin[i+1]) and those of its whole subtree
 * order[tok_begin[i] .. tok_begin[end[i]]). */
struct flint_grammar_vocab {
    int n_vocab;
    char *pool; /* token bytes */
    uint32_t *off, *len; /* per id; len 0: not in the trie */
    uint8_t *special;
    uint8_t *in_trie; /* the mask may allow it (not special, not empty, usable) */
    int32_t n_nodes;
    uint8_t *byte;
    int32_t *end;
    int32_t *tok_begin; /* n_nodes + 1 */
    /* With the string automaton at a character boundary before node i's byte: the most
     * characters any token of i's subtree adds from there when every one of them is plain
     * string text (no ", \ or control byte, well-formed UTF-8, maybe ending inside a character);
     * 0xFF when some is not. Lets the mask take a whole subtree inside a string at once. */
    uint8_t *str_max;
    /* Tokens that are plain string text from a character boundary (as str_max), by the number of
     * characters they add: plain_order[0 .. plain_le[k]) add at most k. plain_mask is the same
     * set as a byte per id, for a string with room for all of them (plain_max characters). */
    int32_t *plain_order;
    int32_t plain_le[256];
    int plain_max;
    uint8_t *plain_mask;
    int32_t *order;
    int32_t n_order;
    int all_bytes;     /* every byte 0..255 is a token of its own */
    int missing_ascii; /* a printable ASCII byte that is no token of its own, -1 when none */
    int max_len;
};

/* ---- compiled schema ---- */
enum { GN_STRING, GN_NUMBER, GN_LIT, GN_OBJECT, GN_ARRAY, GN_FOBJ, GN_FARR, GN_ANY, GN_ANYOF };

typedef struct gnode {
    uint8_t type;
    uint8_t integer; /* GN_NUMBER */
    uint32_t min, max; /* GN_STRING characters, GN_ARRAY items */
    int32_t child;     /* GN_ARRAY item node */
    int32_t first, count; /* GN_OBJECT: g->prop; GN_LIT and GN_OBJECT keys: g->trie base in
                             `trie`; GN_ANYOF: g->alt */
    int32_t trie;      /* trie base (GN_LIT, GN_OBJECT) */
    int depth;         /* frames the value needs at most */
} gnode;

typedef struct gprop {
    int32_t node;
    uint8_t required;
    uint16_t next_req; /* first required property at this index or later; count when none */
} gprop;

/* Byte tries of literals (enum/const/true/false/null) and of object keys, indices relative to
 * the owner's base. term: for literals 1 where a value ends; for keys the property index. */
typedef struct gtrie {
    int32_t child, sibling; /* -1: none */
    int32_t term;           /* -1: nothing ends here */
    uint8_t byte;
    uint64_t props; /* keys: properties in this subtree */
} gtrie;

struct flint_grammar {
    const flint_grammar_vocab *vocab;
    flint_grammar_vocab *owned; /* flint_grammar_compile's private vocab */
    int32_t eos;
    gnode *node;
    int n_node, cap_node;
    gprop *prop;
    int n_prop, cap_prop;
    int32_t *alt;
    int n_alt, cap_alt;
    gtrie *trie;
    int n_trie, cap_trie;
    int32_t root;
    int32_t any_value, free_string, free_number, free_lits, free_obj, free_arr; /* -1 until used */
    int max_depth;     /* frames per parse */
    size_t cfg_stride; /* bytes per parse in a state */
};

/* ---- frames ---- */
typedef struct gframe {
    uint16_t node;
    uint8_t phase;
    uint8_t x; /* string: UTF-8 / escape state; free containers and ANY: nesting level */
    uint16_t a, b;
} gframe;

typedef struct gcfg {
    uint16_t depth;
    uint16_t pad_[3];
    gframe f[GR_MAX_DEPTH];
} gcfg;

/* String sub-states (gframe.x of a GN_STRING frame in its body). 0..7 are UTF-8 states, shared
 * with the vocabulary's plain-text summary. */
enum {
    GS_CLEAN = 0,
    GS_NEED1, GS_NEED2, GS_NEED3, /* continuation bytes 80..BF still due */
    GS_E0, GS_ED, GS_F0, GS_F4,   /* the first continuation byte is restricted */
    GS_ESC,                        /* after a backslash */
    GS_U1, GS_U2, GS_U3, GS_U4,    /* \u: expecting hex digit 1..4 */
    GS_LBS, GS_LU,                 /* after a high surrogate: expecting \ then u */
    GS_L1, GS_L2, GS_L3, GS_L4,    /* the low surrogate's hex digits */
};

/* The UTF-8 part of the string automaton: the state after byte b in state u (u in 0..7), -1 when
 * b cannot come there. In GS_CLEAN, ", \ and control bytes are not plain text: -1 too. */
static inline int gr_utf8_next(int u, unsigned b) {
    switch (u) {
    case GS_CLEAN:
        if (b < 0x20 || b == '"' || b == '\\') return -1;
        if (b < 0x80) return GS_CLEAN;
        if (b >= 0xC2 && b <= 0xDF) return GS_NEED1;
        if (b == 0xE0) return GS_E0;
        if (b == 0xED) return GS_ED;
        if (b >= 0xE1 && b <= 0xEF) return GS_NEED2;
        if (b == 0xF0) return GS_F0;
        if (b >= 0xF1 && b <= 0xF3) return GS_NEED3;
        if (b == 0xF4) return GS_F4;
        return -1;
    case GS_NEED1: return b >= 0x80 && b <= 0xBF ? GS_CLEAN : -1;
    case GS_NEED2: return b >= 0x80 && b <= 0xBF ? GS_NEED1 : -1;
    case GS_NEED3: return b >= 0x80 && b <= 0xBF ? GS_NEED2 : -1;
    case GS_E0: return b >= 0xA0 && b <= 0xBF ? GS_NEED1 : -1;
    case GS_ED: return b >= 0x80 && b <= 0x9F ? GS_NEED1 : -1;
    case GS_F0: return b >= 0x90 && b <= 0xBF ? GS_NEED2 : -1;
    case GS_F4: return b >= 0x80 && b <= 0x8F ? GS_NEED2 : -1;
    }
    return -1;
}

/* grammar_vocab.c: whether s can be spelled with the vocabulary's tokens. */
int gr_vocab_can_spell(const flint_grammar_vocab *v, const char *s, size_t n);

#endif
