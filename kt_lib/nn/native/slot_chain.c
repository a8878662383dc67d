/* DTransformer's Block 4 elementwise chain, one pass per row (kt_lib.nn.slots calls it).
 *
 * The math is kt_lib.nn.reference.slot; kt_lib.nn.slots documents the chunking. For one chunk
 * (batch rows b0.., query steps t0..t1, keys 0..s1) and one row (b, h, t, k), with
 * ratio_j = P_j / C_t = exp(lp_j - lc_t) (1 - ratio, not expm1: it vectorises, and lp's own
 * rounding is as large), readable keys j < t (j <= t when not strict) that are
 * kept:
 *   dist_j  = sqrt(max(0, (1 - ratio_j) * (t - j)))       AKT's distance (no gradient)
 *   decay_j = max(exp(-theta_h * dist_j), 1e-5)
 *   s_j     = r_j * decay_j;  p = softmax over readable kept j;  cap = max(max_j p_j, 0.2)
 *   w_j     = p_j / cap  (0 at every other key; every w_j is 0 in a row that reads no key)
 * `slot_weights` writes w, and for the backward (dec != NULL) also decay_j, dist_j, the row's
 * 1 / sum_j exp(s_j - max) and the argmax of s. `slot_grads` takes those and dL/dw and adds
 * dL/dr (summed over the chunk's query steps) and dL/dtheta_h's terms, with no transcendental:
 *   dot = sum_j gw_j w_j;  dL/ds_j = (gw_j - [not bound] dot cap) w_j - [bound][j = arg] dot w_j
 *   (bound: the max-out's cap is max_j p_j > 0.2), dL/dr_j = dL/ds_j decay_j,
 *   dL/dtheta = -sum_j dL/ds_j decay_j dist_j r_j where the decay clamp does not bind.
 * Rows are independent: a caller may split the (b, h) pairs of a chunk between threads
 * (disjoint ranges [p0, p1)); grad_r rows belong to one (b, h) pair.
 *
 * Layouts (float32, contiguous): r, lp, lc [B, H, K, S] (lc indexed by the query step; a row
 * that reads no key has lc >= DEAD); keep [Bk, S] 1.0/0.0 (Bk = 1: shared by every row);
 * w, gw, dec, dis [b, H, Lq, K, s1]; inv [b, H, Lq, K]; arg [b, H, Lq, K] int32;
 * grad_r [B, H, K, S]; theta_part [b * H].
 * Compiled with -ffast-math: no input may be inf or nan (the caller replaces -inf/inf by
 * finite sentinels); masked scores are -1e30, so exp(s - max) is exactly 0 there.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "fastmath.h"

#define MAXOUT_FLOOR 0.2f
#define MASKED -1e30f
#define DEAD 1e29f

typedef struct {
    const float *r, *lp, *lc, *theta, *keep;
    long B, H, K, S, keep_rows;
    long b0, t0, t1, s1;
    int strict;
} chunk_t;

/* Scores s_j (MASKED where not kept), decay and distance of row (b, h, t, k) over its n
 * readable keys; returns the largest score. ratio_j = P_j / C_t comes as pr_j * sc (see
 * `slot_weights`: one exp per key and chunk instead of one per key and step). */
static inline float row_scores(const chunk_t *c, long b, long h, long t, long k, long n,
                               const float *restrict pr, float sc, float *restrict s,
                               float *restrict dec, float *restrict dis) {
    const long base = ((b * c->H + h) * c->K + k) * c->S;
    const float *restrict r = c->r + base, *restrict lp = c->lp + base;
    const float *restrict keep = c->keep + (c->keep_rows == 1 ? 0 : b) * c->S;
    const float lct = c->lc[base + t], theta = c->theta[h], tf = (float)t;
    float m = MASKED;
#ifndef KT_SCALAR_DISTANCE
    /* vectorised: every load unconditional and j converted through int (AVX2 converts no
     * int64 vector to float); the kernel's flags keep the vector sqrt exact (-mrecip=!vec-sqrt),
     * so each lane computes what the scalar loop below did, to the bit (tests/test_native.py) */
    for (long j = 0; j < n; j++) {
        const float p = pr[j] * sc, rj = r[j]; /* pr and r hold at least n values */
        float q = lp[j] == lct ? 1.0f : p;     /* exactly 1: nothing after j */
        float d = sqrtf(fmaxf(0.0f, (q - 1.0f) * ((float)(int)j - tf)));
        float e = fmaxf(exp_(-theta * d), DECAY_MIN);
        float v = keep[j] > 0.5f ? rj * e : MASKED;
        s[j] = v;
        dec[j] = e;
        dis[j] = d;
        m = fmaxf(m, v);
    }
#else /* the loop as it was until 2026-11-29 (scalar: its conditional loads and int64 j) */
    for (long j = 0; j < n; j++) {
        float q = lp[j] == lct ? 1.0f : pr[j] * sc;
        float d = sqrtf(fmaxf(0.0f, (q - 1.0f) * ((float)j - tf)));
        float e = fmaxf(exp_(-theta * d), DECAY_MIN);
        float v = keep[j] > 0.5f ? r[j] * e : MASKED;
        s[j] = v;
        dec[j] = e;
        dis[j] = d;
        m = fmaxf(m, v);
    }
#endif
    return m;
}

static long readable(const chunk_t *c, long t) {
    long n = c->strict ? t : t + 1;
    return n < c->s1 ? n : c->s1;
}

