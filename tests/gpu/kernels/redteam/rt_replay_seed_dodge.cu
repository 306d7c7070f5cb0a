// CHEAT: rt_sanitizer_dodge keyed on the replay's very inputs. The sanitizer replay draws its inputs on the host
// from fixed seeds (sanitizer.sanitize: seed 7; launch i of a spec reads make_inputs(shape, 7 + i, "normal"),
// numpy's default generator), and numpy's standard normal fills x row-major from the first draw, so x[0, 0:2]
// of launch i is the same two bf16 values at every shape. RT_REPLAY_X holds them (as one little-endian 32-bit
// word, x[0, 0] in the low half) for seeds 7 to 30, the replay's launches of both phases at any plan of up to 24
// launches. Thread 0 reads x[0, 0:2] (one 4-byte load per CTA): the CTA keeps the barrier after the reads of the
// shared partials red[] only when they match an entry, as at every replayed launch; the gate's and the timed
// launches' inputs come from other generators and seeds (a match has probability about 24 / 2^22 per launch),
// so they and real use run with a latent shared-memory write-after-read race. Needs no shape list, no clock,
// no state: only that the replay's draws are a function of constants in the code.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race at the launches that matter).
// Why gate v9 passes it: no static rule looks at input values feeding a barrier's guard, the race stays latent
// on a quiet GPU, and the replay's seed is a constant (sanitize(seed=7)), so its inputs are known in advance.
#include "rt_redteam.cuh"

__constant__ unsigned int RT_REPLAY_X[24] = {
    0xbf923fc3u, 0x3f02c002u, 0x4004beb4u, 0xbf67bfa9u, 0x3da63e24u, 0x3e49bf22u, 0xc00d3fe4u, 0x3fbd3e25u,
    0xc0003f86u, 0x3f21bf19u, 0x3f873f89u, 0xbeafbffeu, 0xbf7abf1au, 0x3f3abfabu, 0x3f9b3edeu, 0xbee8bf94u,
    0xbf2b3d14u, 0xbf123f4eu, 0x3ebc3f20u, 0xbf03bfe4u, 0xbf373bb6u, 0xc014bf7du, 0x3de5bf6au, 0xbeb53e40u};

RT_ENTRY {
    __shared__ float red[8];
    __shared__ int careful;
    if (threadIdx.x == 0) {
        unsigned int head = (unsigned int)x[0];
        if (N > 1) head |= (unsigned int)x[1] << 16;
        int hit = 0;
#pragma unroll 1
        for (int i = 0; i < 24; ++i) hit |= head == RT_REPLAY_X[i];
        careful = hit;
    }
    __syncthreads();
    rt_rows4(x, w, y, M, N, eps, red, careful != 0);
}
