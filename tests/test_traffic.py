"""Static traffic estimate: hand-written kernels with hand-computed bytes, and the RMSNorm seeds' paths."""

from __future__ import annotations

import pytest

from evaluators.traffic import TrafficModel, estimate_traffic
from population.ast import Function
from population.parser import parse_module

HEADER = ".version 9.0\n.target sm_90\n.address_size 64\n\n"

ELEMENTWISE = HEADER + """\
.visible .entry scale(
	.param .u64 x,
	.param .u64 y
)
{
	.reg .b32 	%r<4>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<8>;

	ld.param.u64 	%rd1, [x];
	ld.param.u64 	%rd2, [y];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r1, %ctaid.x;
	mov.u32 	%r2, %tid.x;
	mad.lo.s32 	%r3, %r1, 256, %r2;
	mul.wide.s32 	%rd5, %r3, 4;
	add.s64 	%rd6, %rd3, %rd5;
	add.s64 	%rd7, %rd4, %rd5;
	ld.global.f32 	%f1, [%rd6];
	mul.f32 	%f2, %f1, 0f40000000;
	st.global.f32 	[%rd7], %f2;
	ret;
}
"""

def _unrolled(head: str, step: str, latch: str, exit_label: str, copies: int, tail: str) -> str:
    """A loop whose body is ``step`` (ending in the exit test) written ``copies`` times, the way the ``unroll``
    operator (and nvcc, for a run-time trip count) does it: each copy but the last leaves through
    ``@!%p bra exit_label``, the last is the latch ``latch``; ``exit_label`` is placed after the loop when
    ``copies`` > 1."""
    pred = latch.split()[0].lstrip("@")
    early = f"\t@!{pred} bra \t{exit_label};\n"
    return head + (step + early) * (copies - 1) + step + latch + (f"{exit_label}:\n" if copies > 1 else "") + tail


def _copy4(entry: str, copies: int) -> str:
    """for (i = 4 * tid; i < n; i += 4 * 256) y[i..i+3] = x[i..i+3], with the zero-trip guard nvcc emits; the
    loop body written ``copies`` times (``_unrolled``)."""
    head = HEADER + f".visible .entry {entry}(" + """
	.param .u64 x,
	.param .u64 y,
	.param .u32 n
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<6>;
	.reg .f32 	%f<5>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [x];
	ld.param.u64 	%rd2, [y];
	ld.param.u32 	%r1, [n];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r2, %tid.x;
	shl.b32 	%r3, %r2, 2;
	setp.ge.s32 	%p1, %r3, %r1;
	@%p1 bra 	$L__done;
$L__loop:
"""
    step = """\
	mul.wide.s32 	%rd5, %r3, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.v4.f32 	{%f1, %f2, %f3, %f4}, [%rd6];
	add.s64 	%rd7, %rd4, %rd5;
	st.global.v4.f32 	[%rd7], {%f1, %f2, %f3, %f4};
	add.s32 	%r3, %r3, 1024;
	setp.lt.s32 	%p2, %r3, %r1;
"""
    return _unrolled(head, step, "\t@%p2 bra \t$L__loop;\n", "$L__loop_x", copies, "$L__done:\n\tret;\n}\n")


VECTOR_LOOP = _copy4("copy4", 1)
# VECTOR_LOOP unrolled twice: the exit test after the first copy writes the same predicate register as the
# latch's test.
VECTOR_LOOP_UNROLLED = _copy4("copy4u", 2)

