// The naive KDA chunked state pass (workloads/kda/kda_chunk_naive.cu) with one defect chosen by BROKEN:
// 1: forgets the chunk decay; 2: never writes the final state; 3: skips the tokens of a shorter last chunk.
#ifndef BROKEN
#define BROKEN 1
#endif
#define BV 128
#if BROKEN == 1
#define CHUNK_DECAY(g, s) (s)
#elif BROKEN == 2
#define STORE_FINAL_STATE 0
#elif BROKEN == 3
#define CHUNK_ROWS(left) ((left) >= CHUNK ? CHUNK : 0)
#endif
#include "../../../workloads/kda/kda_chunk_naive.cu"