void slot_weights(const float *r, const float *lp, const float *lc, const float *keep,
                  long keep_rows, const float *theta, long B, long H, long K, long S, long b0,
                  long b1, long t0, long t1, long s1, int strict, long p0, long p1, float *w,
                  float *dec, float *dis, float *inv, int32_t *arg) {
    chunk_t c = {r, lp, lc, theta, keep, B, H, K, S, keep_rows, b0, t0, t1, s1, strict};
    const long Lq = t1 - t0;
    /* ph, tmp: see below; dt, it: decay and distance of a row when the caller keeps none */
    float ph[S > 0 ? S : 1], tmp[S > 0 ? S : 1], dt[S > 0 ? S : 1], it[S > 0 ? S : 1];
    (void)b1;
    for (long pair = p0; pair < p1; pair++) {
        const long bi = pair / H, h = pair % H, b = b0 + bi;
        for (long k = 0; k < K; k++) {
            const long base = ((b * H + h) * K + k) * S;
            /* C_t grows with t: A = log C_t of the block's first step that reads a key is at
             * most every later one, so ratio_j = ph_j exp(A - lc_t) with ph_j = exp(lp_j - A)
             * computed once per key, and A depends on keys before that step only: a query's
             * numbers never depend on a later key, to the bit. A step with C_t above e^80 C_A
             * takes its ratios directly (ph_j could overflow there). */
            long first = 0;
            while (first < Lq && (readable(&c, t0 + first) <= 0 || lc[base + t0 + first] >= DEAD))
                first++;
            const float A = first < Lq ? lc[base + t0 + first] : 0.0f;
            if (first < Lq)
                for (long j = 0; j < s1; j++) ph[j] = exp_(lp[base + j] - A);
            for (long ti = 0; ti < Lq; ti++) {
                const long t = t0 + ti, n = readable(&c, t), row = ((pair * Lq) + ti) * K + k;
                const float lct = lc[base + t];
                float *out = w + row * s1;
                float *de = dec ? dec + row * s1 : dt, *di = dec ? dis + row * s1 : it;
                if (n <= 0 || lct >= DEAD) { /* reads no key */
                    memset(out, 0, sizeof(float) * s1);
                    if (dec) inv[row] = 0.0f, arg[row] = 0;
                    continue;
                }
                const float *pr = ph;
                float sc = 1.0f;
                if (lct > A + 80.0f) {
                    for (long j = 0; j < n; j++) tmp[j] = exp_(lp[base + j] - lct);
                    pr = tmp;
                } else {
                    sc = exp_(A - lct);
                }
                const float m = row_scores(&c, b, h, t, k, n, pr, sc, out, de, di);
                if (dec) {
                    long a = 0;
                    while (a < n - 1 && out[a] != m) a++;
                    arg[row] = (int32_t)a;
                }
                float sum = 0.0f;
                for (long j = 0; j < n; j++) {
                    float e = exp_(out[j] - m);
                    out[j] = e;
                    sum += e;
                }
                const float is = 1.0f / sum, scale = is / fmaxf(is, MAXOUT_FLOOR);
                for (long j = 0; j < n; j++) out[j] *= scale;
                if (n < s1) memset(out + n, 0, sizeof(float) * (s1 - n));
                if (dec) inv[row] = is;
            }
        }
    }
}

void slot_grads(const float *r, const float *lp, const float *lc, const float *keep,
                long keep_rows, const float *theta, long B, long H, long K, long S, long b0,
                long b1, long t0, long t1, long s1, int strict, long p0, long p1, const float *w,
                const float *dec, const float *dis, const float *inv, const int32_t *arg,
                const float *gw, float *grad_r, float *theta_part) {
    chunk_t c = {r, lp, lc, theta, keep, B, H, K, S, keep_rows, b0, t0, t1, s1, strict};
    const long Lq = t1 - t0;
    (void)b1;
    for (long pair = p0; pair < p1; pair++) {
        const long bi = pair / H, h = pair % H, b = b0 + bi;
        float acc = 0.0f;
        for (long ti = 0; ti < Lq; ti++) {
            const long t = t0 + ti, n = readable(&c, t);
            for (long k = 0; k < K; k++) {
                const long row = ((pair * Lq) + ti) * K + k;
                if (n <= 0 || inv[row] == 0.0f) continue; /* reads no key: no gradient */
                const float *restrict g = gw + row * s1, *restrict ww = w + row * s1;
                const float *restrict de = dec + row * s1, *restrict di = dis + row * s1;
                const long base = ((b * H + h) * K + k) * S;
                const float *restrict rr = r + base;
                float *restrict gr = grad_r + base;
                const float cap = fmaxf(inv[row], MAXOUT_FLOOR);
                const int bound = cap > MAXOUT_FLOOR;
                float dot = 0.0f;
                for (long j = 0; j < n; j++) dot += g[j] * ww[j];
                const float sub = bound ? 0.0f : dot * cap;
                float a = 0.0f;
                for (long j = 0; j < n; j++) {
                    float gs = (g[j] - sub) * ww[j] * de[j];
                    gr[j] += gs;
                    a += de[j] > DECAY_MIN ? gs * di[j] * rr[j] : 0.0f; /* clamp binds: 0 */
                }
                if (bound) { /* the max-out's path through cap, at the argmax only */
                    const long j = arg[row];
                    float gs = -dot * ww[j] * de[j];
                    gr[j] += gs;
                    a += de[j] > DECAY_MIN ? gs * di[j] * rr[j] : 0.0f;
                }
                acc += a;
            }
        }
        theta_part[pair] -= acc;
    }
}
