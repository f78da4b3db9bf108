/* Which kernel ISAs a test's loop really ran, checked against what the CPU offers.
 *
 * The ISA loops go up to pl_cpu_max_isa(), so a CPUID detection that broke (or a level forced
 * down) would shrink them silently to scalar and every test would stay green. The loops record
 * pl_cpu_isa() once per level with isa_ran(); isa_coverage_check() prints the levels tested and
 * fails when /proc/cpuinfo (the kernel's view, independent of the code under test) lists all the
 * features of a level the AVX-512 / AVX-VNNI / AVX2 kernels are built for (see CMakeLists.txt and
 * kernels/cpu.c) but that level never ran. isa_run_group_tests() does the same for a whole cmocka
 * group (the tests of models, caches and engines whose results depend on the level). Include after
 * <cmocka.h> and "kernels/cpu.h".
 *
 * Under an emulated CPU (scripts/emu_cpu.sh: qemu-user with a CPU model such as EPYC-Milan, AVX2
 * without AVX-512) /proc/cpuinfo is still the host's, so the runner names the model's flags in
 * PL_TEST_EMULATED_FLAGS. It is honoured only where CPUID's brand string is a qemu model's
 * ("QEMU ...", "AMD EPYC-Milan Processor", "Intel Core Processor (Haswell)": names no real CPU
 * reports); anywhere else it is refused under CI, like the other local knobs (ci_env.h). */
#ifndef PL_TEST_ISA_COVERAGE_H
#define PL_TEST_ISA_COVERAGE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cpuid.h>

#include "../ci_env.h"

static inline void isa_ran(unsigned *mask) { *mask |= 1u << (unsigned)pl_cpu_isa(); }

static inline int isa_flag(const char *flags, const char *f) {
    size_t n = strlen(f);
    for (const char *p = flags; (p = strstr(p, f)) != NULL; p += n)
        if ((p == flags || p[-1] == ' ' || p[-1] == '\t' || p[-1] == ':') &&
            (p[n] == ' ' || p[n] == '\n' || p[n] == '\0'))
            return 1;
    return 0;
}

/* 1 when CPUID's brand string is one of qemu's CPU models (see the header comment). */
static inline int isa_cpu_is_emulated(void) {
    unsigned r[12] = {0}, a, b, c, d;
    if (__get_cpuid_max(0x80000000u, NULL) < 0x80000004u) return 0;
    for (unsigned i = 0; i < 3; i++) {
        __cpuid(0x80000002u + i, a, b, c, d);
        r[4 * i] = a, r[4 * i + 1] = b, r[4 * i + 2] = c, r[4 * i + 3] = d;
    }
    char brand[49];
    memcpy(brand, r, 48);
    brand[48] = '\0';
    /* qemu's models: "AMD EPYC-Milan Processor", "Intel Core Processor (Haswell)", "QEMU ..." */
    return strstr(brand, "QEMU") || strstr(brand, "EPYC-") ||
           !strncmp(brand, "Intel Core Processor (", 22);
}

/* The flags to judge the CPU by: PL_TEST_EMULATED_FLAGS on an emulated CPU, else NULL (read
 * /proc/cpuinfo). Set on a real CPU under CI, it fails the program: it would lower the check. */
static inline const char *isa_emulated_flags(void) {
    const char *v = getenv("PL_TEST_EMULATED_FLAGS");
    if (!v || isa_cpu_is_emulated()) return v;
    if (test_under_ci()) {
        fprintf(stderr, "PL_TEST_EMULATED_FLAGS=%s is set on a CPU that is not emulated (CPUID's "
                        "brand string is not a qemu model's): it would lower the ISA coverage "
                        "check; unset it\n", v);
        exit(1);
    }
    return v;
}

/* Where the flags come from, for the messages. */
static inline const char *isa_flags_source(void) {
    return getenv("PL_TEST_EMULATED_FLAGS") ? "PL_TEST_EMULATED_FLAGS" : "/proc/cpuinfo";
}

/* The levels /proc/cpuinfo's first "flags" line supports, as a mask of 1 << level (or
 * PL_TEST_EMULATED_FLAGS', on an emulated CPU), or 0 when there is none. avxvnni needs its own
 * flag: an AVX-512 CPU without AVX-VNNI (Zen 4, Ice Lake) has scalar, avx2 and avx512. */
static inline unsigned isa_cpuinfo_mask(void) {
    static char line[8192];
    const char *emu = isa_emulated_flags();
    FILE *f = emu ? NULL : fopen("/proc/cpuinfo", "r");
    if (!f && !emu) return 0;
    if (emu) snprintf(line, sizeof line, "flags\t: %s\n", emu);
    unsigned mask = 0;
    while (emu || fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            /* not avx512_bf16: without it the level runs (pl_cpu_avx512bf16) */
            static const char *const avx512[] = {"avx512f", "avx512bw", "avx512vl", "avx512dq",
                                                 "avx512_vnni", "fma", "f16c"};
            static const char *const avx2[] = {"avx2", "fma", "f16c"};
            int has512 = 1, has2 = 1;
            for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
                has512 &= isa_flag(line, avx512[i]);
            for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++) has2 &= isa_flag(line, avx2[i]);
            mask = 1u << PL_ISA_SCALAR;
            if (has2) mask |= 1u << PL_ISA_AVX2;
#ifdef PL_EMULATE_AVXVNNI
            if (has2) mask |= 1u << PL_ISA_AVXVNNI; /* kernels/avxvnni_emulate.h */
#else
            if (has2 && isa_flag(line, "avx_vnni")) mask |= 1u << PL_ISA_AVXVNNI;
#endif
            if (has512) mask |= 1u << PL_ISA_AVX512;
            break;
        }
    if (f) fclose(f);
    return mask;
}

