"""KDA's library baselines (PyPI ``fla-core``, Triton kernels): fla's ``fused_recurrent_kda`` (stage 1), its
inter-chunk kernel ``chunk_gated_delta_rule_fwd_h`` (the evolved stage of the chunked pipeline) and its whole
``chunk_kda`` (the chunked pipeline's report).

``fused_recurrent_kda`` and ``chunk_kda`` are called as the kernel under test computes the operation: raw g with ``use_gate_in_kernel=True``, ``A_log``, ``dt_bias``
and ``lower_bound=-5`` (the safe gate), raw beta with ``use_beta_sigmoid_in_kernel=True``,
``use_qk_l2norm_in_kernel=True``, the initial state and ``output_final_state=True``, on the very device
buffers the candidate reads (DLPack, no copy), [1, T, H, 128] views with ``cu_seqlens`` (int64, as fla takes
it). fla allocates its output and final state on every call; that cost is part of its time.
FlashKDA (CUTLASS, needs a C++ build) is not timed here.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any

from workloads.kda.reference import LOWER_BOUND

CHUNK_KDA_NOTE = ("FlashKDA (fla's CUTLASS backend of chunk_kda) needs a CUTLASS checkout and a C++ build and was "
                  "not timed; third-party figure: 1.21 ms against fla's 1.78 ms at H = 64, T = 8192 on an H200")


def _torch_views(inputs: Mapping[str, Any]) -> tuple[Any, ...]:
    """(q, k, v, g, beta as [1, T, H, ...] bf16 views, A_log, dt_bias, state, cu_seqlens int64 on the device,
    cu_seqlens on the host) of the operation's device buffers (DLPack, no copy)."""
    import torch

    def bf16(name: str) -> Any:
        return torch.from_dlpack(inputs[name]).view(torch.bfloat16).unsqueeze(0)

    cu = torch.from_dlpack(inputs["cu_seqlens"]).to(torch.int64)
    return (*(bf16(n) for n in ("q", "k", "v", "g", "beta")), torch.from_dlpack(inputs["A_log"]),
            torch.from_dlpack(inputs["dt_bias"]), torch.from_dlpack(inputs["state"]), cu, cu.cpu())


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


def fla_chunk_baselines(inputs: Mapping[str, Any], shape: tuple[int, ...], names: tuple[str, ...],
                        notes: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """{"fla_chunk": fla's whole ``chunk_kda``} when asked for and importable, else {} with the reason in
    ``notes``. Called with FLA_FLASH_KDA=0 (FlashKDA off: ``CHUNK_KDA_NOTE``), under ``torch.no_grad``, with the
    gate, beta sigmoid and L2 norm in the kernel, the safe gate (``safe_gate=True``, lower_bound -5: fla's
    16-row sub-chunk path for this gate), the initial state, the final state returned, and the host copy of
    cu_seqlens (no device-to-host copy inside the timed call). Returns (o, final state) per call."""
    if "fla_chunk" not in names:
        return {}
    os.environ.setdefault("FLA_FLASH_KDA", "0")
    try:
        import torch
        from fla.ops.kda import chunk_kda
    except Exception as e:  # fla-core, triton or torch missing
        notes["fla_chunk"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}
    q, k, v, g, beta, A_log, dt_bias, h0, cu, cu_cpu = _torch_views(inputs)
    scale = q.shape[-1] ** -0.5

    def run() -> Any:
        with torch.no_grad():
            return chunk_kda(q, k, v, g, beta, scale=scale, initial_state=h0, output_final_state=True,
                             use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
                             safe_gate=True, lower_bound=LOWER_BOUND, cu_seqlens=cu, cu_seqlens_cpu=cu_cpu,
                             A_log=A_log, dt_bias=dt_bias)

    try:
        run()  # Triton compiles (and autotunes) now, outside any timed region
    except Exception as e:
        notes["fla_chunk"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}
    return {"fla_chunk": run}


def fla_state_pass_baselines(workload: Any, inputs: Mapping[str, Any], shape: tuple[int, ...],
                             names: tuple[str, ...], notes: dict[str, str]) -> dict[str, Callable[[], Any]]:
    """{"fla_fwd_h": fla's ``chunk_gated_delta_rule_fwd_h``} on the intermediates the chunked pipeline's
    ``intra`` stage computes from ``inputs`` (``workload``: a ``workloads.kda.chunk.KDAChunk``; computed once
    here, untimed), when asked for and importable, else {} with the reason in ``notes``.

    The same fp32 buffers the evolved kernel reads (kg as fla's ``k``, w, u; [1, T, H, 128] views) and the same
    initial state; fla's per-token log2 gate ``gk`` holds log2(gdecay) at each chunk's last token (the only rows
    its kernel reads) and zeros elsewhere; chunk indices and offsets prepared once (no host sync in the timed
    call). fla allocates h, v_new and the final state per call (its cost is part of its time) and runs its
    products in TF32 (Triton's default for fp32 ``tl.dot``), where the seeds use fp32 FMAs."""
    if "fla_fwd_h" not in names:
        return {}
    try:
        import torch
        from fla.ops.common.chunk_delta_h import chunk_gated_delta_rule_fwd_h
        from fla.ops.utils.index import prepare_chunk_indices, prepare_chunk_offsets
    except Exception as e:
        notes["fla_fwd_h"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}
    import cupy as cp

    from workloads.dtypes import storage_dtype

    outs = {s.name: cp.empty(s.shape, dtype=storage_dtype(s.dtype, cp)) for s in workload.outputs(shape)}
    plan = workload.stage_inputs(inputs, outs, shape, None, cp)
    lay = workload.layout(shape)
    gk = cp.zeros(plan.buffers["kg"].shape, dtype=cp.float32)
    gk[cp.asarray(lay.last)] = cp.log2(plan.buffers["gdecay"])
    kg, w, u, gk_t = (torch.from_dlpack(a).unsqueeze(0) for a in (plan.buffers["kg"], plan.buffers["w"],
                                                                 plan.buffers["u"], gk))
    h0 = torch.from_dlpack(inputs["state"])
    cu = torch.from_dlpack(inputs["cu_seqlens"]).to(torch.int64)
    cu_cpu = cu.cpu()
    chunk_indices = prepare_chunk_indices(cu, workload.chunk, cu_seqlens_cpu=cu_cpu)
    chunk_offsets = prepare_chunk_offsets(cu, workload.chunk)

    def run() -> Any:
        return chunk_gated_delta_rule_fwd_h(k=kg, w=w, u=u, gk=gk_t, initial_state=h0, output_final_state=True,
                                            chunk_size=workload.chunk, save_new_value=True, cu_seqlens=cu,
                                            cu_seqlens_cpu=cu_cpu, chunk_indices=chunk_indices,
                                            chunk_offsets=chunk_offsets)

    try:
        run()  # Triton compiles and autotunes now
    except Exception as e:
        notes["fla_fwd_h"] = f"skipped: {type(e).__name__}: {str(e)[:200]}"
        return {}
    run.plan, run.outputs = plan, outs  # type: ignore[attr-defined]  # the intermediates live as long as the callable
    return {"fla_fwd_h": run}
