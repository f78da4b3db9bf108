/* kernels/cpu — CPU feature detection and the choice of kernel instruction set.
 *
 * The level is detected once from CPUID (and XGETBV for OS support of the vector state) and can
 * be lowered, never raised, with the environment variable PAGELLM_ISA=scalar|avx2|avx512 or with
 * pl_cpu_force_isa() (tests use it to run every path the machine has).
 */
#ifndef PL_KERNELS_CPU_H
#define PL_KERNELS_CPU_H

typedef enum { PL_ISA_SCALAR = 0, PL_ISA_AVX2 = 1, PL_ISA_AVX512 = 2 } pl_isa;

typedef struct {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
} pl_cpu_features;

const pl_cpu_features *pl_cpu_get_features(void);
/* The best level this machine supports. */
pl_isa pl_cpu_max_isa(void);
/* The level kernels use now: min(max, PAGELLM_ISA, forced). */
pl_isa pl_cpu_isa(void);
/* Force a level (clamped to the machine's maximum); returns the level in effect. */
pl_isa pl_cpu_force_isa(pl_isa isa);
const char *pl_isa_name(pl_isa isa);

#endif
