/* The grammar at run time: a byte-level pushdown automaton over the compiled nodes, per-request
 * states, advance, and the mask walk over the vocabulary trie.
 *
 * One step function defines the language; advance and the mask both go through it, so a token
 * is in the mask exactly when advance takes it. It works on one parse at a time and hands every
 * parse that survives the byte to a callback: nondeterminism (anyOf) is then plain recursion,
 * and the mask walk copies only the few frames a parse has. Every state the automaton can be in
 * after a byte still has a way to a complete value (liveness), so a mask is never empty: numbers
 * refuse a '.' once out of digits, a \u escape refuses a lone surrogate at its second digit,
 * strings refuse a character past maxLength, arrays and objects count items and keys. */
#include <string.h>

#include "sampler/grammar_internal.h"

#define GR_MAGIC 0x47524d31u

typedef struct ghdr {
    uint32_t magic;
    uint16_t n; /* parses */
    uint8_t finished; /* EOS taken */
    uint8_t pad_;
} ghdr;

enum { STR_OPEN, STR_BODY };
enum { NUM_START, NUM_MINUS, NUM_ZERO, NUM_INT, NUM_DOT, NUM_FRAC, NUM_E, NUM_ESIGN, NUM_EXP };
enum { OB_OPEN, OB_FIRST, OB_KEY, OB_COLON, OB_AFTER, OB_COMMA };
enum { AR_OPEN, AR_FIRST, AR_AFTER, AR_COMMA };

typedef void (*emit_fn)(void *ctx, gcfg *c);

static gcfg *cfg_at(const flint_grammar *g, const void *state, int i) {
    return (gcfg *)((char *)state + sizeof(ghdr) + (size_t)i * g->cfg_stride);
}

static void cfg_copy(gcfg *d, const gcfg *s) { memcpy(d, s, 8 + sizeof(gframe) * s->depth); }

static int cfg_equal(const gcfg *a, const gcfg *b) {
    return a->depth == b->depth && !memcmp(a->f, b->f, sizeof(gframe) * a->depth);
}

/* Free containers start at nesting level 1 when a schema asks for them; free values at 0. */
static int start_level(const flint_grammar *g, int node) {
    int t = g->node[node].type;
    return t == GN_FOBJ || t == GN_FARR;
}

static void push(const flint_grammar *g, gcfg *c, int node, int level, int phase) {
    FLINT_ASSERT(c->depth < g->max_depth && g->node[node].type != GN_ANYOF);
    gframe *f = &c->f[c->depth++];
    f->node = (uint16_t)node;
    f->phase = (uint8_t)phase;
    f->x = (uint8_t)level;
    f->a = f->b = 0;
}

static void step(const flint_grammar *g, gcfg *c, unsigned b, emit_fn emit, void *ctx);

/* Opens the value `node` on c. An anyOf opens each alternative on its own copy and finishes it
 * here (feeding b when b >= 0, else emitting); returns 0 then. Otherwise c holds the new frame and
 * 1 is returned: the caller feeds b or emits. */
static int open_value(const flint_grammar *g, gcfg *c, int node, int level, int b, emit_fn emit, void *ctx) {
    const gnode *n = &g->node[node];
    if (n->type != GN_ANYOF) {
        push(g, c, node, level, 0);
        return 1;
    }
    for (int i = 0; i < n->count; i++) {
        int a = g->alt[n->first + i];
        gcfg t;
        cfg_copy(&t, c);
        push(g, &t, a, start_level(g, a), 0);
        if (b >= 0) step(g, &t, (unsigned)b, emit, ctx);
        else emit(ctx, &t);
    }
    return 0;
}

static int hexval(unsigned b) {
    return b >= '0' && b <= '9' ? (int)b - '0' : b >= 'a' && b <= 'f' ? (int)b - 'a' + 10 : b >= 'A' && b <= 'F' ? (int)b - 'A' + 10 : -1;
}

