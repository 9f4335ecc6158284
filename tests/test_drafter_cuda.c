/* The CUDA drafter (drafter/forward_cuda.cu) against the fp32 CPU drafter and the PyTorch reference
 * (issue #7). Label cuda: run on the GPU machine, from the repository root:
 *     build-h2/tests/test_drafter_cuda "$PWD" [--no-lab]
 *
 *  0. the drafter's own kernels against C references (bf16 rounding, the Markov gather with the
 *     confidence head, the reduced-vocabulary scatter), and the refusals at open (a CPU target,
 *     tensor parallelism, an unknown device);
 *  1. flint-tiny + flint-tiny-dspark, the target on CUDA, one CPU and one CUDA drafter on it, the
 *     same taps encoded into both (3 GSM8K prompts plus 40 greedy target tokens each); 24 requests
 *     greedy, then sampled at temperature 1;
 *  2. the golden fixtures of tools/make_drafter_golden.py (dense, speculators full, fill-in and
 *     reduced vocabulary): the CUDA drafter against PyTorch's fp32 logits, confidences and greedy
 *     drafts (taps from the CPU target, which matches transformers to 1e-6, so only the drafter
 *     differs);
 *  3. batch invariance: 32 mixed requests (sequences, positions, draft counts, greedy and sampled)
 *     in one call, then each alone: tokens, logits, base logits, confidences and q bit-identical;
 *     a prompt re-encoded in chunks of 5 rows leaves the drafts bit-identical;
 *  4. timing of draft calls for 1, 8 and 64 requests (printed, not asserted; --no-lab skips it);
 *  5. captured graphs == eager launches, bit for bit: two CUDA drafters on one target, one with
 *     enforce_eager, fed the same encodes (row counts that pad, host taps and device taps with
 *     source rows, rows of several sequences per call) and the same draft calls (1, 3, 8, 13 and
 *     32 requests, 1..7 drafts mixed, greedy and sampled, contexts in the 512 and 1024 attention
 *     buckets, q to the host, on the device or not at all); the graph stats are printed.
 *
 * Tolerances (the CUDA path rounds activations to bf16 once per GEMM input, stores the context
 * K/V in bf16, and shares the target's bf16 LM head; the CPU is fp32 throughout):
 *  - logits (base U and Markov-corrected L), per row: max |gpu - ref| <= 0.05 max |ref| + 0.05,
 *    the bound of tests/test_target_cuda.c for the same rounding (a wrong kernel misses by O(1));
 *  - the Markov bias itself, (L - U) against the reference's (L - U) along the same chain:
 *    1e-4 (1 + max |L|): W1 and W2 are bf16 in the checkpoints, so only fp32 summation order and
 *    the rounding of L differ; this pins the Markov loop (previous token, slot, vocabulary map);
 *  - confidence: |gpu - ref| <= 0.05 (sigmoid' <= 1/4: a head logit within 0.2);
 *  - greedy tokens: identical wherever the reference's top-1 exceeds its value at the GPU's token
 *    by more than twice the row's measured error (a flip needs a margin within 2 max |diff|);
 *    the others are counted and printed as near-ties; after a flip the chains differ, so a
 *    request's later slots are not compared;
 *  - sampled drafts: the GPU's q_k equals softmax(L_k / T) of its own logits (1e-5) and x_k equals
 *    flint_sample_draft(q_k, seed, position) on the host in >= 99% of draws (a draw may differ
 *    only where u falls within rounding of a cumulative boundary); against the CPU drafter, >= 80%
 *    of slots reached with equal prefixes draw the same token (the distributions differ by the
 *    bf16 rounding above); the exact figures are printed. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "core/json.h"
#include "core/tokenizer.h"
#include "drafter/drafter.h"
#include "drafter/drafter_internal.h"
#include "sampler/sampler.h"
#include "sampler/sampler_cuda.h"
#include "target/ops_cuda.h"
#include "target/target.h"
#include "cuda_check.h"
#include "test.h"

#define LOGIT_REL 0.05
#define LOGIT_ABS 0.05
#define BIAS_REL 1e-4
#define CONF_TOL 0.05
#define Q_TOL 1e-5

static const char *SRC = FLINT_SOURCE_DIR;
static int lab = 1;


static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static uint64_t rs = 0x2545F4914F6CDD1Dull;
static uint32_t rnd(void) {
    rs ^= rs << 13;
    rs ^= rs >> 7;
    rs ^= rs << 17;
    return (uint32_t)(rs >> 11);
}
static float urand(float lo, float hi) { return lo + (hi - lo) * (float)(rnd() % 1000000) / 1e6f; }

static void *dalloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    return p;
}

/* ==== 0. kernels against C references, refusals ==== */

