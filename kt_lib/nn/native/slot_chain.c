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
 * `slot_weights` (the forward) writes w. `slot_backward` recomputes each row's w (written: the
 * caller's products need it) and, from dL/dw (which the caller computes from the values alone,
 * before), adds dL/dr (summed over the chunk's query steps) and dL/dtheta_h's terms in the same
 * pass, while the row's decay and distance are still in its scratch (until 2026-11-29 a
 * recompute wrote them out whole and a second pass read them back):
 *   dot = sum_j gw_j w_j;  dL/ds_j = (gw_j - [not bound] dot cap) w_j - [bound][j = arg] dot w_j
 *   (bound: the max-out's cap is max_j p_j > 0.2), dL/dr_j = dL/ds_j decay_j,
 *   dL/dtheta = -sum_j dL/ds_j decay_j dist_j r_j where the decay clamp does not bind.
 * Rows are independent: a caller may split the (b, h) pairs of a chunk between threads
 * (disjoint ranges [p0, p1)); grad_r rows belong to one (b, h) pair.
 *
 * Layouts (float32, contiguous): r, lp, lc [B, H, K, S] (lc indexed by the query step; a row
 * that reads no key has lc >= DEAD); keep [Bk, S] 1.0/0.0 (Bk = 1: shared by every row);
 * w, gw [b, H, Lq, K, s1]; grad_r [B, H, K, S]; theta_part [b * H].
 * Compiled with -ffast-math: no input may be inf or nan (the caller replaces -inf/inf by
 * finite sentinels); masked scores are -1e30, so exp(s - max) is exactly 0 there.
 */
#include <math.h>
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
 * `ratio_bases`: one exp per key and chunk instead of one per key and step). */
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

/* C_t grows with t: A = log C_t of the block's first step that reads a key is at most every
 * later one, so ratio_j = ph_j exp(A - lc_t) with ph_j = exp(lp_j - A) computed once per key
 * (and slot k of the pair), and A depends on keys before that step only: a query's numbers
 * never depend on a later key, to the bit. A step with C_t above e^80 C_A takes its ratios
 * directly (ph_j could overflow there). ph [K, s1], A [K]. */
static void ratio_bases(const chunk_t *c, long b, long h, float *restrict ph, float *restrict A) {
    const long Lq = c->t1 - c->t0, s1 = c->s1;
    for (long k = 0; k < c->K; k++) {
        const long base = ((b * c->H + h) * c->K + k) * c->S;
        long first = 0;
        while (first < Lq &&
               (readable(c, c->t0 + first) <= 0 || c->lc[base + c->t0 + first] >= DEAD))
            first++;
        A[k] = first < Lq ? c->lc[base + c->t0 + first] : 0.0f;
        if (first < Lq)
            for (long j = 0; j < s1; j++) ph[k * s1 + j] = exp_(c->lp[base + j] - A[k]);
    }
}

/* The max-out weights of row (b, h, t, k) into out[0..s1) (0 past its n readable keys), its
 * decay and distance into de, di; returns 1 / sum_j exp(s_j - max), 0 for a row that reads no
 * key (its weights all 0), and the argmax of s in *arg. */
static inline float row_weights(const chunk_t *c, long b, long h, long t, long k, const float *ph,
                                float A, float *restrict tmp, float *restrict out,
                                float *restrict de, float *restrict di, long *arg) {
    const long base = ((b * c->H + h) * c->K + k) * c->S, n = readable(c, t), s1 = c->s1;
    const float lct = c->lc[base + t];
    if (n <= 0 || lct >= DEAD) { /* reads no key */
        memset(out, 0, sizeof(float) * s1);
        *arg = 0;
        return 0.0f;
    }
    const float *pr = ph;
    float sc = 1.0f;
    if (lct > A + 80.0f) {
        for (long j = 0; j < n; j++) tmp[j] = exp_(c->lp[base + j] - lct);
        pr = tmp;
    } else {
        sc = exp_(A - lct);
    }
    const float m = row_scores(c, b, h, t, k, n, pr, sc, out, de, di);
    long a = 0;
    while (a < n - 1 && out[a] != m) a++;
    *arg = a;
    float sum = 0.0f;
    for (long j = 0; j < n; j++) {
        float e = exp_(out[j] - m);
        out[j] = e;
        sum += e;
    }
    const float is = 1.0f / sum, scale = is / fmaxf(is, MAXOUT_FLOOR);
    for (long j = 0; j < n; j++) out[j] *= scale;
    if (n < s1) memset(out + n, 0, sizeof(float) * (s1 - n));
    return is;
}

/* Adds row (b, h, t, k)'s dL/dr to gr from its dL/dw g and weights ww (n readable keys, decay
 * de, distance di, scores' inverse sum is, argmax a); returns minus its dL/dtheta term
 * (sum_j dL/ds_j decay_j dist_j r_j). */