/* -1: refused; 0: taken; 1: taken and the string is closed. */
static int string_byte(const gnode *n, gframe *f, unsigned b) {
    if (f->phase == STR_OPEN) {
        if (b != '"') return -1;
        f->phase = STR_BODY;
        return 0;
    }
    int x = f->x;
    if (x == GS_CLEAN) {
        if (b == '"') return f->a >= n->min ? 1 : -1;
        int u = b == '\\' ? GS_ESC : gr_utf8_next(GS_CLEAN, b);
        if (u < 0 || f->a >= n->max) return -1;
        f->a++; /* a character starts here: a lead byte or a backslash */
        f->x = (uint8_t)u;
        return 0;
    }
    if (x < GS_ESC) {
        int u = gr_utf8_next(x, b);
        if (u < 0) return -1;
        f->x = (uint8_t)u;
        return 0;
    }
    int h;
    switch (x) {
    case GS_ESC:
        if (b == 'u') {
            f->x = GS_U1;
            f->b = 0;
            return 0;
        }
        if (b == '"' || b == '\\' || b == '/' || b == 'b' || b == 'f' || b == 'n' || b == 'r' || b == 't') {
            f->x = GS_CLEAN;
            return 0;
        }
        return -1;
    case GS_U1:
    case GS_U2:
    case GS_U3:
    case GS_U4:
        if ((h = hexval(b)) < 0) return -1;
        h += f->b * 16;
        if (x == GS_U2 && h >= 0xDC && h <= 0xDF) return -1; /* a lone low surrogate */
        if (x == GS_U4) {
            if (h == 0) return -1; /* \u0000 would cut the string short for C readers */
            f->x = h >= 0xD800 && h <= 0xDBFF ? GS_LBS : GS_CLEAN;
            f->b = 0;
            return 0;
        }
        f->b = (uint16_t)h;
        f->x++;
        return 0;
    case GS_LBS:
        if (b != '\\') return -1;
        f->x = GS_LU;
        return 0;
    case GS_LU:
        if (b != 'u') return -1;
        f->x = GS_L1;
        f->b = 0;
        return 0;
    case GS_L1:
    case GS_L2:
    case GS_L3:
    case GS_L4:
        if ((h = hexval(b)) < 0) return -1;
        h += f->b * 16;
        if ((x == GS_L1 && h != 0xD) || (x == GS_L2 && (h < 0xDC || h > 0xDF))) return -1;
        if (x == GS_L4) {
            f->x = GS_CLEAN;
            f->b = 0;
            return 0;
        }
        f->b = (uint16_t)h;
        f->x++;
        return 0;
    }
    return -1;
}

enum { NUM_PASS = 2 }; /* the number is over; the byte belongs to the enclosing value */

static int number_byte(const gnode *n, gframe *f, unsigned b) {
    int d = b >= '0' && b <= '9';
    switch (f->phase) {
    case NUM_START:
        if (b == '-') {
            f->phase = NUM_MINUS;
            return 0;
        }
        /* fall through */
    case NUM_MINUS:
        if (!d) return -1;
        f->a = 1;
        f->phase = b == '0' ? NUM_ZERO : NUM_INT;
        return 0;
    case NUM_ZERO:
    case NUM_INT:
    case NUM_FRAC:
        if (d && f->phase != NUM_ZERO && f->a < GR_DIGITS) {
            f->a++;
            return 0;
        }
        if (!n->integer) {
            if (b == '.' && f->phase != NUM_FRAC && f->a < GR_DIGITS) {
                f->phase = NUM_DOT;
                return 0;
            }
            if (b == 'e' || b == 'E') {
                f->phase = NUM_E;
                return 0;
            }
        }
        return NUM_PASS;
    case NUM_DOT:
        if (!d) return -1;
        f->a++;
        f->phase = NUM_FRAC;
        return 0;
    case NUM_E:
        if (b == '+' || b == '-') {
            f->phase = NUM_ESIGN;
            return 0;
        }
        /* fall through */
    case NUM_ESIGN:
        if (!d) return -1;
        f->b = 1;
        f->phase = NUM_EXP;
        return 0;
    case NUM_EXP:
        if (d && f->b < GR_EXP_DIGITS) {
            f->b++;
            return 0;
        }
        return NUM_PASS;
    }
    return -1;
}

