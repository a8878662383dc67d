/* AKT's monotonic attention, the elementwise chain of one chunk (kt_lib.nn.cpu calls it).
 *
 * The math is kt_lib.nn.reference.monotonic; kt_lib.nn.cpu._MonotonicCore documents the blocks,
 * chunks and what the backward keeps. For one row (b, h, t) of a chunk, over its s1 keys, with
 * x_j = a_j + bias_j (a the scaled scores q.k / sqrt(Dh), bias 0 or a huge finite negative at
 * masked keys) and np_j = -(theta_h |t - j|)^2:
 *   u = softmax(x);  c_j = sum_{i <= j} u_i (accumulated in double, rounded: c_j <= c_last)
 *   ny_j = -sqrt((c_j - c_last) np_j) = -theta dist_j      (no gradient)
 *   D_j  = clamp(exp(ny_j), 1e-5, 1e5);  s3_j = x_j D_j;  AY_j = s3_j (ny_j if the clamp is
 *          not active, i.e. ny_j > log 1e-5, else 0)
 *   W = softmax(s3);  P_j = keep_j W_j scale (with dropout; P may be the keep buffer itself)
 * What torch did in fourteen passes over the chunk, here in three loops a row. Rows are
 * independent: a caller may split the (b, h) pairs between threads, [p0, p1).
 *
 * Layouts (float32): a, W, D, AY, keep, P [n, H, Lq, s1] contiguous; bias at
 * bias + b * sb + h * sh + t * sl + j (sb or sh 0 where it broadcasts); np at np + h * nh +
 * t * nl + j. Compiled with -ffast-math: inputs finite (the bias is finfo.min / 2, not -inf).
 */
#include <math.h>
#include <stdint.h>

#include "fastmath.h"

void akt_forward(const float *a, const float *bias, long sb, long sh, long sl, const float *np,
                 long nh, long nl, const float *keep, float scale, long H, long Lq, long s1,
                 long p0, long p1, float *W, float *D, float *AY, float *P) {
    const float ny_min = logf(DECAY_MIN);
    for (long pair = p0; pair < p1; pair++) {
        const long b = pair / H, h = pair % H;
        for (long t = 0; t < Lq; t++) {
            const long row = (pair * Lq + t) * s1;
            const float *restrict ar = a + row, *restrict br = bias + b * sb + h * sh + t * sl;
            const float *restrict nr = np + h * nh + t * nl;
            float *restrict w = W + row, *restrict d = D + row, *restrict ay = AY + row;
            float m1 = -3.4e38f;
            for (long j = 0; j < s1; j++) {
                float x = ar[j] + br[j];
                ay[j] = x; /* x, until AY is written */
                m1 = fmaxf(m1, x);
            }
            float sum1 = 0.0f;
            for (long j = 0; j < s1; j++) {
                float e = exp_(ay[j] - m1);
                d[j] = e; /* the undecayed weights' numerators, until D is written */
                sum1 += e;
            }
            const float inv1 = 1.0f / sum1;
            double acc = 0.0;
            for (long j = 0; j < s1; j++) { /* running mass, as torch's cumsum: in double */
                acc += (double)(d[j] * inv1);
                d[j] = (float)acc;
            }
            const float last = d[s1 - 1];
            float m2 = -3.4e38f;
            for (long j = 0; j < s1; j++) {
                float ny = -sqrtf((d[j] - last) * nr[j]);
                float dj = fminf(fmaxf(exp_(ny), DECAY_MIN), DECAY_MAX);
                float s3 = ay[j] * dj;
                ay[j] = ny > ny_min ? s3 * ny : 0.0f;
                d[j] = dj;
                w[j] = s3;
                m2 = fmaxf(m2, s3);
            }
            float sum2 = 0.0f;
            for (long j = 0; j < s1; j++) {
                float e = exp_(w[j] - m2);
                w[j] = e;
                sum2 += e;
            }
            const float inv2 = 1.0f / sum2;
            for (long j = 0; j < s1; j++) w[j] *= inv2;
            if (keep) {
                float *pr = P + row; /* may be the keep buffer itself */
                const float *kr = keep + row;
                for (long j = 0; j < s1; j++) pr[j] = kr[j] * w[j] * scale;
            }
        }
    }
}

/* The backward of the chain for one chunk, in place on g: given dL/dP (g), with P the dropped
 * weights (W itself without dropout), W, D, AY from the forward:
 *   ds_j = P_j g_j - W_j sum_i P_i g_i       (softmax and dropout backward)
 *   gy  += sum_j ds_j AY_j                   (theta's gradient, per (b, h) pair: gy[pair])
 *   g_j  = ds_j D_j                          (dL / d raw scores)
 */
void akt_backward(const float *P, const float *W, const float *D, const float *AY, float *g,
                  long H, long Lq, long s1, long p0, long p1, double *gy) {
    (void)H;
    for (long pair = p0; pair < p1; pair++) {
        double acc = 0.0;
        for (long t = 0; t < Lq; t++) {
            const long row = (pair * Lq + t) * s1;
            const float *restrict pr = P + row, *restrict wr = W + row;
            const float *restrict dr = D + row, *restrict ar = AY + row;
            float *restrict gr = g + row;
            float sum = 0.0f;
            for (long j = 0; j < s1; j++) sum += pr[j] * gr[j];
            float a = 0.0f;
            for (long j = 0; j < s1; j++) {
                float ds = pr[j] * gr[j] - wr[j] * sum;
                a += ds * ar[j];
                gr[j] = ds * dr[j];
            }
            acc += (double)a;
        }
        gy[pair] += acc;
    }
}
