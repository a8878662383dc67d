/* stableKT's penumbral score: the lca height of one chunk and its gradient (kt_lib.nn.penumbral
 * calls it; the math is kt_lib.nn.reference.penumbral_scores, written out in penumbral.py's
 * `_lca` and `_lca_grads`). For a query i and key j of a (b, h) pair, with delta_ij the distance
 * of their points, zq_i and zk_j their heights, r the radius and eps the authors' 1e-6:
 *   rho_q = sqrt(r^2 - zq^2 + eps), rho_k likewise;  gap = rho_q + rho_k - delta
 *   inner = r^2 - gap^2 / 4;  m0 = max(zq^2, zk^2);  inside = max(inner, m0)
 *   ratio = (delta^2 + zk^2 - zq^2) / (2 delta + eps)
 *   cone = delta <= rho_q  or  zk^2 + (delta - rho_q)^2 <= r^2
 *   lca = inside in the cone, ratio^2 + zq^2 out of it
 * The forward writes scale * lca over delta; the backward turns G = d loss / d lca (in place)
 * into d loss / d delta and writes d loss / d zq [Lq] and d loss / d zk [s1] of each pair (the
 * sums over keys and over queries), ties of a max sharing the gradient half and half (as
 * torch.maximum). What torch did in about forty passes over the chunk, here one loop.
 *
 * Layouts (float32): delta, G [n, H, Lq, s1] contiguous; zq at zq + b*qb + h*qh + i*ql, zk at
 * zk + b*kb + h*kh + j*kl; dzq [n, H, Lq], dzk [n, H, s1] contiguous. Pairs [p0, p1) are
 * independent: a caller may split them between threads.
 */
#include <math.h>

static inline float half_ties(float a, float b) { return a > b ? 1.0f : (a == b ? 0.5f : 0.0f); }

void lca_forward(float *delta, const float *zq, long qb, long qh, long ql, const float *zk,
                 long kb, long kh, long kl, long H, long Lq, long s1, float radius, float eps,
                 float scale, long p0, long p1) {
    const float r2 = radius * radius;
    for (long pair = p0; pair < p1; pair++) {
        const long b = pair / H, h = pair % H;
        const float *zqp = zq + b * qb + h * qh, *zkp = zk + b * kb + h * kh;
        for (long i = 0; i < Lq; i++) {
            const float zq2 = zqp[i * ql] * zqp[i * ql];
            const float rho_q = sqrtf(r2 - zq2 + eps);
            float *row = delta + (pair * Lq + i) * s1;
            for (long j = 0; j < s1; j++) {
                const float d = row[j], zk2 = zkp[j * kl] * zkp[j * kl];
                const float off = d - rho_q;
                float lca;
                if (d <= rho_q || zk2 + off * off <= r2) {
                    const float gap = rho_q + sqrtf(r2 - zk2 + eps) - d;
                    const float inner = r2 - 0.25f * gap * gap;
                    const float m0 = zq2 > zk2 ? zq2 : zk2;
                    lca = inner > m0 ? inner : m0;
                } else {
                    const float ratio = (d * d + zk2 - zq2) / (2.0f * d + eps);
                    lca = ratio * ratio + zq2;
                }
                row[j] = lca * scale;
            }
        }
    }
}

void lca_backward(float *G, const float *delta, const float *zq, long qb, long qh, long ql,
                  const float *zk, long kb, long kh, long kl, long H, long Lq, long s1,
                  float radius, float eps, long p0, long p1, float *dzq, float *dzk) {
    const float r2 = radius * radius;
    for (long pair = p0; pair < p1; pair++) {
        const long b = pair / H, h = pair % H;
        const float *zqp = zq + b * qb + h * qh, *zkp = zk + b * kb + h * kh;
        float *gk = dzk + pair * s1;  /* d loss / d zk^2, then / d zk */
        float *gq = dzq + pair * Lq;
        for (long j = 0; j < s1; j++) gk[j] = 0.0f;
        /* d loss / d rho_k, summed over the queries, kept apart (its chain rule ends below) */
        float rk_acc[s1 > 0 ? s1 : 1];
        for (long j = 0; j < s1; j++) rk_acc[j] = 0.0f;
        for (long i = 0; i < Lq; i++) {
            const float zq2 = zqp[i * ql] * zqp[i * ql];
            const float rho_q = sqrtf(r2 - zq2 + eps);
            float *g = G + (pair * Lq + i) * s1;
            const float *row = delta + (pair * Lq + i) * s1;
            float d_zq2 = 0.0f, d_rho_q = 0.0f;
            for (long j = 0; j < s1; j++) {
                const float d = row[j], gij = g[j], zk2 = zkp[j * kl] * zkp[j * kl];
                const float off = d - rho_q;
                if (d <= rho_q || zk2 + off * off <= r2) {
                    const float gap = rho_q + sqrtf(r2 - zk2 + eps) - d;
                    const float inner = r2 - 0.25f * gap * gap;
                    const float m0 = zq2 > zk2 ? zq2 : zk2;
                    const float d_inner = gij * half_ties(inner, m0);
                    const float d_m0 = gij - d_inner;
                    const float share_q = half_ties(zq2, zk2);
                    d_zq2 += d_m0 * share_q;
                    gk[j] += d_m0 * (1.0f - share_q);
                    const float d_gap = d_inner * gap * -0.5f;
                    d_rho_q += d_gap;
                    rk_acc[j] += d_gap;
                    g[j] = -d_gap;
                } else {
                    const float den = 2.0f * d + eps;
                    const float ratio = (d * d + zk2 - zq2) / den;
                    const float d_num = gij * ratio * 2.0f / den;
                    gk[j] += d_num;
                    d_zq2 += gij - d_num;
                    g[j] = 2.0f * d_num * (d - ratio);
                }
            }
            d_zq2 -= d_rho_q / (2.0f * rho_q);
            gq[i] = d_zq2 * 2.0f * zqp[i * ql];
        }
        for (long j = 0; j < s1; j++) {
            const float zkj = zkp[j * kl];
            const float rho_k = sqrtf(r2 - zkj * zkj + eps);
            gk[j] = (gk[j] - rk_acc[j] / (2.0f * rho_k)) * 2.0f * zkj;
        }
    }
}