/* Properties a..last of an object may come next: up to and including the first required one. */
static uint64_t candidates(int a, int req, int np) {
    int last = req < np ? req : np - 1;
    uint64_t hi = last >= 63 ? ~0ULL : (1ULL << (last + 1)) - 1;
    return hi & ~((1ULL << a) - 1);
}

/* Feeds byte b to parse c (modified in place) and emits every parse that takes it. */
static void step(const flint_grammar *g, gcfg *c, unsigned b, emit_fn emit, void *ctx) {
    for (;;) {
        if (!c->depth) return; /* the value is complete: nothing may follow */
        gframe *f = &c->f[c->depth - 1];
        const gnode *n = &g->node[f->node];
        switch (n->type) {
        case GN_STRING: {
            int r = string_byte(n, f, b);
            if (r < 0) return;
            if (r == 1) c->depth--;
            emit(ctx, c);
            return;
        }
        case GN_NUMBER: {
            int r = number_byte(n, f, b);
            if (r < 0) return;
            if (r == NUM_PASS) {
                c->depth--;
                continue;
            }
            emit(ctx, c);
            return;
        }
        case GN_LIT: {
            const gtrie *t = g->trie + n->trie;
            int32_t k = t[f->a].child;
            while (k >= 0 && t[k].byte != b) k = t[k].sibling;
            if (k < 0) {
                if (t[f->a].term < 0) return;
                c->depth--; /* a number literal that could go on (enum [1, 12]) ends here */
                continue;
            }
            f->a = (uint16_t)k;
            if (t[k].term >= 0 && t[k].child < 0) c->depth--;
            emit(ctx, c);
            return;
        }
        case GN_OBJECT: {
            const gprop *P = g->prop + n->first;
            int np = n->count, a = f->a, req = a < np ? P[a].next_req : np;
            switch (f->phase) {
            case OB_OPEN:
                if (b != '{') return;
                f->phase = OB_FIRST;
                break;
            case OB_FIRST:
            case OB_AFTER:
                if (b == '}') {
                    if (req < np) return;
                    c->depth--;
                    break;
                }
                if (b != (f->phase == OB_FIRST ? '"' : ',') || a >= np) return;
                f->phase = f->phase == OB_FIRST ? OB_KEY : OB_COMMA;
                f->b = 0;
                break;
            case OB_COMMA:
                if (b != '"') return;
                f->phase = OB_KEY;
                break;
            case OB_KEY: {
                uint64_t cand = candidates(a, req, np);
                const gtrie *t = g->trie + n->trie;
                int32_t k = t[f->b].child;
                while (k >= 0 && !(t[k].byte == b && (t[k].props & cand))) k = t[k].sibling;
                if (k < 0) return;
                f->b = (uint16_t)k;
                if (t[k].term >= 0) {
                    f->a = (uint16_t)(t[k].term + 1);
                    f->b = 0;
                    f->phase = OB_COLON;
                }
                break;
            }
            case OB_COLON: {
                if (b != ':') return;
                f->phase = OB_AFTER;
                int child = P[f->a - 1].node;
                if (!open_value(g, c, child, start_level(g, child), -1, emit, ctx)) return;
                break;
            }
            }
            emit(ctx, c);
            return;
        }
        case GN_FOBJ:
            switch (f->phase) {
            case OB_OPEN:
                if (b != '{') return;
                f->phase = OB_FIRST;
                break;
            case OB_FIRST:
            case OB_AFTER:
                if (b == '}') {
                    c->depth--;
                    break;
                }
                if (f->phase == OB_AFTER) {
                    if (b != ',' || f->a >= GR_FREE_KEYS) return;
                    f->phase = OB_COMMA;
                    break;
                }
                /* the first key: */
                /* fall through */
            case OB_COMMA:
                if (b != '"') return;
                f->a++;
                f->phase = OB_COLON;
                push(g, c, g->free_string, 0, STR_BODY);
                break;
            case OB_COLON:
                if (b != ':') return;
                f->phase = OB_AFTER;
                push(g, c, g->any_value, f->x, 0);
                break;
            }
            emit(ctx, c);
            return;
        case GN_ARRAY:
        case GN_FARR: {
            uint32_t mn = n->type == GN_ARRAY ? n->min : 0, mx = n->type == GN_ARRAY ? n->max : GR_ARRAY_MAX;
            switch (f->phase) {
            case AR_OPEN:
                if (b != '[') return;
                f->phase = AR_FIRST;
                emit(ctx, c);
                return;
            case AR_FIRST:
            case AR_AFTER:
                if (b == ']') {
                    if (f->a < mn) return;
                    c->depth--;
                    emit(ctx, c);
                    return;
                }
                if (f->phase == AR_AFTER) {
                    if (b != ',' || f->a >= mx) return;
                    f->phase = AR_COMMA;
                    emit(ctx, c);
                    return;
                }
                if (mx == 0) return;
                /* b starts the first item: */
                /* fall through */
            case AR_COMMA: {
                f->phase = AR_AFTER;
                f->a++;
                int child = n->type == GN_ARRAY ? n->child : g->any_value;
                int level = n->type == GN_ARRAY ? start_level(g, child) : f->x;
                if (!open_value(g, c, child, level, (int)b, emit, ctx)) return;
                continue; /* the item takes b */
            }
            }
            return;
        }
        case GN_ANY: {
            int level = f->x, to, nl = 0;
            if (b == '{' || b == '[') {
                if (level >= GR_FREE_LEVELS) return;
                to = b == '{' ? g->free_obj : g->free_arr;
                nl = level + 1;
            } else if (b == '"') {
                to = g->free_string;
            } else if (b == '-' || (b >= '0' && b <= '9')) {
                to = g->free_number;
            } else if (b == 't' || b == 'f' || b == 'n') {
                to = g->free_lits;
            } else {
                return;
            }
            f->node = (uint16_t)to;
            f->phase = 0;
            f->x = (uint8_t)nl;
            f->a = f->b = 0;
            continue; /* the value becomes what b starts */
        }
        default:
            FLINT_ASSERT(0);
            return;
        }
    }
}

