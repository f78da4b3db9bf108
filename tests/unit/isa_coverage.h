/* Which kernel ISAs a test's loop really ran, checked against what the CPU offers.
 *
 * The ISA loops go up to pl_cpu_max_isa(), so a CPUID detection that broke (or a level forced
 * down) would shrink them silently to scalar and every test would stay green. The loops record
 * pl_cpu_isa() once per level with isa_ran(); isa_coverage_check() prints the levels tested and
 * fails when /proc/cpuinfo (the kernel's view, independent of the code under test) lists all the
 * features of a level the AVX-512 / AVX2 kernels are built for (see CMakeLists.txt and
 * kernels/cpu.c) but that level never ran. Include after <cmocka.h> and "kernels/cpu.h". */
#ifndef PL_TEST_ISA_COVERAGE_H
#define PL_TEST_ISA_COVERAGE_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* The best level /proc/cpuinfo's first "flags" line supports, or -1 when there is none. */
static inline int isa_cpuinfo_level(void) {
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return -1;
    static char line[8192];
    int level = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, "flags", 5)) {
            static const char *const avx512[] = {"avx512f",     "avx512bw",    "avx512vl",
                                                 "avx512dq",    "avx512_vnni", "avx512_bf16",
                                                 "fma",         "f16c"};
            static const char *const avx2[] = {"avx2", "fma", "f16c"};
            int has512 = 1, has2 = 1;
            for (size_t i = 0; i < sizeof avx512 / sizeof *avx512; i++)
                has512 &= isa_flag(line, avx512[i]);
            for (size_t i = 0; i < sizeof avx2 / sizeof *avx2; i++) has2 &= isa_flag(line, avx2[i]);
            level = has512 ? PL_ISA_AVX512 : has2 ? PL_ISA_AVX2 : PL_ISA_SCALAR;
            break;
        }
    fclose(f);
    return level;
}

static inline void isa_coverage_check(const char *what, unsigned mask) {
    test_env("PAGELLM_ISA"); /* lowers every kernel call the loops do not force */
    char tested[64] = "";
    for (int i = PL_ISA_SCALAR; i <= PL_ISA_AVX512; i++)
        if (mask & (1u << i)) {
            strcat(tested, " ");
            strcat(tested, pl_isa_name((pl_isa)i));
        }
    int want = isa_cpuinfo_level();
    print_message("%s: ISAs tested:%s (CPU offers up to %s per /proc/cpuinfo, detected %s)\n",
                  what, tested, want < 0 ? "?" : pl_isa_name((pl_isa)want),
                  pl_isa_name(pl_cpu_max_isa()));
    if (want < 0) {
        const char *ci = getenv("CI");
        if (ci && !strcmp(ci, "true")) fail_msg("%s: no /proc/cpuinfo flags under CI=true", what);
        return;
    }
    for (int i = PL_ISA_SCALAR; i <= want; i++)
        if (!(mask & (1u << i)))
            fail_msg("%s: the CPU supports %s (/proc/cpuinfo) but the %s kernels were not "
                     "tested: pl_cpu_max_isa() is %s, CPU feature detection is broken",
                     what, pl_isa_name((pl_isa)want), pl_isa_name((pl_isa)i),
                     pl_isa_name(pl_cpu_max_isa()));
}

#endif
