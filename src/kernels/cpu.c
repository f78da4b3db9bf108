/* kernels/cpu — see cpu.h. */
#include "kernels/cpu.h"

#include "base/log.h"
#include "kernels/matmul_kernels.h"
#include "kernels/x16_prefetch.h"

#include <cpuid.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

int pl_x16_prefetch_l1; /* x16_prefetch.h; set in init() */
int pl_x16_f16_wide;    /* matmul_kernels.h; set in init() */

/* Detected once (pthread_once: kernels on every thread ask), then read-only. */
static pl_cpu_features feats;
static pl_isa max_isa, env_level;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static atomic_int forced = -1; /* pl_cpu_force_isa, for tests */
static atomic_int forced_amx = -1; /* pl_cpu_force_amx, for tests */
static int env_amx = 1;
static atomic_int forced_bf16 = -1; /* pl_cpu_force_bf16, for tests */
static int env_bf16 = 1;

static uint64_t xgetbv0(void) {
    uint32_t eax, edx;
    __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
    return ((uint64_t)edx << 32) | eax;
}

static void detect(void) {
    unsigned a, b, c, d;
    memset(&feats, 0, sizeof feats);
    if (__get_cpuid(0, &a, &b, &c, &d)) /* "AuthenticAMD" in ebx, edx, ecx */
        feats.amd = b == 0x68747541u && d == 0x69746e65u && c == 0x444d4163u;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return;
    /* family: the base (eax 8-11), plus the extended one (eax 20-27) where the base is 0xF */
    feats.family = (int)((a >> 8) & 0xf) + (((a >> 8) & 0xf) == 0xf ? (int)((a >> 20) & 0xff) : 0);
    int osxsave = (c >> 27) & 1;
    int avx = (c >> 28) & 1;
    feats.fma = (c >> 12) & 1;
    feats.f16c = (c >> 29) & 1;
    uint64_t xcr0 = osxsave ? xgetbv0() : 0;
    int ymm_ok = avx && (xcr0 & 0x6) == 0x6;
    int zmm_ok = ymm_ok && (xcr0 & 0xe0) == 0xe0;
    if (!ymm_ok) feats.fma = feats.f16c = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
        feats.avx2 = ymm_ok && ((b >> 5) & 1);
        if (zmm_ok) {
            feats.avx512f = (b >> 16) & 1;
            feats.avx512dq = (b >> 17) & 1;
            feats.avx512bw = (b >> 30) & 1;
            feats.avx512vl = (b >> 31) & 1;
            feats.avx512vnni = (c >> 11) & 1;
        }
        /* AMX: TILE (edx 24) and INT8 (edx 25), XCR0's TILECFG and TILEDATA (bits 17, 18), and
         * Linux's permission for the tile data (an xfeature each process must ask for) */
        int tile_os = (xcr0 & 0x60000) == 0x60000;
        if (zmm_ok && tile_os && ((d >> 24) & 1) && ((d >> 25) & 1)) {
#ifdef SYS_arch_prctl
            feats.amx_int8 = syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */,
                                     18 /* XFEATURE_XTILEDATA */) == 0;
#endif
        }
    }
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) {
        feats.avxvnni = ymm_ok && ((a >> 4) & 1);
        feats.avx512bf16 = zmm_ok && ((a >> 5) & 1);
    }
}

/* A two-way knob: 1 if the variable is on, 0 if off, def if unset or empty; anything else warns
 * and keeps def (a typo must not pass silently). */
static int env_switch(const char *name, const char *on, const char *off, int def) {
    const char *v = getenv(name);
    if (v && !strcmp(v, on)) return 1;
    if (v && !strcmp(v, off)) return 0;
    if (v && *v) PL_WARN("%s='%s' is not %s or %s; ignored", name, v, on, off);
    return def;
}

