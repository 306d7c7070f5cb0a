"""The KDA template's layout and deep-prefetch knobs on the CPU (no GPU: correctness on the H200 is
experiments/kda_h200.py's): every new knob set instantiates, compiles with ptxas for sm_90 and keeps the ABI's
.param list; invalid combinations raise ValueError naming the knob and the rule; the default knobs' PTX is the
recorded one; and a NumPy model of layout 1's thread mapping and one-round reduction (the fused read-out
o = qs (S'^T q + u k.q / |k|)) matches the fp32 recurrence."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

from evaluators.gpu.args import param_types
from evaluators.toolchain import compile_ptx
from workloads.base import check_abi
from workloads.dtypes import to_float64
from workloads.kda import KDARecurrent
from workloads.kda.recurrent import D

# The sets proposed for timing (decode, then long sequences), then one of each other layout-1 shape and the
# layout-0 deep prefetch.
PROPOSED = [
    {"layout": 1, "cols": 8, "warps": 4, "prefetch": 0},
    {"layout": 1, "cols": 16, "warps": 4, "prefetch": 0},
    {"layout": 1, "cols": 4, "warps": 8, "prefetch": 0},
    {"layout": 1, "cols": 16, "warps": 1, "prefetch": 0},
    {"cols": 8, "warps": 2, "prefetch": 2},
    {"layout": 1, "cols": 16, "warps": 1, "prefetch": 2},
]
OTHERS = [
    {"layout": 1, "cols": 2, "warps": 2, "prefetch": 1},
    {"layout": 1, "cols": 2, "warps": 8, "prefetch": 4},
    {"layout": 1, "cols": 4, "warps": 1, "prefetch": 1},
    {"layout": 1, "cols": 8, "warps": 8, "prefetch": 2, "min_blocks": 2},
    {"layout": 1, "cols": 16, "warps": 8, "prefetch": 1},
    {"cols": 4, "warps": 4, "prefetch": 4},
]

# sha256 of the default knobs' canonical PTX, recorded before the layout knob existed (nvcc 13.0): the stores key
# kernels by it. Only checked with that nvcc (another version prints other PTX).
DEFAULT_PTX_SHA256 = "8272c48e252222ce28388fb7f4ea22d82ae5ffdfdb42b4027552926339976fa1"
DEFAULT_PTX_NVCC = "Build cuda_13.0.r13.0/compiler.36424714_0"


@pytest.fixture(scope="module")
def wl():
    return KDARecurrent()


@pytest.mark.parametrize("knobs", PROPOSED + OTHERS, ids=lambda k: ",".join(f"{a}={b}" for a, b in k.items()))
def test_new_knob_sets_compile_with_the_abi_and_launch(wl, knobs):
    k = wl.instantiate(knobs)
    check_abi(wl.abi, param_types(k), k.entry)
    res = compile_ptx(k, "sm_90").resources[k.entry]
    full = wl.check_knobs(knobs)
    bv = full["cols"] * full["warps"]
    assert k.launch.knob("bv") == bv and dict(k.launch.knobs)["layout"] == full["layout"]
    assert wl.launch_dims((64, *(1,) * 32), k.launch) == ((D // bv, 64, 32), (32 * full["warps"], 1, 1), 0)
    if knobs in PROPOSED:
        assert res.spill_stores_bytes == 0, res
    if full["layout"] == 1 and full["warps"] > 1:  # the cross-warp partials, double-buffered: 2 x 3 float4
        assert res.shared_static_bytes == 2 * 3 * 16 * full["warps"] * (bv // 4)


@pytest.mark.parametrize("knobs,rule", [
    ({"layout": 1, "cols": 1, "warps": 8}, r"layout=1 needs cols >= 2"),
    ({"layout": 1, "cols": 2, "warps": 1}, r"layout=1 needs cols \* warps >= 4"),
    ({"layout": 2}, r"knob layout=2 not in \(0, 1\)"),
    ({"prefetch": 3}, r"knob prefetch=3 not in \(0, 1, 2, 4\)"),
    ({"layout": 1, "cols": 16, "warps": 16}, r"knob warps=16 not in"),
])
def test_invalid_combinations_name_the_knob_and_rule(wl, knobs, rule):
    with pytest.raises(ValueError, match=rule):
        wl.check_knobs(knobs)
    with pytest.raises(ValueError, match=rule):
        wl.instantiate(knobs)


def test_default_knobs_keep_their_ptx(wl):
    from evaluators.toolchain import find_nvcc
    from workloads.cuda_build import _nvcc_version

    if _nvcc_version(str(find_nvcc())) != DEFAULT_PTX_NVCC:
        pytest.skip("the recorded PTX hash is for another nvcc")
    k = wl.instantiate(wl.default_knobs)
    assert hashlib.sha256(k.canonical_ptx.encode()).hexdigest() == DEFAULT_PTX_SHA256
    assert k.ptx == wl.seeds()[1].ptx


def layout1_model(inputs, cols, warps):
    """fp32 NumPy model of kda_template.cu at LAYOUT 1: per CTA (V-block, head, sequence) and thread tid,
    cg = tid % CG, rows r0 .. r0 + cols - 1 with r0 = (tid // CG) cols, columns c0 .. c0 + 3; each thread's
    partials of S'^T k, S'^T q, q.q, k.k, k.q summed over the CTA's row groups (warp, then across warps); u and
    o from the sums; o = qs (S'^T q + u k.q ks). Returns (o [T, H, V] float32, final state)."""
    f = {n: to_float64(inputs[n], "bf16").astype(np.float32) for n in ("q", "k", "v", "g", "beta")}
    a_all = np.exp(inputs["A_log"]).astype(np.float32)
    bias_all = inputs["dt_bias"].reshape(-1, D)
    state = inputs["state"].copy()
    cu = inputs["cu_seqlens"]
    bv = cols * warps
    cg_n, scale = bv // 4, np.float32(D ** -0.5)
    tids = np.arange(32 * warps)
    rows = (tids // cg_n)[:, None] * cols + np.arange(cols)  # [threads, cols]
    colsof = (tids % cg_n)[:, None] * 4 + np.arange(4)      # [threads, 4] within the V-block
    covered = np.zeros((D, bv), int)
    np.add.at(covered, (rows[:, :, None], colsof[:, None, :]), 1)
    assert (covered == 1).all()  # every state element of the block owned by exactly one thread
    o = np.zeros(f["v"].shape, np.float32)
    for n in range(len(cu) - 1):
        for h in range(state.shape[1]):
            a = a_all[h]
            for vb in range(D // bv):
                c = vb * bv + colsof                       # [threads, 4]
                s = state[n, h][rows[:, :, None], c[:, None, :]]  # [threads, cols, 4]
                for t in range(cu[n], cu[n + 1]):
                    qi, ki, gi = f["q"][t, h][rows], f["k"][t, h][rows], f["g"][t, h][rows]
                    with np.errstate(over="ignore"):
                        d = np.exp(np.float32(-5) / (1 + np.exp(-a * (gi + bias_all[h][rows]))))
                    s = s * d[:, :, None]
                    part = np.concatenate([(s * ki[:, :, None]).sum(1), (s * qi[:, :, None]).sum(1),
                                           np.stack([(qi * qi).sum(1), (ki * ki).sum(1), (ki * qi).sum(1)], 1)], 1)
                    # sum over row groups: threads with the same cg
                    tot = np.stack([part[tids % cg_n == g].sum(0) for g in range(cg_n)])[tids % cg_n]
                    qs, ks = scale / np.sqrt(tot[:, 8] + 1e-6), 1 / np.sqrt(tot[:, 9] + 1e-6)
                    b = 1 / (1 + np.exp(-f["beta"][t, h]))
                    u = b * (f["v"][t, h][c] - tot[:, 0:4] * ks[:, None])
                    out = (tot[:, 4:8] + u * (tot[:, 10] * ks)[:, None]) * qs[:, None]
                    s = s + (ki * ks[:, None])[:, :, None] * u[:, None, :]
                    writer = tids < cg_n
                    o[t, h][c[writer]] = out[writer]
                state[n, h][rows[:, :, None], c[:, None, :]] = s
    return o, state


@pytest.mark.parametrize("cols,warps", [(2, 2), (4, 4), (16, 1), (8, 8)])
def test_layout1_mapping_and_fused_readout_match_the_reference(wl, cols, warps):
    inputs = wl.make_inputs((2, 1, 6), seed=4)
    ref = wl.reference(inputs)
    o, s = layout1_model(inputs, cols, warps)
    atol, rtol = wl.tolerance
    assert np.all(np.abs(s - ref["state"]) <= atol + rtol * np.abs(ref["state"]))
    assert np.all(np.abs(o - ref["o"]) <= atol + rtol * np.abs(ref["o"]))