static void test_kernels(void) {
    /* to_bf16: bits equal to the host rounding, specials included */
    enum { N = 4099 };
    float *h = malloc(sizeof(float) * N);
    uint16_t *got = malloc(sizeof(uint16_t) * N);
    for (int i = 0; i < N; i++) h[i] = urand(-3, 3) * powf(2.0f, (float)((int)(rnd() % 40) - 20));
    h[0] = 0.0f, h[1] = -0.0f, h[2] = INFINITY, h[3] = -INFINITY, h[4] = NAN, h[5] = 1.00390625f; /* a tie */
    float *din = dalloc(sizeof(float) * N);
    uint16_t *dout = dalloc(sizeof(uint16_t) * N);
    CK(cudaMemcpy(din, h, sizeof(float) * N, cudaMemcpyHostToDevice));
    flint_drafter_cuda_to_bf16(dout, din, N, NULL);
    CK(cudaMemcpy(got, dout, sizeof(uint16_t) * N, cudaMemcpyDeviceToHost));
    int bad = 0;
    for (int i = 0; i < N; i++) bad += got[i] != flint_bf16_from_f32(h[i]);
    CHECKF(bad == 0, "to_bf16: %d of %d values round differently from flint_bf16_from_f32", bad, N);
    cudaFree(din), cudaFree(dout), free(h), free(got);

    /* markov_conf: e = W1[prev], conf = sigmoid((w.h + b) + w.e); both prev sources, with and
     * without the Markov part of the head, and without a Markov head */
    enum { NR = 37, V = 301, H = 72, KD = 5 };
    for (int variant = 0; variant < 4; variant++) {
        int r = variant == 3 ? 0 : 24, conf_markov = variant != 1, use_prev = variant == 2;
        size_t nw1 = (size_t)V * (r ? r : 1);
        uint16_t *w1 = malloc(sizeof(uint16_t) * nw1), *hf = malloc(sizeof(uint16_t) * NR * 3 * H);
        float *cw = malloc(sizeof(float) * (H + 24)), cb = urand(-1, 1);
        int32_t anchor[NR], prev[NR];
        for (size_t i = 0; i < nw1; i++) w1[i] = flint_bf16_from_f32(urand(-1, 1));
        for (int i = 0; i < NR * 3 * H; i++) hf[i] = flint_bf16_from_f32(urand(-2, 2));
        for (int i = 0; i < H + 24; i++) cw[i] = urand(-0.3f, 0.3f);
        for (int i = 0; i < NR; i++) anchor[i] = (int32_t)(rnd() % V), prev[i] = (int32_t)(rnd() % V);
        uint16_t *dw1 = dalloc(sizeof(uint16_t) * nw1), *dhf = dalloc(sizeof(uint16_t) * NR * 3 * H);
        uint16_t *de = dalloc(sizeof(uint16_t) * NR * 24);
        float *dcw = dalloc(sizeof(float) * (H + 24)), *dconf = dalloc(sizeof(float) * NR * KD);
        int32_t *da = dalloc(sizeof anchor), *dp = dalloc(sizeof prev);
        CK(cudaMemcpy(dw1, w1, sizeof(uint16_t) * nw1, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dhf, hf, sizeof(uint16_t) * NR * 3 * H, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dcw, cw, sizeof(float) * (H + 24), cudaMemcpyHostToDevice));
        CK(cudaMemcpy(da, anchor, sizeof anchor, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dp, prev, sizeof prev, cudaMemcpyHostToDevice));
        CK(cudaMemset(dconf, 0xff, sizeof(float) * NR * KD));
        int k = 3, slot = 2; /* output slot k; hfin rows are row `slot` of blocks of 3 rows (ld 3H) */
        flint_drafter_cuda_markov_conf(de, r, dw1, da, use_prev ? dp : NULL, dconf, KD, k, dcw, cb, conf_markov,
                                       dhf + (size_t)slot * H, (size_t)3 * H, H, NR, NULL);
        uint16_t e[NR * 24];
        float conf[NR * KD];
        CK(cudaMemcpy(e, de, sizeof(uint16_t) * NR * (r ? r : 1), cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(conf, dconf, sizeof conf, cudaMemcpyDeviceToHost));
        int bad_e = 0;
        double worst = 0;
        for (int i = 0; i < NR; i++) {
            int32_t pv = use_prev ? prev[i] : anchor[i];
            for (int j = 0; j < r; j++) bad_e += e[i * r + j] != w1[(size_t)pv * r + j];
            double z = cb, z2 = 0;
            for (int x = 0; x < H; x++) z += (double)cw[x] * flint_bf16_to_f32(hf[(size_t)i * 3 * H + slot * H + x]);
            if (conf_markov)
                for (int j = 0; j < r; j++) z2 += (double)cw[H + j] * flint_bf16_to_f32(w1[(size_t)pv * r + j]);
            double want = 1.0 / (1.0 + exp(-(z + z2)));
            double err = fabs(conf[i * KD + k] - want);
            if (!(err <= worst)) worst = err; /* NaN counts */
        }
        CHECKF(bad_e == 0 && worst <= 1e-5, "markov_conf variant %d: %d gathered values differ, confidence error %.2e",
               variant, bad_e, worst);
        cudaFree(dw1), cudaFree(dhf), cudaFree(de), cudaFree(dcw), cudaFree(dconf), cudaFree(da), cudaFree(dp);
        free(w1), free(hf), free(cw);
    }

    /* markov_bias: L += W2 W1[prev] in place, the sum over j in order with fmaf: the C loop below
     * gives the same bits. Ranks with and without the 16-byte path, both prev sources, requests
     * over two blocks of 32, a pitch wider than the vocabulary; columns past Vd untouched. Then
     * the same with the confidence head in the launch (one block per request beside the bias). */
    for (int variant = 0; variant < 3; variant++) {
        const int r = variant == 1 ? 20 : 64, use_prev = variant == 2, NQ = variant == 0 ? 45 : 3;
        /* W1 rows, W2 rows (the draft vocabulary), L pitch; variant 0 puts 2 requests in a block */
        const int VB = 1030, VL = variant == 0 ? 4000 : 1000, LDB = variant == 0 ? 4100 : 1100;
        uint16_t *w1 = malloc(sizeof(uint16_t) * VB * r), *w2 = malloc(sizeof(uint16_t) * VL * r);
        float *L = malloc(sizeof(float) * NQ * LDB), *want = malloc(sizeof(float) * NQ * LDB);
        float *gotL = malloc(sizeof(float) * NQ * LDB);
        int32_t anc[45], prv[45];
        for (int i = 0; i < VB * r; i++) w1[i] = flint_bf16_from_f32(urand(-1, 1));
        for (int i = 0; i < VL * r; i++) w2[i] = flint_bf16_from_f32(urand(-1, 1));
        for (int i = 0; i < NQ * LDB; i++) L[i] = urand(-5, 5);
        for (int i = 0; i < NQ; i++) anc[i] = (int32_t)(rnd() % VB), prv[i] = (int32_t)(rnd() % VB);
        memcpy(want, L, sizeof(float) * NQ * LDB);
        for (int i = 0; i < NQ; i++) {
            const int32_t pv = use_prev ? prv[i] : anc[i];
            for (int v = 0; v < VL; v++) {
                float acc = 0.0f;
                for (int j = 0; j < r; j++)
                    acc = fmaf(flint_bf16_to_f32(w1[(size_t)pv * r + j]), flint_bf16_to_f32(w2[(size_t)v * r + j]), acc);
                want[(size_t)i * LDB + v] = L[(size_t)i * LDB + v] + acc;
            }
        }
        uint16_t *dw1 = dalloc(sizeof(uint16_t) * VB * r), *dw2 = dalloc(sizeof(uint16_t) * VL * r);
        float *dL = dalloc(sizeof(float) * NQ * LDB);
        int32_t *da = dalloc(sizeof anc), *dp = dalloc(sizeof prv);
        CK(cudaMemcpy(dw1, w1, sizeof(uint16_t) * VB * r, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dw2, w2, sizeof(uint16_t) * VL * r, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dL, L, sizeof(float) * NQ * LDB, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(da, anc, sizeof anc, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dp, prv, sizeof prv, cudaMemcpyHostToDevice));
        flint_drafter_cuda_markov_bias(dL, LDB, dw2, dw1, da, use_prev ? dp : NULL, r, VL, NQ, NULL, NULL, NULL);
        CK(cudaMemcpy(gotL, dL, sizeof(float) * NQ * LDB, cudaMemcpyDeviceToHost));
        int badL = 0;
        for (int i = 0; i < NQ * LDB; i++) badL += memcmp(&gotL[i], &want[i], sizeof(float)) != 0;
        CHECKF(badL == 0, "markov_bias variant %d (r %d, %d requests): %d of %d values differ from the C loop", variant,
               r, NQ, badL, NQ * LDB);
        /* with the confidence head in the same launch (the drafter's Markov step): the same bias,
         * and the confidences markov_conf computes, bit for bit */
        enum { HC = 72, KC = 5 };
        uint16_t *hf = malloc(sizeof(uint16_t) * NQ * HC);
        float *cw = malloc(sizeof(float) * (HC + r)), cb = urand(-1, 1), c1[45 * KC], c2[45 * KC];
        for (int i = 0; i < NQ * HC; i++) hf[i] = flint_bf16_from_f32(urand(-2, 2));
        for (int i = 0; i < HC + r; i++) cw[i] = urand(-0.3f, 0.3f);
        uint16_t *dhf = dalloc(sizeof(uint16_t) * NQ * HC);
        float *dcw = dalloc(sizeof(float) * (HC + r)), *dc1 = dalloc(sizeof(float) * NQ * KC);
        float *dc2 = dalloc(sizeof(float) * NQ * KC);
        CK(cudaMemcpy(dhf, hf, sizeof(uint16_t) * NQ * HC, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dcw, cw, sizeof(float) * (HC + r), cudaMemcpyHostToDevice));
        CK(cudaMemset(dc1, 0xff, sizeof(float) * NQ * KC));
        CK(cudaMemset(dc2, 0xfe, sizeof(float) * NQ * KC));
        CK(cudaMemcpy(dL, L, sizeof(float) * NQ * LDB, cudaMemcpyHostToDevice));
        const int kc = 2, cm = variant != 1;
        flint_drafter_cuda_markov_conf(NULL, r, dw1, da, use_prev ? dp : NULL, dc1, KC, kc, dcw, cb, cm, dhf, HC, HC, NQ,
                                       NULL);
        const flint_drafter_conf_args ca = {dc2, KC, kc, dcw, cb, cm, dhf, HC, HC};
        flint_drafter_cuda_markov_bias(dL, LDB, dw2, dw1, da, use_prev ? dp : NULL, r, VL, NQ, &ca, NULL, NULL);
        CK(cudaMemcpy(gotL, dL, sizeof(float) * NQ * LDB, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(c1, dc1, sizeof(float) * NQ * KC, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(c2, dc2, sizeof(float) * NQ * KC, cudaMemcpyDeviceToHost));
        int badF = 0, badC = 0;
        for (int i = 0; i < NQ * LDB; i++) badF += memcmp(&gotL[i], &want[i], sizeof(float)) != 0;
        for (int i = 0; i < NQ; i++) badC += memcmp(&c1[i * KC + kc], &c2[i * KC + kc], sizeof(float)) != 0;
        CHECKF(badF == 0 && badC == 0, "markov_bias with the confidence head, variant %d: %d bias values, %d "
               "confidences differ", variant, badF, badC);
        cudaFree(dhf), cudaFree(dcw), cudaFree(dc1), cudaFree(dc2), free(hf), free(cw);
        /* with the greedy rows' argmax candidates: the same bias; each 32 entries' candidate the
         * argmax of the stored values (largest, lowest index, NaN never: -inf and INT_MAX when all
         * are NaN); the draft sampler's greedy tokens from the candidates those it takes from the
         * rows. Rows 0-2 made hard: +inf at 900 and 7 (token 7), all NaN (token 0), all -inf (0). */
        {
            const int nc = (VL + 31) / 32;
            float *L2 = malloc(sizeof(float) * NQ * LDB), *exp2 = malloc(sizeof(float) * NQ * LDB);
            int32_t *cand = malloc(sizeof(int32_t) * 2 * NQ * nc), t1[45], t2[45];
            memcpy(L2, L, sizeof(float) * NQ * LDB);
            memcpy(exp2, want, sizeof(float) * NQ * LDB);
            L2[900] = L2[7] = exp2[900] = exp2[7] = INFINITY;
            for (int v = 0; v < VL; v++) {
                L2[LDB + v] = exp2[LDB + v] = NAN;
                L2[2 * LDB + v] = exp2[2 * LDB + v] = -INFINITY;
            }
            int32_t *dcand = dalloc(sizeof(int32_t) * 2 * NQ * nc), *dt1 = dalloc(sizeof t1), *dt2 = dalloc(sizeof t2);
            float temp0[45] = {0}, *dT = dalloc(sizeof temp0);
            uint64_t sd[45];
            int64_t ps[45];
            for (int i = 0; i < NQ; i++) sd[i] = 11 + i, ps[i] = 100 + i;
            uint64_t *dsd = dalloc(sizeof sd);
            int64_t *dps = dalloc(sizeof ps);
            CK(cudaMemcpy(dT, temp0, sizeof temp0, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dsd, sd, sizeof sd, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dps, ps, sizeof ps, cudaMemcpyHostToDevice));
            CK(cudaMemcpy(dL, L2, sizeof(float) * NQ * LDB, cudaMemcpyHostToDevice));
            flint_drafter_cuda_markov_bias(dL, LDB, dw2, dw1, da, use_prev ? dp : NULL, r, VL, NQ, NULL, dcand, NULL);
            flint_cuda_draft_sample_cand(dt1, NULL, 0, dL, LDB, NQ, VL, dT, NULL, dsd, dps, dcand, nc, NULL, NULL);
            flint_cuda_draft_sample(dt2, NULL, 0, dL, LDB, NQ, VL, dT, NULL, dsd, dps, NULL, NULL);
            CK(cudaMemcpy(gotL, dL, sizeof(float) * NQ * LDB, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(cand, dcand, sizeof(int32_t) * 2 * NQ * nc, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(t1, dt1, sizeof(int32_t) * NQ, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(t2, dt2, sizeof(int32_t) * NQ, cudaMemcpyDeviceToHost));
            int badV = 0, badK = 0, badT = 0;
            for (int i = 0; i < NQ * LDB; i++) /* NaN's bits: the GPU's canonical one */
                badV += isnan(exp2[i]) ? !isnan(gotL[i]) : memcmp(&gotL[i], &exp2[i], sizeof(float)) != 0;
            for (int i = 0; i < NQ; i++) {
                for (int q = 0; q < nc; q++) {
                    float bv = -INFINITY;
                    int bi = 2147483647;
                    for (int v = 32 * q; v < VL && v < 32 * q + 32; v++) {
                        const float y = gotL[(size_t)i * LDB + v];
                        if (y == y && (y > bv || (y == bv && v < bi))) bv = y, bi = v;
                    }
                    float cv;
                    memcpy(&cv, &cand[2 * ((size_t)i * nc + q)], sizeof cv);
                    badK += memcmp(&cv, &bv, sizeof cv) != 0 || cand[2 * ((size_t)i * nc + q) + 1] != bi;
                }
                badT += t1[i] != t2[i];
            }
            CHECKF(badV == 0 && badK == 0 && badT == 0 && t1[0] == 7 && t1[1] == 0 && t1[2] == 0,
                   "markov_bias candidates, variant %d: %d bias values, %d candidates, %d greedy tokens differ; "
                   "hard rows' tokens %d %d %d (want 7 0 0)", variant, badV, badK, badT, t1[0], t1[1], t1[2]);
            cudaFree(dcand), cudaFree(dt1), cudaFree(dt2), cudaFree(dT), cudaFree(dsd), cudaFree(dps);
            free(L2), free(exp2), free(cand);
        }
        cudaFree(dw1), cudaFree(dw2), cudaFree(dL), cudaFree(da), cudaFree(dp);
        free(w1), free(w2), free(L), free(want), free(gotL);
    }

    /* scatter_vocab: target ids from a reduced vocabulary, -inf elsewhere */
    enum { VT = 1000, VD = 611, ROWS = 9, LD = 700 };
    int32_t *t2d = malloc(sizeof(int32_t) * VT);
    float *in = malloc(sizeof(float) * ROWS * LD), *out = malloc(sizeof(float) * ROWS * VT);
    for (int t = 0; t < VT; t++) t2d[t] = -1;
    for (int i = 0, t = 0; i < VD; i++, t += 1 + (rnd() % 3 == 0)) t2d[t < VT ? t : VT - 1] = i;
    for (int i = 0; i < ROWS * LD; i++) in[i] = urand(-10, 10);
    int32_t *dt = dalloc(sizeof(int32_t) * VT);
    float *di = dalloc(sizeof(float) * ROWS * LD), *dq = dalloc(sizeof(float) * ROWS * VT);
    CK(cudaMemcpy(dt, t2d, sizeof(int32_t) * VT, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(di, in, sizeof(float) * ROWS * LD, cudaMemcpyHostToDevice));
    flint_drafter_cuda_scatter_vocab(dq, di, LD, dt, VT, ROWS, NULL);
    CK(cudaMemcpy(out, dq, sizeof(float) * ROWS * VT, cudaMemcpyDeviceToHost));
    bad = 0;
    for (int i = 0; i < ROWS; i++)
        for (int t = 0; t < VT; t++) {
            float want = t2d[t] >= 0 ? in[i * LD + t2d[t]] : -INFINITY;
            bad += memcmp(&want, &out[i * VT + t], sizeof want) != 0;
        }
    CHECKF(bad == 0, "scatter_vocab: %d values differ", bad);
    cudaFree(dt), cudaFree(di), cudaFree(dq), free(t2d), free(in), free(out);
    CK(cudaDeviceSynchronize());
    printf("kernels: to_bf16, markov_conf (4 variants), markov_bias (3 variants, alone and with the confidence "
           "head), scatter_vocab checked\n");
}

static void test_refusals(void) {
    char tgt[4096], dft[4096];
    snprintf(tgt, sizeof tgt, "%s/tests/fixtures/golden/qwen3", SRC);
    snprintf(dft, sizeof dft, "%s/tests/fixtures/drafter/dense", SRC);
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_len = 64;
    flint_err err = {0};
    flint_target *cpu = flint_target_open(tgt, &to, &err);
    to.device = FLINT_TARGET_CUDA;
    flint_target *gpu = flint_target_open(tgt, &to, &err);
    CHECKF(cpu && gpu, "%s", err.msg);
    if (!cpu || !gpu) goto done;
    flint_drafter_options o;
    flint_drafter_options_default(&o);
    o.device = FLINT_TARGET_CUDA;
    flint_drafter *d = flint_drafter_open(dft, cpu, &o, &err);
    CHECKF(!d && err.code == FLINT_ERR_UNSUPPORTED && strstr(err.msg, "target"), "CUDA drafter on a CPU target: %s",
           d ? "opened" : err.msg);
    flint_drafter_close(d);
    flint_tp_comm tp = {0, 1, NULL, NULL, NULL};
    o.tp = &tp;
    d = flint_drafter_open(dft, gpu, &o, &err);
    CHECKF(!d && err.code == FLINT_ERR_UNSUPPORTED && strstr(err.msg, "tensor"), "CUDA drafter with tp: %s",
           d ? "opened" : err.msg);
    flint_drafter_close(d);
    o.tp = NULL;
    o.device = 7;
    d = flint_drafter_open(dft, gpu, &o, &err);
    CHECKF(!d && err.code == FLINT_ERR_INVALID && strstr(err.msg, "device"), "device 7: %s", d ? "opened" : err.msg);
    flint_drafter_close(d);
done:
    flint_target_close(cpu);
    flint_target_close(gpu);
}

/* ==== comparison of one drafter's outputs with a reference ==== */

/* Worst error / bound ratios and counts over a set of drafts. */
typedef struct tally {
    double logit, bias, conf; /* worst ratio to the bound (<= 1 passes); conf: worst |diff| */
    int rows, bad, flips, nonfinite, slots, same;
} tally;

/* Row error: max |got - want| and the bound; want/got over n values (stride: want index scale). */
static double row_err(const float *got, const float *want, int n, double *bound, int *nonfinite) {
    double mx = 0, d = 0;
    for (int v = 0; v < n; v++) {
        if (!isfinite(got[v])) (*nonfinite)++;
        if (fabs(want[v]) > mx) mx = fabs(want[v]);
        double e = fabs((double)got[v] - want[v]);
        if (!(e <= d)) d = e;
    }
    *bound = LOGIT_REL * mx + LOGIT_ABS;
    return d;
}

static int argmax_f(const float *x, int n) { return flint_argmax(x, n); }

/* One request: base rows for every slot; along the common prefix the corrected logits, the Markov
 * bias, the confidence and the token. Arrays are this request's [K][Vd] blocks. */
static void compare_req(tally *t, const char *what, int sampled, int i, int n_draft, int Vd, const int32_t *tok_ref,
                        const float *conf_ref, const float *lg_ref, const float *base_ref, const int32_t *tok_got,
                        const float *conf_got, const float *lg_got, const float *base_got) {
    double bound;
    for (int k = 0; k < n_draft; k++) {
        double d = row_err(base_got + (size_t)k * Vd, base_ref + (size_t)k * Vd, Vd, &bound, &t->nonfinite);
        t->rows++;
        if (d / bound > t->logit) t->logit = d / bound;
        if (!(d <= bound)) {
            t->bad++;
            fprintf(stderr, "  %s req %d slot %d: base logits differ by %.4f (bound %.4f)\n", what, i, k, d, bound);
        }
    }
    for (int k = 0; k < n_draft; k++) {
        const float *lr = lg_ref + (size_t)k * Vd, *lgt = lg_got + (size_t)k * Vd;
        const float *br = base_ref + (size_t)k * Vd, *bg = base_got + (size_t)k * Vd;
        double d = row_err(lgt, lr, Vd, &bound, &t->nonfinite), mx = 0, db = 0;
        t->rows++;
        if (d / bound > t->logit) t->logit = d / bound;
        if (!(d <= bound)) {
            t->bad++;
            fprintf(stderr, "  %s req %d slot %d: logits differ by %.4f (bound %.4f)\n", what, i, k, d, bound);
        }
        for (int v = 0; v < Vd; v++) {
            double e = fabs(((double)lgt[v] - bg[v]) - ((double)lr[v] - br[v]));
            if (!(e <= db)) db = e;
            if (fabs(lr[v]) > mx) mx = fabs(lr[v]);
        }
        double bb = BIAS_REL * (1 + mx);
        if (db / bb > t->bias) t->bias = db / bb;
        if (!(db <= bb)) {
            t->bad++;
            fprintf(stderr, "  %s req %d slot %d: Markov bias differs by %.2e (bound %.2e)\n", what, i, k, db, bb);
        }
        if (conf_ref && conf_got) {
            double dc = fabs((double)conf_got[k] - conf_ref[k]);
            if (!(dc <= t->conf)) t->conf = dc;
            if (!(dc <= CONF_TOL)) {
                t->bad++;
                fprintf(stderr, "  %s req %d slot %d: confidence %.4f, reference %.4f\n", what, i, k, conf_got[k],
                        conf_ref[k]);
            }
        }
        t->slots++;
        if (tok_got[k] == tok_ref[k]) {
            t->same++;
            continue;
        }
        /* a greedy flip is allowed only at a near-tie of the reference's logits (indices: draft
         * vocabulary); sampled draws are counted by the caller */
        int ia = argmax_f(lr, Vd), ig = argmax_f(lgt, Vd);
        t->flips++;
        if (!sampled && lr[ia] - lr[ig] > 2 * d) {
            t->bad++;
            fprintf(stderr, "  %s req %d slot %d: token %d, reference %d, margin %.4f > 2 x error %.4f\n", what, i, k,
                    tok_got[k], tok_ref[k], lr[ia] - lr[ig], d);
        }
        break; /* the chains differ from here */
    }
}

/* ==== 1, 3, 4. flint-tiny: CPU vs CUDA drafter, batch invariance, timing ==== */

enum { N_SEQ = 3, GEN = 40, MAX_LEN = 512, MAX_REQS = 64 };

typedef struct tiny {
    flint_target *tgt;
    flint_drafter *cpu, *gpu;
    const flint_drafter_config *c;
    int32_t *toks[N_SEQ];
    int n[N_SEQ], n_prompt[N_SEQ];
    float *taps[N_SEQ]; /* [n][n_taps][hidden] */
    int32_t *tables[N_SEQ];
} tiny;

static int load_prompts(const flint_tokenizer *tok, tiny *t) {
    char path[4096], line[16384];
    snprintf(path, sizeof path, "%s/evals/data/gsm8k.jsonl", SRC);
    FILE *f = fopen(path, "r");
    CHECKF(f != NULL, "cannot open %s", path);
    if (!f) return -1;
    int k = 0;
    while (k < N_SEQ && fgets(line, sizeof line, f)) {
        cJSON *j = cJSON_Parse(line);
        const cJSON *turns = j ? cJSON_GetObjectItemCaseSensitive(j, "turns") : NULL;
        const cJSON *q = cJSON_IsArray(turns) ? cJSON_GetArrayItem(turns, 0) : NULL;
        if (cJSON_IsString(q)) {
            char text[16384 + 128];
            snprintf(text, sizeof text, "<|im_start|>user\n%s<|im_end|>\n<|im_start|>assistant\n", q->valuestring);
            flint_err err = {0};
            int32_t *ids = NULL;
            int n = 0;
            if (flint_tokenizer_encode(tok, text, strlen(text), 0, &ids, &n, &err) == 0 && n + GEN < MAX_LEN - 16) {
                t->toks[k] = realloc(ids, sizeof(int32_t) * (size_t)(n + GEN));
                t->n_prompt[k] = n;
                k++;
            } else {
                free(ids);
            }
        }
        cJSON_Delete(j);
    }
    fclose(f);
    CHECKF(k == N_SEQ, "could only load %d prompts", k);
    return k == N_SEQ ? 0 : -1;
}

/* Prompt + GEN greedy target tokens, then one forward of the whole sequence for the taps. */
static int make_sequence(tiny *t, int s) {
    const flint_target_config *tc = flint_target_get_config(t->tgt);
    int V = tc->vocab_size, H = tc->hidden_size, n = t->n_prompt[s], nt = t->c->n_taps;
    int32_t taps_l[FLINT_DRAFT_MAX_TAPS], pos[MAX_LEN], seq[MAX_LEN];
    for (int i = 0; i < nt; i++) taps_l[i] = t->c->tap_layers[i];
    for (int i = 0; i < MAX_LEN; i++) pos[i] = i, seq[i] = s;
    float *logits = malloc(sizeof(float) * V);
    flint_err err = {0};
    int32_t last = n - 1;
    flint_target_batch b = {.n_rows = n, .tokens = t->toks[s], .pos = pos, .row_seq = seq, .n_seqs = N_SEQ,
                            .block_tables = (const int32_t *const *)t->tables, .n_logit_rows = 1, .logit_rows = &last,
                            .logits = logits};
    int rc = flint_target_forward(t->tgt, &b, &err);
    for (int g = 0; rc == 0 && g < GEN; g++) {
        t->toks[s][n + g] = flint_argmax(logits, V);
        int32_t zero = 0;
        flint_target_batch one = {.n_rows = 1, .tokens = t->toks[s] + n + g, .pos = pos + n + g, .row_seq = seq,
                                  .n_seqs = N_SEQ, .block_tables = (const int32_t *const *)t->tables,
                                  .n_logit_rows = 1, .logit_rows = &zero, .logits = logits};
        rc = flint_target_forward(t->tgt, &one, &err);
    }
    t->n[s] = n + GEN;
    t->taps[s] = malloc(sizeof(float) * (size_t)t->n[s] * nt * H);
    if (rc == 0) {
        flint_target_batch all = {.n_rows = t->n[s], .tokens = t->toks[s], .pos = pos, .row_seq = seq,
                                  .n_seqs = N_SEQ, .block_tables = (const int32_t *const *)t->tables,
                                  .n_taps = nt, .tap_layers = taps_l, .taps = t->taps[s]};
        rc = flint_target_forward(t->tgt, &all, &err);
    }
    free(logits);
    CHECKF(rc == 0, "target: %s", err.msg);
    return rc;
}

/* Rows [r0, r0 + n) of sequence s into a drafter's context cache. */
static int encode_rows(flint_drafter *d, tiny *t, int s, int r0, int n) {
    int32_t pos[MAX_LEN], seq[MAX_LEN];
    for (int i = 0; i < n; i++) pos[i] = r0 + i, seq[i] = s;
    size_t row = (size_t)t->c->n_taps * t->c->hidden_size;
    flint_drafter_ctx_batch cb = {.n_rows = n, .taps = t->taps[s] + (size_t)r0 * row, .pos = pos, .row_seq = seq,
                                  .n_seqs = N_SEQ, .block_tables = (const int32_t *const *)t->tables};
    flint_err err = {0};
    int rc = flint_drafter_encode(d, &cb, &err);
    CHECKF(rc == 0, "encode: %s", err.msg);
    return rc;
}

static int open_tiny(tiny *t) {
    memset(t, 0, sizeof *t);
    char model[4096], dft[4096];
    snprintf(model, sizeof model, "%s/models/flint-tiny", SRC);
    snprintf(dft, sizeof dft, "%s/models/flint-tiny-dspark", SRC);
    flint_err err = {0};
    flint_tokenizer *tok = flint_tokenizer_open_dir(model, &err);
    CHECKF(tok != NULL, "%s", err.msg);
    if (!tok) return -1;
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_seqs = N_SEQ + 1;
    to.max_len = MAX_LEN;
    to.device = FLINT_TARGET_CUDA;
    t->tgt = flint_target_open(model, &to, &err);
    CHECKF(t->tgt != NULL, "%s", err.msg);
    flint_drafter_options o;
    flint_drafter_options_default(&o);
    o.max_reqs = MAX_REQS;
    if (t->tgt) t->cpu = flint_drafter_open(dft, t->tgt, &o, &err);
    CHECKF(t->cpu != NULL, "CPU drafter: %s", err.msg);
    o.device = FLINT_TARGET_CUDA;
    if (t->tgt) t->gpu = flint_drafter_open(dft, t->tgt, &o, &err);
    CHECKF(t->gpu != NULL, "CUDA drafter: %s", err.msg);
    int rc = t->tgt && t->cpu && t->gpu ? load_prompts(tok, t) : -1;
    flint_tokenizer_close(tok);
    if (rc) return -1;
    t->c = flint_drafter_get_config(t->gpu);
    printf("flint-tiny + flint-tiny-dspark: %s\n", flint_drafter_describe(t->gpu));
    int per = (MAX_LEN + 15) / 16;
    for (int s = 0; s < N_SEQ; s++) {
        t->tables[s] = malloc(sizeof(int32_t) * per);
        for (int k = 0; k < per; k++) t->tables[s][k] = (N_SEQ - s) * per + k; /* not the identity */
    }
    for (int s = 0; s < N_SEQ; s++) {
        if (make_sequence(t, s) || encode_rows(t->cpu, t, s, 0, t->n[s]) || encode_rows(t->gpu, t, s, 0, t->n[s]))
            return -1;
        printf("  sequence %d: %d prompt + %d generated tokens encoded\n", s, t->n_prompt[s], GEN);
    }
    return 0;
}

static void close_tiny(tiny *t) {
    flint_drafter_close(t->cpu);
    flint_drafter_close(t->gpu);
    flint_target_close(t->tgt);
    for (int s = 0; s < N_SEQ; s++) free(t->toks[s]), free(t->taps[s]), free(t->tables[s]);
}

/* Outputs of one draft call, [n][K] and [n][K][V]. */
typedef struct outs {
    int32_t *tok;
    float *conf, *lg, *base, *q;
} outs;

static void outs_alloc(outs *o, int n, int K, int V) {
    o->tok = calloc((size_t)n * K, sizeof(int32_t));
    o->conf = calloc((size_t)n * K, sizeof(float));
    o->lg = calloc((size_t)n * K * V, sizeof(float));
    o->base = calloc((size_t)n * K * V, sizeof(float));
    o->q = calloc((size_t)n * K * V, sizeof(float));
}
static void outs_free(outs *o) { free(o->tok), free(o->conf), free(o->lg), free(o->base), free(o->q); }

static int draft(flint_drafter *d, tiny *t, int n, const flint_drafter_req *rq, outs *o, int want_q) {
    flint_drafter_out out = {.tokens = o->tok, .q = want_q ? o->q : NULL, .confidence = o->conf, .logits = o->lg,
                             .base_logits = o->base};
    flint_err err = {0};
    int rc = flint_drafter_draft(d, n, rq, (const int32_t *const *)t->tables, N_SEQ, &out, &err);
    CHECKF(rc == 0, "draft: %s", err.msg);
    return rc;
}

enum { N_REQ = 24 };

static int make_reqs(tiny *t, flint_drafter_req *rq) {
    int K = t->c->max_draft, n = 0;
    for (int s = 0; s < N_SEQ; s++) {
        int np = t->n_prompt[s];
        int P[8] = {3, np - 1, np + 4, np + 9, np + 15, np + 21, np + 28, np + GEN - 1};
        for (int j = 0; j < 8; j++)
            rq[n++] = (flint_drafter_req){.anchor = t->toks[s][P[j]], .pos = P[j], .seq = s, .n_draft = K,
                                          .temperature = 0, .greedy = 1, .seed = 1};
    }
    return n;
}

static void print_tally(const char *what, const tally *t, int sampled) {
    printf("  %-26s %4d rows: logits at %.2f of the bound, Markov bias at %.2f of its bound, confidence max|diff| "
           "%.4f; tokens %d/%d equal along common prefixes, %d %s\n", what, t->rows, t->logit, t->bias, t->conf,
           t->same, t->slots, t->flips, sampled ? "different draws" : "near-tie flips");
    CHECKF(t->bad == 0 && t->nonfinite == 0, "%s: %d comparisons over their bounds, %d non-finite values", what, t->bad,
           t->nonfinite);
}

static void test_cpu_vs_cuda(tiny *t) {
    const flint_drafter_config *c = t->c;
    int K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size;
    flint_drafter_req rq[N_REQ];
    int n = make_reqs(t, rq);
    outs oc, og;
    outs_alloc(&oc, n, K, V);
    outs_alloc(&og, n, K, V);
    /* greedy */
    tally tg = {0};
    if (draft(t->cpu, t, n, rq, &oc, 0) == 0 && draft(t->gpu, t, n, rq, &og, 0) == 0) {
        int self = 0;
        for (int i = 0; i < n; i++) {
            size_t o = (size_t)i * K;
            compare_req(&tg, "greedy", 0, i, K, Vd, oc.tok + o, oc.conf + o, oc.lg + o * Vd, oc.base + o * Vd,
                        og.tok + o, og.conf + o, og.lg + o * Vd, og.base + o * Vd);
            for (int k = 0; k < K; k++) self += og.tok[o + k] != argmax_f(og.lg + (o + k) * Vd, Vd);
        }
        print_tally("greedy, CPU vs CUDA", &tg, 0);
        CHECKF(self == 0, "greedy: %d CUDA drafts are not the argmax of their own logits", self);
    }
    /* sampled at temperature 1 */
    for (int i = 0; i < n; i++) rq[i].greedy = 0, rq[i].temperature = 1.0f, rq[i].seed = 1000 + 7 * (uint64_t)i;
    tally ts = {0};
    if (draft(t->cpu, t, n, rq, &oc, 1) == 0 && draft(t->gpu, t, n, rq, &og, 1) == 0) {
        int draws = 0, redraw_diff = 0, cond = 0, cond_same = 0, chains = 0;
        double qerr = 0;
        for (int i = 0; i < n; i++) {
            size_t o = (size_t)i * K;
            compare_req(&ts, "sampled", 1, i, K, Vd, oc.tok + o, oc.conf + o, oc.lg + o * Vd, oc.base + o * Vd,
                        og.tok + o, og.conf + o, og.lg + o * Vd, og.base + o * Vd);
            int prefix = 1;
            for (int k = 0; k < K; k++) {
                const float *l = og.lg + (o + k) * Vd, *q = og.q + (o + k) * V;
                double mx = -INFINITY, z = 0;
                for (int v = 0; v < V; v++) mx = fmax(mx, l[v]);
                for (int v = 0; v < V; v++) z += exp(l[v] - mx);
                for (int v = 0; v < V; v++) {
                    double e = fabs(q[v] - exp(l[v] - mx) / z);
                    if (!(e <= qerr)) qerr = e;
                }
                draws++;
                redraw_diff += og.tok[o + k] != flint_sample_draft(q, V, rq[i].seed, (int64_t)rq[i].pos + 1 + k);
                if (prefix) {
                    cond++;
                    cond_same += og.tok[o + k] == oc.tok[o + k];
                    prefix = og.tok[o + k] == oc.tok[o + k];
                }
            }
            chains += !memcmp(og.tok + o, oc.tok + o, sizeof(int32_t) * K);
        }
        print_tally("sampled T=1, CPU vs CUDA", &ts, 1);
        printf("  sampled: q = softmax(L) within %.2e; %d of %d draws differ from flint_sample_draft on the GPU's q; "
               "CPU and CUDA draw the same token at %d of %d slots with equal prefixes (%d of %d chains equal)\n",
               qerr, redraw_diff, draws, cond_same, cond, chains, n);
        CHECKF(qerr <= Q_TOL, "sampled: q differs from softmax(L / T) by %.2e", qerr);
        CHECKF(redraw_diff * 100 <= draws, "sampled: %d of %d draws are not flint_sample_draft's", redraw_diff, draws);
        CHECKF(cond_same * 10 >= cond * 8, "sampled: only %d of %d draws agree with the CPU drafter", cond_same, cond);
    }
    outs_free(&oc);
    outs_free(&og);
}

/* Bit-equality of request i of a batch (a) and the same request alone (b, index 0). */
static int same_bits(const outs *a, int i, const outs *b, int K, int V, int Vd, const flint_drafter_req *r) {
    size_t o = (size_t)i * K;
    int n = r->n_draft, ok = !memcmp(a->tok + o, b->tok, sizeof(int32_t) * n) &&
                                !memcmp(a->conf + o, b->conf, sizeof(float) * n) &&
                                !memcmp(a->lg + o * Vd, b->lg, sizeof(float) * n * Vd) &&
                                !memcmp(a->base + o * Vd, b->base, sizeof(float) * n * Vd);
    if (!(r->greedy || r->temperature == 0)) ok = ok && !memcmp(a->q + o * V, b->q, sizeof(float) * n * V);
    return ok;
}

static void test_batch_invariance(tiny *t) {
    const flint_drafter_config *c = t->c;
    int K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size;
    enum { NB = 32 };
    flint_drafter_req rq[NB];
    for (int i = 0; i < NB; i++) {
        int s = i % N_SEQ, P = 1 + (int)((37u * (unsigned)i + 11u) % (unsigned)(t->n[s] - 1));
        rq[i] = (flint_drafter_req){.anchor = t->toks[s][P], .pos = P, .seq = s, .n_draft = 1 + i % K,
                                    .temperature = 0.7f + 0.1f * (float)(i % 4), .greedy = i % 3 == 0,
                                    .seed = 500 + (uint64_t)i};
    }
    rq[5].pos = 0; /* no context at all */
    rq[5].anchor = t->toks[rq[5].seq][0];
    outs all, one;
    outs_alloc(&all, NB, K, V);
    outs_alloc(&one, 1, K, V);
    int differ = 0;
    if (draft(t->gpu, t, NB, rq, &all, 1) == 0) {
        for (int i = 0; i < NB; i++) {
            if (draft(t->gpu, t, 1, rq + i, &one, 1)) break;
            if (!same_bits(&all, i, &one, K, V, Vd, rq + i)) {
                differ++;
                fprintf(stderr, "  request %d (pos %d, %d drafts, %s) alone differs from the batch of %d\n", i,
                        rq[i].pos, rq[i].n_draft, rq[i].greedy ? "greedy" : "sampled", NB);
            }
        }
        /* re-encode sequence 0 in chunks of 5 rows: the context K/V, and so the drafts, are the same bits */
        for (int r0 = 0; r0 < t->n[0]; r0 += 5) encode_rows(t->gpu, t, 0, r0, t->n[0] - r0 < 5 ? t->n[0] - r0 : 5);
        int chunk_differ = 0;
        for (int i = 0; i < NB; i += N_SEQ)
            if (draft(t->gpu, t, 1, rq + i, &one, 1) == 0) chunk_differ += !same_bits(&all, i, &one, K, V, Vd, rq + i);
        printf("  batch invariance: %d of %d requests differ alone vs in a batch of %d; %d differ after re-encoding "
               "in chunks of 5\n", differ, NB, NB, chunk_differ);
        CHECKF(differ == 0, "%d requests are not bit-identical alone and in a batch of %d", differ, NB);
        CHECKF(chunk_differ == 0, "%d drafts changed after re-encoding the context in chunks", chunk_differ);
    }
    outs_free(&all);
    outs_free(&one);
}

static void test_timing(tiny *t) {
    const flint_drafter_config *c = t->c;
    int K = c->max_draft, V = c->vocab_size;
    static flint_drafter_req rq[MAX_REQS];
    int32_t *tok = malloc(sizeof(int32_t) * MAX_REQS * K);
    float *conf = malloc(sizeof(float) * MAX_REQS * K), *q = malloc(sizeof(float) * (size_t)MAX_REQS * K * V);
    static const int sizes[] = {1, 8, 64};
    for (int mode = 0; mode < 2; mode++)
        for (int si = 0; si < 3; si++) {
            int n = sizes[si];
            for (int i = 0; i < n; i++) {
                int s = i % N_SEQ, P = t->n[s] - 1 - (i / N_SEQ);
                rq[i] = (flint_drafter_req){.anchor = t->toks[s][P], .pos = P, .seq = s, .n_draft = K,
                                            .temperature = 1.0f, .greedy = mode == 0, .seed = (uint64_t)i};
            }
            flint_drafter_out out = {.tokens = tok, .confidence = conf, .q = mode ? q : NULL};
            flint_err err = {0};
            double ms[2];
            flint_drafter *ds[2] = {t->gpu, t->cpu};
            for (int b = 0; b < 2; b++) {
                int iters = b == 0 ? 50 : 5;
                for (int w = 0; w < 3; w++)
                    flint_drafter_draft(ds[b], n, rq, (const int32_t *const *)t->tables, N_SEQ, &out, &err);
                double t0 = now_s();
                for (int it = 0; it < iters; it++)
                    CHECKF(flint_drafter_draft(ds[b], n, rq, (const int32_t *const *)t->tables, N_SEQ, &out, &err) == 0,
                           "%s", err.msg);
                ms[b] = (now_s() - t0) * 1e3 / iters;
            }
            printf("  timing: draft %2d requests x %d tokens, %s: CUDA %.3f ms, CPU %.3f ms\n", n, K,
                   mode ? "sampled, q to the host" : "greedy", ms[0], ms[1]);
        }
    double t0 = now_s();
    for (int it = 0; it < 20; it++) encode_rows(t->gpu, t, 0, 0, t->n[0]);
    printf("  timing: encode %d rows on CUDA: %.3f ms\n", t->n[0], (now_s() - t0) * 1e3 / 20);
    free(tok), free(conf), free(q);
}

/* ==== 2. the golden fixtures (PyTorch reference) ==== */

#define FIX "/tests/fixtures/drafter"

static void golden_one(const cJSON *ref, flint_target *cpu_t, flint_target *gpu_t, const char *name, int fillin,
                       const cJSON *keep) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s" FIX "/%s", SRC, name);
    flint_err err = {0};
    flint_drafter_options o;
    flint_drafter_options_default(&o);
    o.device = FLINT_TARGET_CUDA;
    flint_drafter *d = flint_drafter_open(dir, gpu_t, &o, &err);
    CHECKF(d != NULL, "%s: %s", dir, err.msg);
    if (!d) return;
    const flint_drafter_config *c = flint_drafter_get_config(d);
    int K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size, H = c->hidden_size, nt = c->n_taps;
    CHECK(K == (fillin ? c->block_size - 1 : c->block_size));
    /* the prompt's taps from the fp32 CPU target, as the reference's */
    const cJSON *pr = cJSON_GetObjectItem(ref, "prompt");
    int n = cJSON_GetArraySize(pr);
    int32_t tok[64], pos[64], rsq[64], taps_l[FLINT_DRAFT_MAX_TAPS], table[4] = {3, 1, 0, 2};
    const int32_t *tables[1] = {table};
    for (int i = 0; i < n; i++) tok[i] = cJSON_GetArrayItem(pr, i)->valueint, pos[i] = i, rsq[i] = 0;
    for (int i = 0; i < nt; i++) taps_l[i] = c->tap_layers[i];
    float *taps = malloc(sizeof(float) * n * nt * H);
    flint_target_batch b = {.n_rows = n, .tokens = tok, .pos = pos, .row_seq = rsq, .n_seqs = 1, .block_tables = tables,
                            .n_taps = nt, .tap_layers = taps_l, .taps = taps};
    CHECKF(flint_target_forward(cpu_t, &b, &err) == 0, "%s", err.msg);
    flint_drafter_ctx_batch cb = {.n_rows = n, .taps = taps, .pos = pos, .row_seq = rsq, .n_seqs = 1,
                                  .block_tables = tables};
    CHECKF(flint_drafter_encode(d, &cb, &err) == 0, "%s", err.msg);
    free(taps);
    int32_t toks[16];
    float conf[16];
    float *lg = malloc(sizeof(float) * K * Vd), *base = malloc(sizeof(float) * K * Vd);
    float *wl = malloc(sizeof(float) * K * Vd), *wb = malloc(sizeof(float) * K * Vd), wc[16];
    int32_t wd[16];
    tally t = {0};
    const cJSON *cs = cJSON_GetObjectItem(ref, "cases"), *ci;
    cJSON_ArrayForEach(ci, cs) {
        flint_drafter_req rq = {.anchor = cJSON_GetObjectItem(ci, "anchor")->valueint,
                                .pos = cJSON_GetObjectItem(ci, "pos")->valueint, .seq = 0, .n_draft = K,
                                .temperature = 0, .greedy = 1, .seed = 1};
        flint_drafter_out out = {.tokens = toks, .confidence = conf, .logits = lg, .base_logits = base};
        if (flint_drafter_draft(d, 1, &rq, tables, 1, &out, &err)) {
            CHECKF(0, "%s", err.msg);
            break;
        }
        const cJSON *jl = cJSON_GetObjectItem(ci, fillin ? "fillin_logits" : "logits");
        const cJSON *jc = cJSON_GetObjectItem(ci, fillin ? "fillin_confidence" : "confidence");
        const cJSON *jd = cJSON_GetObjectItem(ci, fillin ? "fillin_drafts" : "drafts");
        const cJSON *jb = cJSON_GetObjectItem(ci, "base_logits");
        /* the reference in this drafter's vocabulary (kept ids for the reduced one); its drafts
         * along the dense chain are compared only while the reduced argmax takes the same ids */
        int reduced_chain = K;
        for (int k = 0; k < K; k++) {
            for (int v = 0; v < Vd; v++) {
                int id = keep ? cJSON_GetArrayItem(keep, v)->valueint : v;
                wl[k * Vd + v] = (float)cJSON_GetArrayItem(jl, k * V + id)->valuedouble;
                wb[k * Vd + v] = (float)cJSON_GetArrayItem(jb, (k + fillin) * V + id)->valuedouble;
            }
            wc[k] = (float)cJSON_GetArrayItem(jc, k)->valuedouble;
            wd[k] = cJSON_GetArrayItem(jd, k)->valueint;
            if (keep && reduced_chain == K) {
                int best = argmax_f(wl + k * Vd, Vd);
                if (cJSON_GetArrayItem(keep, best)->valueint != wd[k]) reduced_chain = k + 1;
                wd[k] = cJSON_GetArrayItem(keep, best)->valueint;
            }
        }
        compare_req(&t, name, 0, rq.pos, reduced_chain, Vd, wd, wc, wl, wb, toks, conf, lg, base);
    }
    print_tally(name, &t, 0);
    free(lg), free(base), free(wl), free(wb);
    flint_drafter_close(d);
}

static void test_golden(void) {
    char path[4096], tgt[4096];
    snprintf(path, sizeof path, "%s" FIX "/reference.json", SRC);
    snprintf(tgt, sizeof tgt, "%s/tests/fixtures/golden/qwen3", SRC);
    flint_err err = {0};
    cJSON *ref = flint_json_load_file(path, 1 << 24, &err);
    CHECKF(ref != NULL, "%s", err.msg);
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_seqs = 1;
    to.max_len = 64;
    flint_target *cpu_t = flint_target_open(tgt, &to, &err);
    CHECKF(cpu_t != NULL, "%s", err.msg);
    to.device = FLINT_TARGET_CUDA;
    flint_target *gpu_t = flint_target_open(tgt, &to, &err);
    CHECKF(gpu_t != NULL, "%s", err.msg);
    if (ref && cpu_t && gpu_t) {
        printf("golden drafter fixtures (PyTorch fp32 reference)\n");
        golden_one(ref, cpu_t, gpu_t, "dense", 0, NULL);
        golden_one(ref, cpu_t, gpu_t, "spec_full", 0, NULL);
        golden_one(ref, cpu_t, gpu_t, "spec_fillin", 1, NULL);
        golden_one(ref, cpu_t, gpu_t, "spec_reduced", 0, cJSON_GetObjectItem(ref, "reduced_keep"));
    }
    flint_target_close(cpu_t);
    flint_target_close(gpu_t);
    cJSON_Delete(ref);
}

/* ==== 5. captured graphs == eager launches ==== */

enum { G_SEQ = 4, G_LEN = 1024, G_REQS = 32 };

/* Tokens and confidences of slots k < n_draft, and q of sampled requests' slots (when qa), of two
 * draft calls; returns the number of differing values, counts the q rows compared. */
static int cmp_drafts(int n, const flint_drafter_req *rq, int K, int V, const int32_t *ta, const int32_t *tb,
                      const float *ca, const float *cb, const float *qa, const float *qb, int *n_q) {
    int bad = 0;
    for (int i = 0; i < n; i++) {
        int sampled = !(rq[i].greedy || rq[i].temperature == 0.0f);
        for (int k = 0; k < rq[i].n_draft; k++) {
            size_t o = (size_t)i * K + k;
            bad += ta[o] != tb[o];
            bad += memcmp(ca + o, cb + o, sizeof(float)) != 0;
            if (qa && sampled) {
                bad += memcmp(qa + o * V, qb + o * V, sizeof(float) * V) != 0;
                (*n_q)++;
            }
        }
    }
    return bad;
}

typedef struct gbuf {
    int32_t *tok;
    float *conf, *q, *lg, *base;
} gbuf;

/* One draft call; q_mode 0: q to the host, 1: no q, 2: q left on the device (then copied here from
 * flint_drafter_device_q); logits: also logits and base logits (an eager call). Outputs are
 * cleared first so both drafters start from the same bytes. */
static int g_draft(flint_drafter *d, int n, const flint_drafter_req *rq, int32_t *const *tables, int q_mode,
                   int logits, gbuf *o, int K, int V) {
    size_t nk = (size_t)n * K;
    memset(o->tok, 0, sizeof(int32_t) * nk);
    memset(o->conf, 0, sizeof(float) * nk);
    memset(o->q, 0, sizeof(float) * nk * V);
    flint_drafter_out out = {.tokens = o->tok, .confidence = o->conf, .q = q_mode == 0 ? o->q : NULL,
                             .q_on_device = q_mode == 2, .logits = logits ? o->lg : NULL,
                             .base_logits = logits ? o->base : NULL};
    flint_err err = {0};
    int rc = flint_drafter_draft(d, n, rq, (const int32_t *const *)tables, G_SEQ, &out, &err);
    CHECKF(rc == 0, "draft: %s", err.msg);
    if (rc == 0 && q_mode == 2) CK(cudaMemcpy(o->q, flint_drafter_device_q(d), sizeof(float) * nk * V,
                                              cudaMemcpyDeviceToHost));
    return rc;
}

static void gbuf_alloc(gbuf *b, int n, int K, int V) {
    b->tok = calloc((size_t)n * K, sizeof(int32_t));
    b->conf = calloc((size_t)n * K, sizeof(float));
    b->q = calloc((size_t)n * K * V, sizeof(float));
    b->lg = calloc((size_t)n * K * V, sizeof(float));
    b->base = calloc((size_t)n * K * V, sizeof(float));
}
static void gbuf_free(gbuf *b) { free(b->tok), free(b->conf), free(b->q), free(b->lg), free(b->base); }

/* The requests of draft call `call` with n requests: the short family keeps every context below
 * 120 positions (attention bound 512), the long one puts request 0 (and others) past 600 (bound
 * 1024); draft counts 1..K mixed (a function of the call, so the Markov step count varies between
 * calls but not between rounds), a third greedy, the rest sampled at several temperatures; round 1
 * moves positions, anchors, temperatures and seeds inside the same launch shapes (a replay must read
 * the new batch). */
static void g_reqs(flint_drafter_req *rq, int n, int call, int round, int longf, const int *len,
                   int32_t *const *toks, int K) {
    for (int i = 0; i < n; i++) {
        int s = (i + call) % G_SEQ, P;
        unsigned h = 2654435761u * (unsigned)(i + 7 * call + 131 * round + 1);
        if (!longf || (s >= 2 && i != 0)) P = 1 + (int)(h % 90u);
        else {
            if (s >= 2) s = 0; /* request 0 of the long family: a long sequence */
            P = 560 + (int)(h % (unsigned)(len[s] - 561));
        }
        if (i == 3 && round == 0) P = 0; /* no context at all */
        rq[i] = (flint_drafter_req){.anchor = toks[s][P], .pos = P, .seq = s, .n_draft = 1 + (i * 3 + call) % K,
                                    .temperature = 0.6f + 0.15f * (float)((i + round) % 5),
                                    .greedy = (i + call) % 3 == 0, .seed = 1000 + 31 * (uint64_t)i + 7 * round};
    }
}

static void test_graphs(void) {
    char model[4096], dft[4096];
    snprintf(model, sizeof model, "%s/models/flint-tiny", SRC);
    snprintf(dft, sizeof dft, "%s/models/flint-tiny-dspark", SRC);
    flint_err err = {0};
    flint_target_options to;
    flint_target_options_default(&to);
    to.max_seqs = G_SEQ;
    to.max_len = G_LEN;
    to.device = FLINT_TARGET_CUDA;
    flint_target *tgt = flint_target_open(model, &to, &err);
    CHECKF(tgt != NULL, "%s", err.msg);
    if (!tgt) return;
    flint_drafter_options o;
    flint_drafter_options_default(&o);
    o.max_reqs = G_REQS;
    o.device = FLINT_TARGET_CUDA;
    flint_drafter *dg = flint_drafter_open(dft, tgt, &o, &err);
    CHECKF(dg != NULL, "graph drafter: %s", err.msg);
    o.enforce_eager = 1;
    flint_drafter *de = dg ? flint_drafter_open(dft, tgt, &o, &err) : NULL;
    CHECKF(de != NULL, "eager drafter: %s", err.msg);
    if (!dg || !de) {
        flint_drafter_close(dg);
        flint_target_close(tgt);
        return;
    }
    const flint_drafter_config *c = flint_drafter_get_config(dg);
    const int K = c->max_draft, V = c->vocab_size, Vd = c->draft_vocab_size, nTH = c->n_taps * c->hidden_size;
    const int len[G_SEQ] = {700, 640, 130, 96}, per = (G_LEN + 15) / 16;
    printf("graphs == eager (flint-tiny-dspark, random taps, sequences of 700, 640, 130 and 96 positions)\n");

    /* sequences: random taps and tokens, tables over the whole pool in a scrambled order */
    int32_t *tables[G_SEQ], *toks[G_SEQ];
    int off[G_SEQ + 1];
    off[0] = 0;
    for (int s = 0; s < G_SEQ; s++) {
        tables[s] = malloc(sizeof(int32_t) * per);
        for (int k = 0; k < per; k++) tables[s][k] = (G_SEQ - 1 - s) * per + (per - 1 - k);
        toks[s] = malloc(sizeof(int32_t) * len[s]);
        for (int p = 0; p < len[s]; p++) toks[s][p] = (int32_t)(rnd() % (unsigned)(V - 2));
        off[s + 1] = off[s] + len[s];
    }
    const int total = off[G_SEQ];
    float *taps = malloc(sizeof(float) * (size_t)total * nTH); /* row off[s] + p: sequence s, position p */
    for (size_t i = 0; i < (size_t)total * nTH; i++) taps[i] = urand(-2, 2);
    /* the device copy in reverse row order: row total - 1 - g holds host row g (src_rows undo it) */
    float *dtaps = dalloc(sizeof(float) * (size_t)total * nTH);
    for (int g = 0; g < total; g++)
        CK(cudaMemcpy(dtaps + (size_t)(total - 1 - g) * nTH, taps + (size_t)g * nTH, sizeof(float) * nTH,
                      cudaMemcpyHostToDevice));

    /* encode every position of every sequence, the sequences' rows interleaved (a call mixes
     * sequences), in calls of 5, 11, 37, 1, 9, 64, 3 and 200 rows, host or device taps (the graph
     * drafter holding the device-taps rows: flint_drafter_ctx_batch.defer) */
    int32_t *order = malloc(sizeof(int32_t) * total), *pos = malloc(sizeof(int32_t) * total);
    int32_t *rsq = malloc(sizeof(int32_t) * total), *src = malloc(sizeof(int32_t) * total);
    float *chunk = malloc(sizeof(float) * (size_t)200 * nTH);
    int no = 0;
    for (int p = 0; p < G_LEN; p++)
        for (int s = 0; s < G_SEQ; s++)
            if (p < len[s]) order[no++] = off[s] + p;
    static const int sizes[] = {5, 11, 37, 1, 9, 64, 3, 200};
    int n_calls = 0, n_dev = 0, enc_fail = 0;
    for (int at = 0; at < total; n_calls++) {
        int R = sizes[n_calls % 8], device = n_calls % 3 == 1;
        if (R > total - at) R = total - at;
        for (int r = 0; r < R; r++) {
            int g = order[at + r], s = 0;
            while (g >= off[s + 1]) s++;
            pos[r] = g - off[s], rsq[r] = s, src[r] = total - 1 - g;
            memcpy(chunk + (size_t)r * nTH, taps + (size_t)g * nTH, sizeof(float) * nTH);
        }
        flint_drafter_ctx_batch b = {.n_rows = R, .pos = pos, .row_seq = rsq, .n_seqs = G_SEQ,
                                     .block_tables = (const int32_t *const *)tables};
        if (device) b.taps_device = dtaps, b.src_rows = src;
        else b.taps = chunk;
        /* the graph drafter holds its device-taps rows (defer): they are encoded by the next
         * host-taps call or the first draft, against the eager drafter's immediate encodes */
        b.defer = device;
        enc_fail += flint_drafter_encode(dg, &b, &err) != 0;
        b.defer = 0;
        enc_fail += flint_drafter_encode(de, &b, &err) != 0;
        n_dev += device;
        at += R;
    }
    CHECKF(enc_fail == 0, "encode: %s", err.msg);
    CK(cudaDeviceSynchronize());
    flint_drafter_graph_info gi_enc;
    flint_drafter_graph_stats(dg, &gi_enc);
    printf("  encoded %d rows in %d calls (%d with device taps): %d encode graphs captured\n", total, n_calls, n_dev,
           (int)gi_enc.n_captures);

    gbuf ga, gb;
    gbuf_alloc(&ga, G_REQS, K, V);
    gbuf_alloc(&gb, G_REQS, K, V);
    flint_drafter_req rq[G_REQS];
    int n_q = 0;

    /* the context caches: eager drafts with logits (on both drafters) from every sequence's end
     * and middle see every encoded row; logits, base logits, tokens, confidences and q must be the
     * same bits */
    {
        int n = 0;
        for (int s = 0; s < G_SEQ; s++)
            for (int j = 0; j < 2; j++) {
                int P = j ? len[s] - 1 : len[s] / 2;
                rq[n] = (flint_drafter_req){.anchor = toks[s][P], .pos = P, .seq = s, .n_draft = K,
                                            .temperature = 0.8f, .greedy = n % 2, .seed = 77 + (uint64_t)n};
                n++;
            }
        int bad = -1;
        if (g_draft(dg, n, rq, tables, 0, 1, &ga, K, V) == 0 && g_draft(de, n, rq, tables, 0, 1, &gb, K, V) == 0) {
            bad = cmp_drafts(n, rq, K, V, ga.tok, gb.tok, ga.conf, gb.conf, ga.q, gb.q, &n_q);
            size_t nl = (size_t)n * K * Vd;
            bad += memcmp(ga.lg, gb.lg, sizeof(float) * nl) != 0;
            bad += memcmp(ga.base, gb.base, sizeof(float) * nl) != 0;
        }
        printf("  context caches after graph vs eager encodes: %s\n",
               bad == 0 ? "identical drafts and logits" : "DIFFER");
        CHECKF(bad == 0, "encode graphs: drafts over the context encoded by graphs differ from eager (%d values)", bad);
    }

    /* draft calls: two rounds of the same launch shapes with new data; the second captures nothing */
    static const int counts[] = {1, 3, 8, 13, 32};
    flint_drafter_graph_info gi1;
    memset(&gi1, 0, sizeof gi1);
    int bad_total = 0, calls = 0, distinct = 0;
    long captures_round[2] = {0, 0};
    for (int round = 0; round < 2; round++) {
        flint_drafter_graph_info before;
        flint_drafter_graph_stats(dg, &before);
        for (int ci = 0; ci < 5; ci++)
            for (int longf = 0; longf < 2; longf++)
                for (int q_mode = 0; q_mode < 3; q_mode++) {
                    int n = counts[ci], call = ci * 6 + longf * 3 + q_mode;
                    g_reqs(rq, n, call, round, longf, len, toks, K);
                    if (g_draft(dg, n, rq, tables, q_mode, 0, &ga, K, V) ||
                        g_draft(de, n, rq, tables, q_mode, 0, &gb, K, V))
                        continue;
                    int bad = cmp_drafts(n, rq, K, V, ga.tok, gb.tok, ga.conf, gb.conf, q_mode == 1 ? NULL : ga.q,
                                         q_mode == 1 ? NULL : gb.q, &n_q);
                    if (bad)
                        fprintf(stderr, "  round %d: %d requests, %s contexts, q %s: %d values differ (graph vs "
                                "eager)\n", round, n, longf ? "long" : "short",
                                q_mode == 0 ? "to the host" : q_mode == 1 ? "off" : "on the device", bad);
                    bad_total += bad;
                    calls++;
                    for (int i = 0; i < n; i++)
                        for (int k = 0; k < rq[i].n_draft; k++) distinct += ga.tok[(size_t)i * K + k] != ga.tok[0];
                }
        flint_drafter_graph_stats(dg, &gi1);
        captures_round[round] = gi1.n_captures - before.n_captures;
    }
    flint_drafter_graph_info ge;
    flint_drafter_graph_stats(de, &ge);
    printf("  %d draft calls on each drafter: %d values differ (%d q rows compared); graph captures %ld in round 0, "
           "%ld in round 1 (replays)\n", calls, bad_total, n_q, captures_round[0], captures_round[1]);
    printf("  graph stats: %d graphs held, %ld captures in %.3f s (eager drafter: %d graphs, %ld captures)\n",
           gi1.n_graphs, gi1.n_captures, gi1.capture_s, ge.n_graphs, ge.n_captures);
    CHECKF(calls == 60, "only %d of 60 draft call pairs ran", calls);
    CHECKF(bad_total == 0, "graph drafts differ from eager drafts in %d values", bad_total);
    CHECKF(n_q > 0 && distinct > 0, "the comparison saw no sampled q rows (%d) or only one token (%d others)", n_q,
           distinct);
    CHECKF(gi_enc.n_captures > 0 && captures_round[0] > 0 && gi1.n_graphs > 0,
           "the graph drafter captured no graphs (encode %ld, draft %ld)", gi_enc.n_captures, captures_round[0]);
    CHECKF(captures_round[1] == 0, "round 1 repeated round 0's launch shapes but captured %ld graphs",
           captures_round[1]);
    CHECKF(ge.n_graphs == 0 && ge.n_captures == 0, "enforce_eager: %d graphs, %ld captures", ge.n_graphs,
           ge.n_captures);

    gbuf_free(&ga);
    gbuf_free(&gb);
    cudaFree(dtaps);
    free(taps), free(order), free(pos), free(rsq), free(src), free(chunk);
    for (int s = 0; s < G_SEQ; s++) free(tables[s]), free(toks[s]);
    flint_drafter_close(dg);
    flint_drafter_close(de);
    flint_target_close(tgt);
}

int main(int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--no-lab")) lab = 0;
        else SRC = argv[i];
    }
    int n_dev = 0;
    if (cudaGetDeviceCount(&n_dev) != cudaSuccess || n_dev < 1) {
        fprintf(stderr, "test_drafter_cuda: no CUDA device\n");
        return 1;
    }
    test_kernels();
    test_refusals();
    test_golden();
    tiny t;
    if (open_tiny(&t) == 0) {
        test_cpu_vs_cuda(&t);
        test_batch_invariance(&t);
        if (lab) test_timing(&t);
    }
    close_tiny(&t);
    test_graphs();
    return test_report("test_drafter_cuda");
}