static void init(void) {
    detect();
#ifdef PL_EMULATE_AVXVNNI
    /* the test build whose AVX-VNNI files compute vpdpbusd / vpdpwssd with AVX2
     * (kernels/avxvnni_emulate.h): those tiles run wherever AVX2 does */
    feats.avxvnni = feats.avx2 && feats.fma && feats.f16c;
#endif
#ifdef PL_EMULATE_AMX
    /* the test build whose AMX files compute the tile instructions in C (kernels/amx_emulate.h):
     * those kernels run wherever the AVX-512 level does */
    feats.amx_int8 = feats.avx512f && feats.avx512bw && feats.avx512vl && feats.avx512dq && feats.avx512vnni;
#endif
    const pl_cpu_features *f = &feats;
    /* The AVX-512 kernels need F+BW+VL+DQ+VNNI; BF16's (vdpbf16ps, vcvtneps2bf16) are asked
     * for apart (pl_cpu_avx512bf16): Cascade Lake, Ice Lake and Tiger Lake have VNNI, not BF16. */
    if (f->avx512f && f->avx512bw && f->avx512vl && f->avx512dq && f->avx512vnni && f->fma && f->f16c)
        max_isa = PL_ISA_AVX512;
    else if (f->avx2 && f->fma && f->f16c && f->avxvnni)
        max_isa = PL_ISA_AVXVNNI;
    else if (f->avx2 && f->fma && f->f16c)
        max_isa = PL_ISA_AVX2;
    else
        max_isa = PL_ISA_SCALAR;
    /* PAGELLM_ISA, read once (kernels ask for the level on every call, some once per row). */
    const char *s = getenv("PAGELLM_ISA");
    env_level = PL_ISA_AVX512;
    if (s && !strcmp(s, "scalar")) env_level = PL_ISA_SCALAR;
    else if (s && !strcmp(s, "avx2")) env_level = PL_ISA_AVX2;
    else if (s && !strcmp(s, "avxvnni")) {
        env_level = PL_ISA_AVXVNNI;
        if (!feats.avxvnni && max_isa >= PL_ISA_AVXVNNI)
            PL_WARN("PAGELLM_ISA=avxvnni: this CPU has no AVX-VNNI (its VNNI is AVX-512's only); "
                    "kernels use avx2");
    } else if (s && *s && strcmp(s, "avx512")) /* a typo must not pass silently for "scalar" */
        PL_WARN("PAGELLM_ISA='%s' is not scalar, avx2, avxvnni or avx512; ignored (kernels use %s)", s,
                pl_isa_name(max_isa));
    /* the K-quant tiles' prefetch (x16_prefetch.h), for A/B runs */
    pl_x16_prefetch_l1 = env_switch("PAGELLM_PREFETCH", "l1", "l2l3",
                                    feats.amd && feats.family >= 0x1a); /* Zen 5 on */
    /* the AVX-512 f16 and bf16 tiles' shape (matmul_x16_f16_avx512.c), for A/B runs */
    pl_x16_f16_wide = env_switch("PAGELLM_F16_TILE", "wide", "narrow",
                                 feats.amd && feats.family == 0x19); /* Zen 4 (Zen 3: no AVX-512) */
    env_amx = env_switch("PAGELLM_AMX", "1", "0", 1);
    env_bf16 = env_switch("PAGELLM_AVX512_BF16", "1", "0", 1);
}

const pl_cpu_features *pl_cpu_get_features(void) {
    pthread_once(&once, init);
    return &feats;
}

pl_isa pl_cpu_max_isa(void) {
    pthread_once(&once, init);
    return max_isa;
}

int pl_cpu_has_isa(pl_isa isa) {
    pthread_once(&once, init);
    return isa <= max_isa && (isa != PL_ISA_AVXVNNI || feats.avxvnni);
}

pl_isa pl_cpu_isa(void) {
    pthread_once(&once, init);
    int f = atomic_load_explicit(&forced, memory_order_relaxed);
    pl_isa e = f >= 0 ? (pl_isa)f : env_level;
    if (e > max_isa) e = max_isa;
    return e == PL_ISA_AVXVNNI && !feats.avxvnni ? PL_ISA_AVX2 : e;
}

int pl_cpu_avxvnni(void) {
    return pl_cpu_isa() >= PL_ISA_AVXVNNI && feats.avxvnni;
}

pl_isa pl_cpu_force_isa(pl_isa isa) {
    atomic_store(&forced, (int)isa);
    return pl_cpu_isa();
}

/* A switch on top of the AVX-512 level (AMX, AVX512-BF16): the CPU has the feature, the level
 * is AVX-512, and neither a test (forced: 0 or 1, -1 for none) nor the environment turned it off. */
static int avx512_switch(atomic_int *forced_sw, const int *env, const int *feature) {
    pthread_once(&once, init);
    int f = atomic_load_explicit(forced_sw, memory_order_relaxed);
    return (f >= 0 ? f : *env) && *feature && pl_cpu_isa() == PL_ISA_AVX512;
}

int pl_cpu_amx(void) {
    return avx512_switch(&forced_amx, &env_amx, &feats.amx_int8); /* read after init */
}

int pl_cpu_force_amx(int on) {
    atomic_store(&forced_amx, on < 0 ? -1 : !!on);
    return pl_cpu_amx();
}

int pl_cpu_avx512bf16(void) {
    return avx512_switch(&forced_bf16, &env_bf16, &feats.avx512bf16);
}

int pl_cpu_force_bf16(int on) {
    atomic_store(&forced_bf16, on < 0 ? -1 : !!on);
    return pl_cpu_avx512bf16();
}

const char *pl_isa_name(pl_isa isa) {
    switch (isa) {
    case PL_ISA_SCALAR: return "scalar";
    case PL_ISA_AVX2: return "avx2";
    case PL_ISA_AVXVNNI: return "avxvnni";
    case PL_ISA_AVX512: return "avx512";
    }
    return "?";
}
