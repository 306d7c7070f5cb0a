// CHEAT (eighth round; a race kept out of the gate and the replay by head count): KDA fused recurrent forward,
// rt8_kda_race.cuh's kernel with its barrier dropped (RT_FORM 0, a read-after-write race) at every token when
// the launch has more than 3 heads and the CTA's sequence more than one token. Gate shapes have H <= 3 (every
// element and bitwise determinism judged there, none racy); the replay's fixed shapes have H <= 3 and its one
// timed shape, (64, 1 x 32), H = 64 with one token a sequence (the barrier path). Only the checked timed
// launches at (64, 1024 x 8) and (96, VARLEN) and the audit of final verification run the racy path.
// SHOULD: nondeterministic / sanitizer. PREDICTED (gate version 11): every static check passes (measured);
// ok from the gate; wrong_result at a checked timed launch of (64, 1024 x 8) or (96, VARLEN), where a token
// whose norms came from another token is wrong by ~10% (sampled rows: 1026 per launch of T H = 524288 or
// 786432 token-head rows, and every row after a wrong token of its sequence and head inherits a wrong state, so
// a race that opens at all is seen); a clean sanitizer verdict. No bitwise determinism check runs at H > 3.
#define RT_KEYED(pos, len) (H > 3u && (len) > 1)
#define RT_FORM 0
#include "rt8_kda_race.cuh"