/* Whether c could stop here: every open frame is a number or literal that may end now. */
static int cfg_complete(const flint_grammar *g, const gcfg *c) {
    for (int i = c->depth - 1; i >= 0; i--) {
        const gframe *f = &c->f[i];
        const gnode *n = &g->node[f->node];
        if (n->type == GN_NUMBER) {
            if (f->phase != NUM_ZERO && f->phase != NUM_INT && f->phase != NUM_FRAC && f->phase != NUM_EXP) return 0;
        } else if (n->type == GN_LIT) {
            if (g->trie[n->trie + f->a].term < 0) return 0;
        } else {
            return 0;
        }
    }
    return 1;
}

/* ---- states ---- */

size_t flint_grammar_state_size(const flint_grammar *g) { return sizeof(ghdr) + GR_MAX_CFG * g->cfg_stride; }

/* Adds a parse unless an equal one is there; beyond GR_MAX_CFG the later ones are dropped (the
 * kept ones can all still complete, so this only narrows what may follow). */
static void add_cfg(const flint_grammar *g, void *state, const gcfg *c) {
    ghdr *h = state;
    for (int i = 0; i < h->n; i++)
        if (cfg_equal(cfg_at(g, state, i), c)) return;
    if (h->n >= GR_MAX_CFG) return;
    cfg_copy(cfg_at(g, state, h->n++), c);
}

