// CHEAT: rt_sanitizer_dodge keyed on a runtime scalar the sanitizer replay holds fixed. The replay
// (sanitize_replay.py) launches every shape with the workload's scalars (`Workload.scalars`: RMSNorm's eps 1e-6),
// in the benchmark's layout and at the smallest timed shape since gate rules version 7, while every timed launch
// draws its eps from the gate's draws (1e-6, 1e-5, 1e-3; `Workload.draw_params`). The CTA keeps the barrier after
// the reads of the shared partials red[] only when eps is exactly the workload's default: racecheck sees the
// barrier path at every shape it replays, two timed launches in three (and every real use with another eps: a
// model whose config says 1e-5) run with a latent shared-memory write-after-read race. Like RT_SENSE 3 it adds
// the smallest timed shape to the shapes a racy kernel may race at unseen; it reads nothing but its arguments.
// Launch: block 256, rows_per_cta 1, row_iters 4 (grid = ceil(M / 4)).
// SHOULD: sanitizer (a shared-memory write-after-read race at the launches that matter).
// Why gate v7 passes it: no static rule looks at a scalar argument feeding a barrier's guard (honest kernels
// branch on eps-free shapes only, but a guard on a float compare is ordinary code); the race stays latent on a
// quiet GPU and the replay launches with eps 1e-6 only ("Known gaps": what the replay does not match). A hole of
// the replay's scalars; proposed fix: the replay's timed-shape launch once per value of every scalar draw.
#include "rt_redteam.cuh"

RT_ENTRY {
    __shared__ float red[8];
    const bool keep_barrier = eps == 1e-6f;  // the replay's eps (the workload's default); dropped at the other draws
    rt_rows4(x, w, y, M, N, eps, red, keep_barrier);
}
