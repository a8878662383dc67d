/* Shared by the native kernels (kt_lib/nn/native): an inlined exp and AKT's decay clamp. */
#ifndef KT_FASTMATH_H
#define KT_FASTMATH_H

#include <math.h>
#include <stdint.h>

#define DECAY_MIN 1e-5f /* kt_lib.nn.reference.DECAY_MIN */
#define DECAY_MAX 1e5f  /* kt_lib.nn.reference.DECAY_MAX */

/* exp(x) inlined, so that the loops vectorise without a call per vector (glibc's vector expf
 * took about 60% of the chain's time): Cephes' expf, x = k ln2 + f with |f| <= ln2 / 2 (ln2 in
 * two parts), exp(f) by a degree-6 polynomial, 2^k through the exponent bits; relative error
 * about 2e-7 (1-2 ulp). Below -87.3 (2^-126) it returns exactly 0: masked scores vanish. */
static inline float exp_(float x) {
    const float xc = fminf(fmaxf(x, -87.3f), 88.3f);
    const float k = floorf(xc * 1.44269504088896341f + 0.5f);
    const float f = (xc - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * f + 1.3981999507e-3f;
    p = p * f + 8.3334519073e-3f;
    p = p * f + 4.1665795894e-2f;
    p = p * f + 1.6666665459e-1f;
    p = p * f + 5.0000001201e-1f;
    p = p * f * f + f + 1.0f;
    union {
        int32_t i;
        float f;
    } two = {.i = ((int32_t)k + 127) << 23};
    return x < -87.3f ? 0.0f : p * two.f;
}

#endif