static inline float row_grads(const float *restrict g, const float *restrict ww,
                              const float *restrict de, const float *restrict di,
                              const float *restrict rr, float *restrict gr, long n, float is,
                              long a) {
    const float cap = fmaxf(is, MAXOUT_FLOOR);
    const int bound = cap > MAXOUT_FLOOR;
    float dot = 0.0f;
    for (long j = 0; j < n; j++) dot += g[j] * ww[j];
    const float sub = bound ? 0.0f : dot * cap;
    float acc = 0.0f;
    for (long j = 0; j < n; j++) {
        float gs = (g[j] - sub) * ww[j] * de[j];
        gr[j] += gs;
        acc += de[j] > DECAY_MIN ? gs * di[j] * rr[j] : 0.0f; /* clamp binds: 0 */
    }
    if (bound) { /* the max-out's path through cap, at the argmax only */
        float gs = -dot * ww[a] * de[a];
        gr[a] += gs;
        acc += de[a] > DECAY_MIN ? gs * di[a] * rr[a] : 0.0f;
    }
    return acc;
}

/* The entry points take the caller's scratch for the ratio bases (benchmarks/bench_slot_kernel.py
 * reads this to call a revision's build with the arguments it expects). */
const int slot_chain_takes_scratch = 1;

/* The forward: the weights w [b, H, Lq, K, s1] of the (b, h) pairs p0..p1 of the chunk.
 * bases [b * H, K, s1]: the caller's scratch for each pair's ratio bases (on the heap: a
 * thread's stack may be small). */
void slot_weights(const float *r, const float *lp, const float *lc, const float *keep,
                  long keep_rows, const float *theta, long B, long H, long K, long S, long b0,
                  long b1, long t0, long t1, long s1, int strict, long p0, long p1,
                  float *bases, float *w) {
    chunk_t c = {r, lp, lc, theta, keep, B, H, K, S, keep_rows, b0, t0, t1, s1, strict};
    const long Lq = t1 - t0, n1 = S > 0 ? S : 1;
    float tmp[n1], de[n1], di[n1], A[K > 0 ? K : 1]; /* one row's scratch */
    (void)b1;
    for (long pair = p0; pair < p1; pair++) {
        const long b = b0 + pair / H, h = pair % H;
        float *ph = bases + pair * K * s1;
        ratio_bases(&c, b, h, ph, A);
        for (long ti = 0; ti < Lq; ti++)
            for (long k = 0; k < K; k++) {
                long a;
                float *out = w + (((pair * Lq) + ti) * K + k) * s1;
                row_weights(&c, b, h, t0 + ti, k, ph + k * s1, A[k], tmp, out, de, di, &a);
            }
    }
}

/* The backward, in one pass per row: recomputes the weights w (written, for the caller's
 * products), and from dL/dw gw [b, H, Lq, K, s1] adds dL/dr to grad_r [B, H, K, S] and
 * dL/dtheta_h to theta_part [b * H] (row_grads' terms, negated; summed over the rows in (t, k)
 * order). Decay and distance live in a row's scratch only; bases as in `slot_weights`. */
void slot_backward(const float *r, const float *lp, const float *lc, const float *keep,
                   long keep_rows, const float *theta, long B, long H, long K, long S, long b0,
                   long b1, long t0, long t1, long s1, int strict, long p0, long p1,
                   float *bases, const float *gw, float *w, float *grad_r, float *theta_part) {
    chunk_t c = {r, lp, lc, theta, keep, B, H, K, S, keep_rows, b0, t0, t1, s1, strict};
    const long Lq = t1 - t0, n1 = S > 0 ? S : 1;
    float tmp[n1], de[n1], di[n1], A[K > 0 ? K : 1];
    (void)b1;
    for (long pair = p0; pair < p1; pair++) {
        const long b = b0 + pair / H, h = pair % H;
        float *ph = bases + pair * K * s1;
        ratio_bases(&c, b, h, ph, A);
        float acc = 0.0f;
        for (long ti = 0; ti < Lq; ti++)
            for (long k = 0; k < K; k++) {
                const long row = ((pair * Lq) + ti) * K + k, base = ((b * H + h) * K + k) * S;
                long a;
                float *out = w + row * s1;
                const float is =
                    row_weights(&c, b, h, t0 + ti, k, ph + k * s1, A[k], tmp, out, de, di, &a);
                if (is == 0.0f) continue; /* reads no key: no gradient */
                acc += row_grads(gw + row * s1, out, de, di, r + base, grad_r + base,
                                 readable(&c, t0 + ti), is, a);
            }
        theta_part[pair] -= acc;
    }
}
