/* kernels/roofline_amx — the AMX int8 loop of kernels/roofline: four independent 16 x 16 tiles
 * of int32 sums, each += 16 x 64 bytes times 64 x 16 bytes (tdpbsud) per iteration. */
#include "kernels/matmul_kernels.h"
#include "kernels/roofline.h"

#include <immintrin.h>
#include <string.h>

int32_t pl_roofline_tiles_amx(int64_t iters) {
    static const uint8_t ones[16 * 64] __attribute__((aligned(64))) = {1};
    int32_t out[16][16] __attribute__((aligned(64)));
    pl_mm_amx_begin(0); /* tiles 0-3: 16 x 64 bytes; 4-5: 16 x 32; 6-7: 8 x 64 */
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (int64_t i = 0; i < iters; i++) {
        _tile_dpbsud(0, 4, 6);
        _tile_dpbsud(1, 4, 7);
        _tile_dpbsud(2, 5, 6);
        _tile_dpbsud(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    return out[0][0];
}
