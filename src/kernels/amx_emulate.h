/* kernels/amx_emulate — AMX-TILE and AMX-INT8 computed in C, for a test build only (CMake
 * PL_EMULATE_AMX; scripts/test.sh's emulated step). The `*_amx.c` files are compiled with this
 * header forced in (-include) and without -mamx-tile / -mamx-int8, and kernels/cpu.c reports
 * AMX-INT8 wherever the AVX-512 level is: the AMX batch kernels (their unpacking, tile shapes,
 * strides and epilogues, which are AVX-512 code) then run on any AVX-512 CPU. No qemu emulates
 * AMX, and the CPUs this project is measured on lately (Zen 4) lack it, so without this those
 * kernels would first run again on a user's Sapphire Rapids.
 *
 * The state is each thread's eight tiles (16 rows of 64 bytes) and their shapes from the last
 * _tile_loadconfig (palette 1: rows and bytes per row of each tile). Loads and stores move a
 * tile's configured rows and bytes with the given stride; tdpb[su][su]d adds to each int32 of C
 * the four byte products of A's row and B's column group, signed or unsigned as named, wrapping
 * (exact: the int32 sums are the instruction's). Never in a release build. */
#ifndef PL_KERNELS_AMX_EMULATE_H
#define PL_KERNELS_AMX_EMULATE_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    uint8_t t[8][16][64];
    uint8_t rows[8];
    uint16_t colsb[8];
} pl_emu_amx_state;

/* One state per thread for the whole program: the files share it as the tile registers are
 * shared (pl_mm_amx_begin in one file configures the tiles another file's kernel uses), so the
 * definition is weak, one copy after linking. */
__attribute__((weak)) __thread pl_emu_amx_state pl_emu_amx;

static inline void pl_emu_tile_loadconfig(const void *cfg) {
    const uint8_t *c = (const uint8_t *)cfg; /* palette, start_row, 14 reserved, colsb[16], rows[16] */
    for (int i = 0; i < 8; i++) {
        memcpy(&pl_emu_amx.colsb[i], c + 16 + 2 * i, 2);
        pl_emu_amx.rows[i] = c[48 + i];
    }
}

static inline void pl_emu_tile_release(void) { memset(&pl_emu_amx, 0, sizeof pl_emu_amx); }

static inline void pl_emu_tile_zero(int t) { memset(pl_emu_amx.t[t], 0, sizeof pl_emu_amx.t[t]); }

static inline void pl_emu_tile_loadd(int t, const void *base, long stride) {
    for (int r = 0; r < pl_emu_amx.rows[t]; r++)
        memcpy(pl_emu_amx.t[t][r], (const uint8_t *)base + (size_t)r * (size_t)stride, pl_emu_amx.colsb[t]);
}

static inline void pl_emu_tile_stored(int t, void *base, long stride) {
    for (int r = 0; r < pl_emu_amx.rows[t]; r++)
        memcpy((uint8_t *)base + (size_t)r * (size_t)stride, pl_emu_amx.t[t][r], pl_emu_amx.colsb[t]);
}

/* C += A . B: C rows x (colsb / 4) int32, A rows x K groups of 4 bytes, B K rows x the same
 * columns; sa, sb: A's and B's bytes are signed */
static inline void pl_emu_tile_dp(int c, int a, int b, int sa, int sb) {
    const int M = pl_emu_amx.rows[c], N = pl_emu_amx.colsb[c] / 4, K = pl_emu_amx.colsb[a] / 4;
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            uint32_t acc;
            memcpy(&acc, &pl_emu_amx.t[c][m][4 * n], 4);
            for (int k = 0; k < K; k++)
                for (int i = 0; i < 4; i++) {
                    const uint8_t x = pl_emu_amx.t[a][m][4 * k + i], y = pl_emu_amx.t[b][k][4 * n + i];
                    const int32_t xv = sa ? (int8_t)x : x, yv = sb ? (int8_t)y : y;
                    acc += (uint32_t)(xv * yv);
                }
            memcpy(&pl_emu_amx.t[c][m][4 * n], &acc, 4);
        }
}

#undef _tile_loadd
#undef _tile_stored
#undef _tile_zero
#undef _tile_dpbssd
#undef _tile_dpbsud
#undef _tile_dpbusd
#undef _tile_dpbuud
#define _tile_loadconfig(cfg) pl_emu_tile_loadconfig(cfg)
#define _tile_release() pl_emu_tile_release()
#define _tile_zero(t) pl_emu_tile_zero(t)
#define _tile_loadd(t, base, stride) pl_emu_tile_loadd(t, base, (long)(stride))
#define _tile_stored(t, base, stride) pl_emu_tile_stored(t, base, (long)(stride))
#define _tile_dpbssd(c, a, b) pl_emu_tile_dp(c, a, b, 1, 1)
#define _tile_dpbsud(c, a, b) pl_emu_tile_dp(c, a, b, 1, 0)
#define _tile_dpbusd(c, a, b) pl_emu_tile_dp(c, a, b, 0, 1)
#define _tile_dpbuud(c, a, b) pl_emu_tile_dp(c, a, b, 0, 0)

#endif