/* The best level in a mask of levels, or -1 for none. */
static inline int isa_best(unsigned mask) {
    int best = -1;
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++)
        if (mask & (1u << i)) best = i;
    return best;
}

/* Where a level is tested instead of this run, or NULL when this run tests it:
 *   - in the emulated build (PL_EMULATE_AVXVNNI: kernels/avxvnni_emulate.h; PL_EMULATE_AMX:
 *     kernels/amx_emulate.h) every level but avxvnni and avx512 (where AMX runs), "the plain
 *     builds": that build exists for the AVX-VNNI and AMX kernels, and its other levels are the
 *     plain build's code;
 *   - else only scalar, and only on a CPU with AVX2 (the vector levels never move elsewhere):
 *     - on an emulated CPU (scripts/emu_cpu.sh) "the native runs": the scalar code does not
 *       depend on CPUID, and under qemu it was half of the emulated step's time;
 *     - in a whole-model group (group 1, isa_run_group) built with the sanitizers (PL_SANITIZE)
 *       "the plain build": there it was 240 of the suite's CPU seconds (every element of its
 *       one-dot-per-pair tiles checked), and what the sanitizers would find there is in the
 *       scalar kernels, which the kernel tests (test_matmul, test_ops, test_attention, ...) run
 *       under them at every level on every shape class; the engine code is the same at each
 *       level. */
static inline const char *isa_elsewhere(int level, int group) {
#if defined(PL_EMULATE_AVXVNNI) || defined(PL_EMULATE_AMX)
    (void)group;
#ifdef PL_EMULATE_AVXVNNI
    if (level == PL_ISA_AVXVNNI) return NULL;
#endif
#ifdef PL_EMULATE_AMX
    if (level == PL_ISA_AVX512) return NULL; /* where the AMX kernels run */
#endif
    return "the plain builds";
#else
    if (level != PL_ISA_SCALAR || !pl_cpu_has_isa(PL_ISA_AVX2)) return NULL;
    if (isa_emulated_flags()) return "the native runs";
#ifdef PL_SANITIZE
    if (group) return "the plain build";
#else
    (void)group;
#endif
    return NULL;
#endif
}

/* 1 if a kernel test's ISA loop runs this level here: a level the CPU has, unless it is tested
 * elsewhere (isa_elsewhere). */
static inline int isa_level_runs(int level) {
    return pl_cpu_has_isa((pl_isa)level) && !isa_elsewhere(level, 0);
}

/* The levels tested elsewhere (group: as isa_elsewhere), as a mask. */
static inline unsigned isa_excused(int group) {
    unsigned m = 0;
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++)
        if (isa_elsewhere(i, group)) m |= 1u << i;
    return m;
}

/* The levels in mask as " scalar avx2 ..." into out[64]. */
static inline void isa_names(unsigned mask, char *out) {
    out[0] = '\0';
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++)
        if (mask & (1u << i)) {
            strcat(out, " ");
            strcat(out, pl_isa_name((pl_isa)i));
        }
}

/* NULL when every level /proc/cpuinfo supports is in mask (or tested elsewhere: isa_excused) and
 * the levels detected agree with it, else what is missing or wrong (static text). */
static inline const char *isa_missing(const char *what, unsigned mask, int group) {
    static char msg[512];
    unsigned want = isa_cpuinfo_mask();
    if (!want) {
        const char *ci = getenv("CI");
        if (ci && !strcmp(ci, "true")) {
            snprintf(msg, sizeof msg, "%s: no /proc/cpuinfo flags under CI=true", what);
            return msg;
        }
        return NULL;
    }
    mask |= isa_excused(group);
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++)
        if ((want & (1u << i)) && !(mask & (1u << i))) {
            snprintf(msg, sizeof msg,
                     "%s: the CPU supports %s (%s) but the %s kernels were not "
                     "tested: pl_cpu_max_isa() is %s, CPU feature detection is broken",
                     what, pl_isa_name((pl_isa)isa_best(want)), isa_flags_source(),
                     pl_isa_name((pl_isa)i),
                     pl_isa_name(pl_cpu_max_isa()));
            return msg;
        }
    /* The levels detection offers are the flags' levels, and a level the CPU lacks is never in
     * effect: avxvnni on an AVX-512 CPU without AVX-VNNI (Zen 4) forces avx2, and the AVX-512
     * level there does not take the AVX-VNNI kernels (their VEX vpdpbusd faults on it). */
    pl_isa now = pl_cpu_isa();
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++) {
        pl_isa got = pl_cpu_force_isa((pl_isa)i);
        const char *bad = !pl_cpu_has_isa((pl_isa)i) != !(want & (1u << i))
                              ? "pl_cpu_has_isa() disagrees with the flags"
                          : !pl_cpu_has_isa(got) ? "forcing it put a level the CPU lacks in effect"
                          : pl_cpu_avxvnni() && !(want & (1u << PL_ISA_AVXVNNI))
                              ? "the AVX-VNNI kernels would run on a CPU without AVX-VNNI"
                              : NULL;
        if (bad) {
            snprintf(msg, sizeof msg, "%s: level %s (%s): %s", what, pl_isa_name((pl_isa)i),
                     isa_flags_source(), bad);
            pl_cpu_force_isa(now);
            return msg;
        }
    }
    pl_cpu_force_isa(now);
    return NULL;
}

