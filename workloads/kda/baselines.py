"""KDA's library baseline: fla's ``fused_recurrent_kda`` (PyPI ``fla-core``, Triton kernels).

Called as the kernel under test computes it: raw g with ``use_gate_in_kernel=True``, ``A_log``, ``dt_bias``
and ``lower_bound=-5`` (the safe gate), raw beta with ``use_beta_sigmoid_in_kernel=True``,
``use_qk_l2norm_in_kernel=True``, the initial state and ``output_final_state=True``, on the very device
buffers the candidate reads (DLPack, no copy), [1, T, H, 128] views with ``cu_seqlens`` (int64, as fla takes
it). fla allocates its output and final state on every call; that cost is part of its time.
FlashKDA (CUTLASS, needs a C++ build) is not timed here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from workloads.kda.reference import LOWER_BOUND


def fla_baselines(inputs: Mapping[str, Any], shape: tuple[int, ...], names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """{"fla": callable} when asked for and importable, else {} with the reason in ``notes["fla"]``."""
    if "fla" not in names:
        return {}
    try:
        import torch
        from fla.ops.kda import fused_recurrent_kda
    except Exception as e:  # fla-core, triton or torch missing
        notes["fla"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}

    def bf16(name: str) -> Any:
        return torch.from_dlpack(inputs[name]).view(torch.bfloat16).unsqueeze(0)

    q, k, v, g, beta = (bf16(n) for n in ("q", "k", "v", "g", "beta"))
    A_log, dt_bias = torch.from_dlpack(inputs["A_log"]), torch.from_dlpack(inputs["dt_bias"])
    h0 = torch.from_dlpack(inputs["state"])
    cu = torch.from_dlpack(inputs["cu_seqlens"]).to(torch.int64)
    scale = q.shape[-1] ** -0.5

    def run() -> Any:
        return fused_recurrent_kda(q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias, scale=scale, initial_state=h0,
                                   output_final_state=True, use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True,
                                   use_beta_sigmoid_in_kernel=True, lower_bound=LOWER_BOUND, cu_seqlens=cu)

    try:
        run()  # Triton compiles now, outside any timed region
    except Exception as e:
        notes["fla"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}
    return {"fla": run}