static void add_emit(void *ctx, gcfg *c) {
    void **a = ctx;
    add_cfg(a[0], a[1], c);
}

void flint_grammar_state_init(const flint_grammar *g, void *state) {
    memset(state, 0, flint_grammar_state_size(g));
    ghdr *h = state;
    h->magic = GR_MAGIC;
    gcfg c;
    c.depth = 0;
    memset(c.pad_, 0, sizeof c.pad_);
    const void *a[2] = {g, state};
    if (open_value(g, &c, g->root, start_level(g, g->root), -1, add_emit, (void *)a)) add_cfg(g, state, &c);
}

int flint_grammar_complete(const flint_grammar *g, const void *state) {
    const ghdr *h = state;
    FLINT_ASSERT(h->magic == GR_MAGIC);
    if (h->finished) return 1;
    for (int i = 0; i < h->n; i++)
        if (cfg_complete(g, cfg_at(g, state, i))) return 1;
    return 0;
}

int flint_grammar_finished(const flint_grammar *g, const void *state) {
    const ghdr *h = state;
    FLINT_ASSERT(h->magic == GR_MAGIC);
    return h->finished;
}

typedef struct run_ctx {
    const flint_grammar *g;
    const uint8_t *s;
    int n, i;
    void *out;
} run_ctx;

static void run_emit(void *ctx, gcfg *c) {
    run_ctx *r = ctx;
    if (r->i == r->n) {
        add_cfg(r->g, r->out, c);
        return;
    }
    run_ctx next = *r;
    next.i++;
    step(r->g, c, r->s[r->i], run_emit, &next);
}

int flint_grammar_advance(const flint_grammar *g, void *state, int32_t token) {
    ghdr *h = state;
    FLINT_ASSERT(h->magic == GR_MAGIC);
    const flint_grammar_vocab *v = g->vocab;
    if (token == g->eos) {
        if (!flint_grammar_complete(g, state)) return -1;
        h->finished = 1;
        h->n = 0;
        return 0;
    }
    if (h->finished || token < 0 || token >= v->n_vocab || !v->in_trie[token]) return -1;
    /* parses are collected aside so that a refused token leaves the state as it was */
    _Alignas(8) char out[sizeof(ghdr) + GR_MAX_CFG * sizeof(gcfg)];
    size_t size = flint_grammar_state_size(g);
    memset(out, 0, size); /* unused bytes zero: equal states are equal bytes */
    ghdr *o = (ghdr *)out;
    *o = *h;
    o->n = 0;
    run_ctx r = {g, (const uint8_t *)v->pool + v->off[token], (int)v->len[token], 0, out};
    for (int i = 0; i < h->n; i++) {
        gcfg t;
        cfg_copy(&t, cfg_at(g, state, i));
        run_emit(&r, &t);
    }
    if (!o->n) return -1;
    memcpy(state, out, size);
    return 0;
}

/* ---- the mask: a walk over the token trie carrying each parse ---- */

typedef struct mctx {
    const flint_grammar *g;
    const flint_grammar_vocab *v;
    uint8_t *allowed;
    int n_vocab;
} mctx;

typedef struct dfs_ctx {
    mctx *m;
    int32_t node;
    int plain; /* see dfs_children */
    int depth; /* of the parse before the byte */
} dfs_ctx;

static void mark(mctx *m, const int32_t *ids, int32_t n) {
    for (int32_t k = 0; k < n; k++)
        if (ids[k] < m->n_vocab) m->allowed[ids[k]] = 1;
}

static void dfs_children(mctx *m, int32_t node, const gcfg *s, int plain);

/* A string body frame's sub-state, or -1 when the top frame is something else. */
static int string_x(const flint_grammar *g, const gcfg *c) {
    if (!c->depth) return -1;
    const gframe *f = &c->f[c->depth - 1];
    return g->node[f->node].type == GN_STRING && f->phase == STR_BODY ? f->x : -1;
}