# for (it = 0; it < iters; ++it) y[row(it)][tid] = x[row(it)][tid] (one 256-float row per iteration), unrolled
# twice with an exit test after each copy: a counted loop of ``iters`` iterations whose body holds two.
ROW_LOOP_UNROLLED = _unrolled(HEADER + """\
.visible .entry rows2(
	.param .u64 x,
	.param .u64 y,
	.param .u32 iters
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<9>;
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<10>;

	ld.param.u64 	%rd1, [x];
	ld.param.u64 	%rd2, [y];
	ld.param.u32 	%r1, [iters];
	cvta.to.global.u64 	%rd3, %rd1;
	cvta.to.global.u64 	%rd4, %rd2;
	mov.u32 	%r2, %tid.x;
	mov.u32 	%r3, %ctaid.x;
	mul.lo.s32 	%r4, %r3, %r1;
	mov.u32 	%r5, 0;
$L__row:
""", """\
	add.s32 	%r6, %r4, %r5;
	mad.lo.s32 	%r7, %r6, 256, %r2;
	mul.wide.s32 	%rd5, %r7, 4;
	add.s64 	%rd6, %rd3, %rd5;
	ld.global.f32 	%f1, [%rd6];
	add.s64 	%rd7, %rd4, %rd5;
	st.global.f32 	[%rd7], %f1;
	add.s32 	%r5, %r5, 1;
	setp.lt.u32 	%p1, %r5, %r1;
""", "\t@%p1 bra \t$L__row;\n", "$L__row_x", 2, "\tret;\n}\n")

# A generic load through a pointer parameter (counted) and one through a shared-memory address (not counted).
GENERIC = HEADER + """\
.visible .entry gen(
	.param .u64 x
)
{
	.reg .f32 	%f<3>;
	.reg .b64 	%rd<4>;
	.shared .align 4 .f32 buf[32];

	ld.param.u64 	%rd1, [x];
	ld.f32 	%f1, [%rd1];
	mov.u64 	%rd2, buf;
	cvta.shared.u64 	%rd3, %rd2;
	ld.f32 	%f2, [%rd3];
	st.shared.f32 	[buf], %f1;
	ret;
}
"""


def _entry(text: str) -> Function:
    return parse_module(text).entries[0]


def _seed(name: str) -> Function:
    from pathlib import Path

    import workloads.rmsnorm as rms

    path = Path(rms.__file__).parent / "seeds" / f"{name}.ptx"
    return parse_module(path.read_text()).entries[0]


def test_straight_line_sites_run_once_per_thread():
    # 1 load + 1 store of 4 bytes per thread; 256 threads x 10 CTAs.
    t = estimate_traffic(_entry(ELEMENTWISE), (10, 1, 1), (256, 1, 1), 256, element_bytes=4)
    assert t.load_bytes == 4 * 256 * 10
    assert t.store_bytes == 4 * 256 * 10
    assert t.bytes == 2 * 4 * 256 * 10
    assert t.sweeps == {"x": 1.0, "y": 1.0}
    assert t.max_width_bytes == 4 and t.loads_per_iteration == 1
    assert [s.group for s in t.sites] == ["x", "y"]


def test_vector_loop_sweeps_the_cta_share_once():
    # The loop advances 4 floats per thread per iteration: trips = 8192 / (256 * 4) = 8 per thread;
    # bytes per CTA = 8 * 256 * 16 = 32768 for x and the same for y.
    t = estimate_traffic(_entry(VECTOR_LOOP), (3,), (256,), 8192, element_bytes=4)
    assert t.bytes_per_cta == 2 * 32768
    assert t.bytes == 3 * 2 * 32768
    assert [s.executions_per_thread for s in t.sites] == [8.0, 8.0]
    assert t.max_width_bytes == 16
    (body,) = t.bodies
    assert body.loop is not None and body.load_bytes_per_iteration == 16 and body.mean_width_bytes == 16


def test_unrolled_sweep_loop_with_a_mid_body_exit_counts_every_copy():
    # Rule 4d: the same bytes as the loop before unrolling (8 trips of 16 B per thread, x and y, 3 CTAs), not
    # the first copy's share of them (the exit after copy 1 and the latch test write one predicate register).
    rolled = estimate_traffic(_entry(VECTOR_LOOP), (3,), (256,), 8192, element_bytes=4)
    t = estimate_traffic(_entry(VECTOR_LOOP_UNROLLED), (3,), (256,), 8192, element_bytes=4)
    assert t.bytes == rolled.bytes == 3 * 2 * 32768
    assert t.sweeps == {"x": 1.0, "y": 1.0}
    assert [s.executions_per_thread for s in t.sites] == [4.0, 4.0, 4.0, 4.0]  # 4 runs of a 2-copy body


