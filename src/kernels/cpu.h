/* kernels/cpu — CPU feature detection and the choice of kernel instruction set.
 *
 * The level is detected once from CPUID (and XGETBV for OS support of the vector state) and can
 * be lowered, never raised, with the environment variable PAGELLM_ISA=scalar|avx2|avxvnni|avx512 or with
 * pl_cpu_force_isa() (tests use it to run every path the machine has).
 *
 * AMX (the int8 tiles) is a separate switch on top of the AVX-512 level: usable when CPUID has
 * AMX-TILE and AMX-INT8, the OS enables the tile state in XCR0, and Linux grants this process
 * the tile data (arch_prctl ARCH_REQ_XCOMP_PERM, asked once); PAGELLM_AMX=0 or
 * pl_cpu_force_amx(0) turn it off.
 */
#ifndef PL_KERNELS_CPU_H
#define PL_KERNELS_CPU_H

/* Ordered, with one gap: AVX-VNNI is AVX2 + FMA + F16C with the VEX vpdpbusd / vpdpwssd on ymm
 * (Intel client cores from Alder Lake, Sapphire Rapids on, AMD Zen 5); its own kernels are the
 * x16 layouts' VNNI tiles (q8_0, q4_0, iq4_nl, q5_0, q4_1, q5_1, the K-quants, iq4_xs, mxfp4), everything else runs AVX2's. An
 * AVX-512 CPU need not have it (AMD Zen 4, Intel Ice Lake / Cooper Lake: their VNNI is EVEX
 * only, and the VEX encoding faults there): on such a CPU the avxvnni level does not exist,
 * pl_cpu_isa() never returns it (a request for it gets avx2), and the AVX-512 level, where its
 * own kernels decline a case, falls back to AVX2's, never to AVX-VNNI's (pl_cpu_avxvnni()).
 * Every other level has every kernel of the levels below it (the AVX-512 level's bf16 ones only
 * with AVX512_BF16: pl_cpu_avx512bf16). A test build with
 * PL_EMULATE_AVXVNNI (kernels/avxvnni_emulate.h) reports AVX-VNNI wherever AVX2 is, one with
 * PL_EMULATE_AMX (kernels/amx_emulate.h) AMX-INT8 wherever AVX-512 is. */
typedef enum { PL_ISA_SCALAR = 0, PL_ISA_AVX2 = 1, PL_ISA_AVXVNNI = 2, PL_ISA_AVX512 = 3 } pl_isa;

typedef struct {
    int avx2, fma, f16c;
    int avx512f, avx512bw, avx512vl, avx512dq, avx512vnni, avx512bf16, avxvnni;
    int amx_int8; /* AMX-TILE + AMX-INT8 with the tile state enabled and granted */
    int amd;      /* vendor AuthenticAMD (the x16 K-quant tiles' prefetch: x16_prefetch.h) */
    int family;   /* CPUID's display family (AMD: 0x19 Zen 3 / Zen 4, 0x1a Zen 5) */
} pl_cpu_features;

const pl_cpu_features *pl_cpu_get_features(void);
/* The best level this machine supports. */
pl_isa pl_cpu_max_isa(void);
/* 1 if this machine can run the level's kernels (a level up to the maximum; avxvnni only with
 * the AVX-VNNI flag). Tests loop over the levels where this holds. */
int pl_cpu_has_isa(pl_isa isa);
/* The level kernels use now: min(max, PAGELLM_ISA, forced), and avx2 for an avxvnni this
 * machine does not have. */
pl_isa pl_cpu_isa(void);
/* 1 if the AVX-VNNI kernels may run now: the level is avxvnni or above and the CPU has AVX-VNNI.
 * Kernel choices ask this, not pl_cpu_isa() >= PL_ISA_AVXVNNI (see the gap above). */
int pl_cpu_avxvnni(void);
/* Force a level (clamped as pl_cpu_isa() is); returns the level in effect. */
pl_isa pl_cpu_force_isa(pl_isa isa);
const char *pl_isa_name(pl_isa isa);
/* 1 if the int8 AMX kernels may run now: amx_int8, the level is AVX-512, and not turned off. */
int pl_cpu_amx(void);
/* Tests: 0 turns AMX off, 1 back on where the machine has it, -1 back to PAGELLM_AMX's say;
 * returns pl_cpu_amx(). */
int pl_cpu_force_amx(int on);
/* 1 if the AVX-512 BF16 kernels may run now (vdpbf16ps: bf16 weights, --f16-weights bf16, the
 * bf16 peak): the CPU has AVX512_BF16, the level is AVX-512, and PAGELLM_AVX512_BF16=0 did not
 * turn them off. Without it the AVX-512 level runs AVX2's bf16 kernels (Cascade Lake, Ice Lake,
 * Tiger Lake: AVX-512 VNNI without BF16). Kernel choices ask this, never the level alone. */
int pl_cpu_avx512bf16(void);
/* Tests: 0 turns them off, 1 back on where the machine has them, -1 back to the environment's
 * say; returns pl_cpu_avx512bf16(). */
int pl_cpu_force_bf16(int on);

#endif