static void dfs_emit(void *ctx, gcfg *c) {
    dfs_ctx *d = ctx;
    mctx *m = d->m;
    const flint_grammar_vocab *v = m->v;
    mark(m, v->order + v->tok_begin[d->node], v->tok_begin[d->node + 1] - v->tok_begin[d->node]);
    if (d->node + 1 < v->end[d->node]) {
        /* still plain text of the string the walk started in: the same frame, no escape */
        int x = string_x(m->g, c);
        dfs_children(m, d->node, c, d->plain && c->depth == d->depth && x >= 0 && x < GS_ESC);
    }
}

/* Inside a string at a character boundary with room for `room` more characters, a subtree whose
 * tokens are all plain text is taken whole when its longest fits. At the root every plain token
 * that fits is taken at once from the by-length list; the walk then goes only into subtrees with
 * some other token (a quote, a backslash, a control byte, invalid UTF-8), and while its path is
 * still plain text of that same string (`plain`), the plain subtrees it meets there were already
 * decided by the list and are skipped. */
static void dfs_children(mctx *m, int32_t node, const gcfg *s, int plain) {
    const flint_grammar_vocab *v = m->v;
    int room = -1;
    if (string_x(m->g, s) == GS_CLEAN) {
        const gframe *f = &s->f[s->depth - 1];
        room = (int)(m->g->node[f->node].max - f->a);
    }
    if (room >= 0 && node == 0) {
        plain = 1;
        if (room >= v->plain_max) {
            size_t nv = (size_t)(m->n_vocab < v->n_vocab ? m->n_vocab : v->n_vocab), i = 0;
            for (; i + 8 <= nv; i += 8) { /* a word at a time: -O2 does not vectorise this */
                uint64_t a, b;
                memcpy(&a, m->allowed + i, 8);
                memcpy(&b, v->plain_mask + i, 8);
                a |= b;
                memcpy(m->allowed + i, &a, 8);
            }
            for (; i < nv; i++) m->allowed[i] |= v->plain_mask[i];
        } else {
            mark(m, v->plain_order, v->plain_le[room]);
        }
    }
    for (int32_t c = node + 1, e = v->end[node]; c < e; c = v->end[c]) {
        if (room >= 0 && v->str_max[c] != 0xFF) {
            if (plain) continue;
            if (v->str_max[c] <= room) {
                mark(m, v->order + v->tok_begin[c], v->tok_begin[v->end[c]] - v->tok_begin[c]);
                continue;
            }
        }
        gcfg t;
        cfg_copy(&t, s);
        dfs_ctx d = {m, c, plain, s->depth};
        step(m->g, &t, v->byte[c], dfs_emit, &d);
    }
}

int flint_grammar_mask(const flint_grammar *g, const void *state, uint8_t *allowed, int n_vocab) {
    const ghdr *h = state;
    FLINT_ASSERT(h->magic == GR_MAGIC && n_vocab >= 0);
    memset(allowed, 0, (size_t)n_vocab);
    mctx m = {g, g->vocab, allowed, n_vocab};
    if (!h->finished)
        for (int i = 0; i < h->n; i++) dfs_children(&m, 0, cfg_at(g, state, i), 0);
    /* EOS only where the value is complete, whatever its bytes (a non-special EOS is in the trie) */
    if (g->eos < n_vocab) allowed[g->eos] = (uint8_t)flint_grammar_complete(g, state);
    /* bytes are 0/1: eight at a time, summed by one multiply */
    size_t i = 0, count = 0;
    for (; i + 8 <= (size_t)n_vocab; i += 8) {
        uint64_t w;
        memcpy(&w, allowed + i, 8);
        count += (w * 0x0101010101010101ull) >> 56;
    }
    for (; i < (size_t)n_vocab; i++) count += allowed[i];
    return (int)count;
}