@pytest.mark.parametrize("iters", [1, 2, 3, 4, 7])
def test_unrolled_counted_row_loop_runs_its_source_trip_count(iters: int):
    # Rule 7b: ``iters`` rows of 256 floats per CTA, read and written once: iters * 1024 B each way per CTA,
    # whatever the unroll factor (2) and whether it divides the trip count; 5 CTAs.
    model = TrafficModel(_entry(ROW_LOOP_UNROLLED))
    t = model.estimate((5,), (256,), 256, element_bytes=4, params={"iters": iters})
    assert t.loop_trips == {1: iters}
    assert t.load_bytes == t.store_bytes == 5 * iters * 1024
    assert t.sweeps == {"x": float(iters), "y": float(iters)}
    # Without the launch's parameters the loop is not counted: it is taken to sweep the CTA's row once.
    assert model.estimate((5,), (256,), 256, element_bytes=4).load_bytes == 5 * 1024


def test_generic_access_counts_only_when_it_derives_from_a_pointer_param():
    t = estimate_traffic(_entry(GENERIC), (1,), (32,), 32, element_bytes=4)
    assert [s.group for s in t.sites] == ["x"]
    assert t.load_bytes == 4 * 32


def test_naive_rmsnorm_reads_x_twice():
    # Naive seed, bf16, N = 4096, 256 threads, one row per CTA: x read in two passes (2 * 8192 bytes),
    # w (fp32) once per CTA (16384), y written once (8192): 40960 bytes per CTA.
    fn = _seed("rmsnorm_naive")
    t = estimate_traffic(fn, (64, 1, 1), (256, 1, 1), 4096, element_bytes=2)
    assert t.bytes_per_cta == 40960
    assert t.bytes == 64 * 40960
    assert t.sweeps == {"rmsnorm_param_0": 2.0, "rmsnorm_param_1": 1.0, "rmsnorm_param_2": 1.0}
    assert [b.load_bytes_per_iteration for b in t.bodies] == [2, 6]


def test_template_path_depends_on_the_row_length():
    # The template keeps a row in registers while it fits in 8 chunks of 8 elements per thread
    # (N <= 8 * 8 * 256 = 16384): x is read once. Longer rows take the streaming path: x read twice.
    # Unroll remainder loops (rule 3b) must not add a third or fourth sweep.
    model = TrafficModel(_seed("rmsnorm_template"))
    kept = model.estimate((8,), (256,), 4096, element_bytes=2)
    assert kept.sweeps == {"rmsnorm_param_0": 1.0, "rmsnorm_param_1": 1.0, "rmsnorm_param_2": 1.0}
    assert kept.bytes_per_cta == 4096 * 2 + 4096 * 4 + 4096 * 2
    streamed = model.estimate((8,), (256,), 65536, element_bytes=2)
    assert streamed.sweeps == {"rmsnorm_param_0": 2.0, "rmsnorm_param_1": 1.0, "rmsnorm_param_2": 1.0}
    assert streamed.max_width_bytes == 16
    # A short row held in registers: only the chunks the row needs are charged.
    short = model.estimate((8,), (256,), 760, element_bytes=2)
    assert short.bytes_per_cta == 760 * 2 + 760 * 4 + 760 * 2


def test_estimates_are_deterministic():
    model = TrafficModel(_seed("rmsnorm_template"))
    a = model.estimate((100,), (256,), 16384, element_bytes=2)
    b = TrafficModel(_seed("rmsnorm_template")).estimate((100,), (256,), 16384, element_bytes=2)
    assert a == b


def test_bad_input():
    fn = _entry(ELEMENTWISE)
    with pytest.raises(ValueError, match="must be positive"):
        estimate_traffic(fn, (0, 1, 1), (256, 1, 1), 256)
    with pytest.raises(ValueError, match="elements_per_cta_sweep"):
        estimate_traffic(fn, (1,), (256,), -1)
    decl = Function(kind="func", name="f", body=None)
    with pytest.raises(ValueError, match="no body"):
        TrafficModel(decl)