/* "what: ISAs tested: ..." with the levels in mask, those the CPU has that are tested elsewhere
 * (group: as isa_elsewhere) and what the CPU offers. */
static inline void isa_print_tested(const char *what, unsigned mask, int group) {
    char tested[64], moved[64];
    isa_names(mask, tested);
    unsigned away = isa_excused(group) & isa_cpuinfo_mask() & ~mask;
    isa_names(away, moved);
    int want = isa_best(isa_cpuinfo_mask());
    printf("%s: ISAs tested:%s%s%s%s%s%s (CPU offers up to %s per %s, detected %s)\n", what, tested,
           away ? " (" : "", away ? moved + 1 : "", away ? ": " : "", away ? isa_elsewhere(isa_best(away), group) : "",
           away ? ")" : "", want < 0 ? "?" : pl_isa_name((pl_isa)want), isa_flags_source(),
           pl_isa_name(pl_cpu_max_isa()));
}

static inline void isa_coverage_check(const char *what, unsigned mask) {
    test_env("PAGELLM_ISA"); /* lowers every kernel call the loops do not force */
    isa_print_tested(what, mask, 0);
    const char *miss = isa_missing(what, mask, 0);
    if (miss) fail_msg("%s", miss);
}

/* main() of a test whose results depend on the kernel level: runs the whole group (its setup and
 * teardown included, so models are loaded, and repacked or not, at each level) once per level
 * the machine has, scalar first, forcing the level with pl_cpu_force_isa (no environment knob),
 * and says which level each run is at (a level may be tested elsewhere: isa_elsewhere). Returns the failed tests over all levels, plus one when a level
 * /proc/cpuinfo offers never ran (isa_missing) or PAGELLM_ISA is set under CI. */
static inline int isa_run_group(const char *name, const struct CMUnitTest *tests, size_t n,
                                CMFixtureFunction setup, CMFixtureFunction teardown) {
    int failed = 0;
    unsigned ran = 0;
    for (int level = PL_ISA_SCALAR; level <= (int)pl_cpu_max_isa(); level++)
        if (pl_cpu_has_isa((pl_isa)level) && isa_elsewhere(level, 1))
            printf("== %s: the %s level runs in %s\n", name, pl_isa_name((pl_isa)level),
                   isa_elsewhere(level, 1));
    const char *env = getenv("PAGELLM_ISA");
    if (env && test_under_ci()) {
        fprintf(stderr, "%s: PAGELLM_ISA=%s is set under CI; it lowers every level\n", name, env);
        failed++;
    }
    const char *filter = test_env_main("PL_TEST_FILTER"); /* a subset: local debugging only */
    if (filter) cmocka_set_test_filter(filter);
    for (int level = PL_ISA_SCALAR; level <= (int)pl_cpu_max_isa(); level++) {
        if (!pl_cpu_has_isa((pl_isa)level) || isa_elsewhere(level, 1)) continue;
        pl_cpu_force_isa((pl_isa)level);
        isa_ran(&ran);
        char label[160];
        snprintf(label, sizeof label, "%s @ %s", name, pl_isa_name(pl_cpu_isa()));
        printf("== %s: kernels at the %s level\n", name, pl_isa_name(pl_cpu_isa()));
        fflush(stdout);
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        failed += _cmocka_run_group_tests(label, tests, n, setup, teardown);
        clock_gettime(CLOCK_MONOTONIC, &t1);
        printf("== %s: the %s level took %.1f s\n", name, pl_isa_name(pl_cpu_isa()),
               (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
    }
    pl_cpu_force_isa(pl_cpu_max_isa());
    isa_print_tested(name, ran, 1);
    const char *miss = isa_missing(name, ran, 1);
    if (miss) {
        fprintf(stderr, "FAIL: %s\n", miss);
        failed++;
    }
    return failed;
}

/* cmocka_run_group_tests at every kernel level (isa_run_group). */
#define isa_run_group_tests(group, setup, teardown)                                               \
    isa_run_group(strrchr("/" __FILE__, '/') + 1, group, sizeof(group) / sizeof((group)[0]),     \
                  setup, teardown)

#endif
