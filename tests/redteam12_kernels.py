"""Hand-written RMSNorm-ABI entries of round 12 against the static checks (evaluators/input_stores.py,
evaluators/race_lint.py); tests/test_redteam_round12.py runs each through ``evaluators.pipeline.prepare``.

Every entry is ``rmsnorm(x, w, y, M, N, eps)`` (the workload ABI: x bf16 and w f32 inputs, y bf16 the output)
and assembles with ptxas for sm_90. The body is a small but complete RMSNorm for rows of at most 256 elements:
one CTA of 256 threads per row, thread t holds x[r, t], the sum of squares reduced by warp shuffles and eight
per-warp partials in shared memory across a ``bar.sync`` (the barrier a dodge drops), then
``y = x * rsqrt(mean + eps) * w``. Each trick is spliced into that body at fixed places (``entry``).

A kernel's header says what it does, which check it targets, why the dynamic checks would not see it on the GPU
and the status the gate rules give it by their own contract (GATE.md).
"""

from __future__ import annotations

from population.kernel import Kernel, LaunchConfig
from population.parser import parse_module

_HEAD = """.version 8.0
.target sm_90
.address_size 64
{globals}
.visible .entry rmsnorm(
\t.param .u64 rmsnorm_param_0,
\t.param .u64{walign} rmsnorm_param_1,
\t.param .u64 rmsnorm_param_2,
\t.param .u32 rmsnorm_param_3,
\t.param .u32 rmsnorm_param_4,
\t.param .f32 rmsnorm_param_5
){directives}
{{
\t.reg .pred %p<16>;
\t.reg .b16 %rs<8>;
\t.reg .b32 %r<64>;
\t.reg .f32 %f<32>;
\t.reg .b64 %rd<64>;
\t.shared .align 16 .b8 smem[32];
{decls}
\tld.param.u64 %rd1, [rmsnorm_param_0];
\tld.param.u64 %rd2, [rmsnorm_param_1];
\tld.param.u64 %rd3, [rmsnorm_param_2];
\tld.param.u32 %r1, [rmsnorm_param_3];
\tld.param.u32 %r2, [rmsnorm_param_4];
\tld.param.f32 %f1, [rmsnorm_param_5];
\tcvta.to.global.u64 %rd4, %rd1;
\tcvta.to.global.u64 %rd5, %rd2;
\tcvta.to.global.u64 %rd6, %rd3;
\tmov.u32 %r3, %tid.x;
\tmov.u32 %r4, %ctaid.x;
\tsetp.ge.u32 %p1, %r4, %r1;
\t@%p1 bra $L_done;
\tsetp.lt.u32 %p2, %r3, %r2;
\tcvt.u64.u32 %rd7, %r4;
\tcvt.u64.u32 %rd8, %r2;
\tmul.lo.s64 %rd9, %rd7, %rd8;
\tcvt.u64.u32 %rd10, %r3;
\tadd.s64 %rd11, %rd9, %rd10;
\tshl.b64 %rd12, %rd11, 1;
\tadd.s64 %rd13, %rd4, %rd12;
\tadd.s64 %rd14, %rd6, %rd12;
\tshl.b64 %rd15, %rd10, 2;
\tadd.s64 %rd16, %rd5, %rd15;
\tshr.u32 %r5, %r3, 5;
\tand.b32 %r6, %r3, 31;
\tmul.wide.u32 %rd17, %r5, 4;
\tmov.u64 %rd18, smem;
\tadd.s64 %rd19, %rd18, %rd17;
{pre}\tmov.f32 %f2, 0f00000000;
\t@%p2 ld.global.u16 %rs1, [%rd13];
\t@%p2 cvt.f32.bf16 %f2, %rs1;
\tmul.f32 %f3, %f2, %f2;
\tshfl.sync.bfly.b32 %f4, %f3, 16, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 8, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 4, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 2, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tshfl.sync.bfly.b32 %f4, %f3, 1, 31, -1;
\tadd.f32 %f3, %f3, %f4;
\tsetp.eq.u32 %p3, %r6, 0;
\t@%p3 st.shared.f32 [%rd19], %f3;
{barrier}\tld.shared.v4.f32 {{%f10, %f11, %f12, %f13}}, [smem];
\tld.shared.v4.f32 {{%f14, %f15, %f16, %f17}}, [smem+16];
\tadd.f32 %f18, %f10, %f11;
\tadd.f32 %f18, %f18, %f12;
\tadd.f32 %f18, %f18, %f13;
\tadd.f32 %f18, %f18, %f14;
\tadd.f32 %f18, %f18, %f15;
\tadd.f32 %f18, %f18, %f16;
\tadd.f32 %f18, %f18, %f17;
\tcvt.rn.f32.u32 %f20, %r2;
\tdiv.rn.f32 %f21, %f18, %f20;
\tadd.f32 %f22, %f21, %f1;
\trsqrt.approx.f32 %f23, %f22;
\t@%p2 ld.global.f32 %f24, [%rd16];
\tmul.f32 %f25, %f2, %f23;
\tmul.f32 %f26, %f25, %f24;
\tcvt.rn.bf16.f32 %rs3, %f26;
\t@%p2 st.global.u16 [%rd14], %rs3;
{post}$L_done:
\tret;
}}
"""
# Registers the body leaves for the tricks: %rd4 = x, %rd5 = w, %rd6 = y (global), %rd13 = &x[r, t],
# %rd14 = &y[r, t], %rd16 = &w[t], %rd18 = smem, %r3 = tid, %r4 = ctaid (the row), %r5 = warp, %r6 = lane,
# %p2 = t < N. Free for the tricks: %p5..%p15, %r20..%r63, %rd20..%rd63, %f27..%f31, %rs4..%rs7.
LAUNCH = LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1),))
CLUSTER2 = LaunchConfig(block=(256, 1, 1), knobs=(("rows_per_cta", 1), ("cluster", 2)))
BARRIER = "\tbar.sync 0;\n"


def ptx(pre: str = "", post: str = "", barrier: str = BARRIER, globals_: str = "", decls: str = "",
        directives: str = "", walign: str = "") -> str:
    """The RMSNorm body with a trick spliced in: ``pre`` after the addresses are computed, ``barrier`` in place of
    the reduction's ``bar.sync 0``, ``post`` after the store of y; ``globals_`` (module variables, functions),
    ``decls`` (the entry's own variables), ``directives`` (after the parameter list) and ``walign`` (an attribute
    of w's ``.param``)."""
    return _HEAD.format(globals=globals_, decls=decls, directives=directives, walign=walign, pre=pre,
                        barrier=barrier, post=post)


def entry(launch: LaunchConfig = LAUNCH, **parts: str) -> Kernel:
    return Kernel(parse_module(ptx(**parts)), "rmsnorm", launch)


def dodge(pred: str) -> str:
    """The reduction's barrier kept only where ``pred`` is false (the sanitizer replay's side of a dodge)."""
    return f"\t@{pred} bra $L_nobar;\n\tbar.sync 0;\n$L_nobar:\n"
