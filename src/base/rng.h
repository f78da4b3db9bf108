/* base/rng — a small seeded PRNG (xoshiro256**, seeded through splitmix64). Each request owns
 * its own state, so a seeded request draws the same numbers whatever else runs beside it. */
#ifndef PL_BASE_RNG_H
#define PL_BASE_RNG_H

#include <stdint.h>

typedef struct {
    uint64_t s[4];
} pl_rng;

void pl_rng_seed(pl_rng *r, uint64_t seed);
uint64_t pl_rng_next(pl_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double pl_rng_uniform(pl_rng *r);
/* Uniform integer in [0, n), n > 0, without modulo bias. */
uint64_t pl_rng_below(pl_rng *r, uint64_t n);
/* Standard normal (Box–Muller). */
double pl_rng_normal(pl_rng *r);

#endif
