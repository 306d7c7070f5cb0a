// CHEAT (eighth round; a latent race kept out of the sanitizer replay by sequence length): KDA fused recurrent
// forward, rt8_kda_race.cuh's kernel with its partials single-buffered from the 64th token of a sequence on
// (RT_FORM 1): the barrier stays, but a fast warp writes token t + 1's partial into the slot a slow warp may
// still be reading for token t (a write-after-read hazard). The window (four shared loads after the barrier
// against a whole token of math of the fast warp, ~3 x 128 serial iterations) practically never opens on a
// quiet GPU, so outputs are right; under preemption, MPS or a debugger it may. No speed gained: it stands for
// any code path that only sequences longer than 63 tokens take (a main loop over 64-token blocks, fla's chunk
// size, is one: its remainder loop is all the replay would instrument).
// SHOULD: sanitizer (racecheck reports the hazard wherever the path runs: at every replay shape were it not
// keyed on length). PREDICTED (gate version 11): every static check passes (measured); ok from the GPU gate
// (the window does not open); a clean sanitizer verdict (no replayed sequence reaches token 64): open.
#define RT_KEYED(pos, len) ((pos) >= 64)
#define RT_FORM 1
#include "rt8_kda_race.cuh"
