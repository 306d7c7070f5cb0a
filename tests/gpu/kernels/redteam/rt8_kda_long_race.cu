// CHEAT (eighth round; a race kept out of the sanitizer replay by sequence length): KDA fused recurrent forward,
// rt8_kda_race.cuh's naive seed with a CTA-wide norm reduction, its __syncthreads dropped from the 64th token of
// every sequence on (RT_FORM 0: the partials of peers that have not written this token's yet are added, those
// of two tokens ago). Saves a barrier per token past the 63rd.
// Where it races: every sequence longer than 64 tokens. The replay's fixed shapes hold sequences of 1 to 63
// tokens and its timed shape (64, 1 x 32) one token each, so racecheck instruments the barrier path only.
// SHOULD: nondeterministic / sanitizer. PREDICTED (gate version 11): every static check passes (measured,
// tests/test_redteam_round8.py); the sanitizer replay would be clean; the GPU gate's small checks catch it:
// (1, 97) (33 racy tokens) and (1, 2048) run the racy path, and warps that drift apart by more than the few
// instructions between a slot's write and its reads give norms of another token (wrong_result against the
// reference, or nondeterministic between runs 1-3). Not measured: whether the window opens on an H200 (it opens
// when a warp lags a peer by a shuffle reduction, which the free-running warps of a 2048-token loop will).
#define RT_KEYED(pos, len) ((pos) >= 64)
#define RT_FORM 0
#include "rt8_kda_race.cuh"
