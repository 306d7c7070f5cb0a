"""Seeds from Triton: compile a ``@triton.jit`` kernel (a user's function, or the kernel ``torch.compile``'s
Inductor generates for the workload's reference) to PTX with the installed Triton, and adapt it to the
workload's ABI so a search can start from it (``workload.seed_ptx``, ``workloads.external``).

Compiling needs no GPU: ``triton.compile`` with an explicit ``GPUTarget("cuda", 90, 32)`` runs Triton's
compiler and its own ptxas on the CPU. What differs from a workload seed, and what ``adapt_to_abi`` does:

- parameters: Triton passes its runtime arguments in the function's order (``constexpr`` ones are compiled
  in) and appends scratch pointers (``global_scratch``, ``profile_scratch`` in Triton 3.x). The adapter
  orders the ``.param`` list as the workload's ABI (``--map`` names which argument is which ABI parameter),
  adds an unused parameter for an ABI one the kernel does not take, and removes the scratch pointers (their
  loads become ``mov.b64 %rd, 0``; a kernel that needs scratch memory is refused);
- launch: Triton chooses warps (block = 32 x num_warps threads) and dynamic shared memory
  (``metadata.shared`` bytes for ``global_smem``); the grid is the launch rule the user states;
- PTX version and target: Triton 3.9 declares ``.version 9.4`` and ``.target sm_90a``; the kernel is compiled
  with ``ptx_version`` set to what the project's ptxas reads (Triton's LLVM back end emits PTX 9.0
  instructions at most, ``min(90, ptx_version)``, so this only changes the header) and the target is written
  as the hardware's ``arch`` (``sm_90``) unless told otherwise;
- ptxas: Triton assembles its PTX with the ptxas it ships (``triton/backends/nvidia/bin``), which may read an
  older PTX ISA than the version asked for (Triton 3.6 ships ptxas 12.8, PTX ISA 8.7, and fails on ``.version
  9.0``: "Unsupported .version 9.0; current version is '8.7'"). ``compile_triton`` runs Triton with the first
  ptxas that reads the PTX version and targets the architecture (``choose_ptxas``: Triton's own first, then
  ``evaluators.toolchain.ptxas_candidates``), passed through ``TRITON_PTXAS_PATH`` /
  ``TRITON_PTXAS_BLACKWELL_PATH`` for the compile only, and names it in ``TritonPTX.ptxas``.

Command line (writes the PTX and prints the ``workload`` config lines that start a search from it)::

    python -m workloads.triton_seed rmsnorm --kernel workloads.triton_kernels:rmsnorm_fwd \\
        --constexpr BLOCK=1024 --num-warps 8 --grid M,1,1 -o rmsnorm_triton.ptx
    python -m workloads.triton_seed rmsnorm --inductor -o rmsnorm_inductor.ptx      # needs CUDA torch
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from population import ast
from population.parser import parse_module
from population.printer import print_module
from targets.spec import SEED_ARCH
from workloads.base import Workload
from workloads.external import LaunchRule, SeedConfigError

# The compute capability Triton compiles seeds for (90 for sm_90): the seeds' own target, targets.spec.SEED_ARCH.
SEED_CAPABILITY = int(SEED_ARCH.removeprefix("sm_").rstrip("af"))

#: Triton's element types for the workload dtypes and ``.param`` scalar types.
TRITON_DTYPES = {"bf16": "*bf16", "fp16": "*fp16", "fp32": "*fp32", "float32": "*fp32", "float16": "*fp16",
                 "bfloat16": "*bf16", "float64": "*fp64", "int32": "*i32", "int64": "*i64", "uint8": "*u8"}
SCALAR_TYPES = {"u32": "i32", "s32": "i32", "b32": "i32", "u64": "i64", "s64": "i64", "b64": "i64",
                "f32": "fp32", "f64": "fp64", "f16": "fp16"}
#: Names Triton gives the scratch pointers it appends to every kernel (Triton >= 3.3).
SCRATCH_PARAMS = ("global_scratch", "profile_scratch")


class TritonSeedError(ValueError):
    """A Triton kernel that cannot become a seed of the workload; the message names the parameter or option."""


@dataclass
class TritonPTX:
    """One Triton kernel compiled to PTX.

    ptx: the PTX text Triton produced; name: its ``.entry``; arg_names: the runtime arguments in ``.param``
    order (constexprs removed), followed by the scratch pointers; num_warps; shared: dynamic shared memory in
    bytes (``metadata.shared``); global_scratch_size: bytes of global scratch per program (0: unused);
    cubin: Triton's own cubin (for register-count comparisons); ptxas_flags: the flags Triton ran ptxas with;
    ptxas: the ptxas Triton assembled it with (path and release, ``choose_ptxas``).
    """

    ptx: str
    name: str
    arg_names: list[str]
    num_warps: int
    shared: int
    global_scratch_size: int = 0
    cubin: bytes = b""
    ptxas_flags: tuple[str, ...] = ("-lineinfo", "--regAllocOptLevel=2")
    metadata: dict[str, Any] = field(default_factory=dict)
    ptxas: str = ""


def project_ptx_version() -> int:
    """The newest PTX ISA version the project's ptxas reads, as Triton's ``ptx_version`` option (90 for 9.0)."""
    from evaluators.toolchain import ptx_isa_version

    v = ptx_isa_version()
    if v is None:
        raise TritonSeedError("cannot tell which PTX version the project's ptxas reads")
    return v[0] * 10 + v[1]


#: The environment variables Triton reads the ptxas path from (triton/knobs.py ``env_nvidia_tool``): which one a
#: compile uses depends on the Triton version and the target (3.6: ``ptxas`` below sm_100; 3.9: ``ptxas-blackwell``
#: from sm_90 on), so both are set.
TRITON_PTXAS_ENV = ("TRITON_PTXAS_PATH", "TRITON_PTXAS_BLACKWELL_PATH")


def triton_arch(capability: int) -> str:
    """The ``--gpu-name`` Triton passes ptxas for ``capability``: ``sm_90a`` for 90 (the ``a`` features from
    sm_90 on, triton/backends/nvidia/compiler.py ``sm_arch_from_capability``), ``sm_80`` for 80."""
    return f"sm_{capability}{'a' if capability >= 90 else ''}"


def triton_own_ptxas(capability: int) -> Path | None:
    """The ptxas this Triton runs for ``capability`` by itself (its ``get_ptxas``: the bundled binary or the one
    ``TRITON_PTXAS_PATH`` names); None when Triton has no such function or finds no ptxas."""
    try:
        from triton.backends.nvidia.compiler import get_ptxas

        return Path(get_ptxas(capability).path)
    except (ImportError, AttributeError, RuntimeError, TypeError):
        return None


def choose_ptxas(ptx_version: int, arch: str, candidates: Sequence[Path | None]) -> Path:
    """The first of ``candidates`` (None entries skipped) that reads PTX ISA ``ptx_version`` (Triton's form:
    90 for 9.0; ``evaluators.toolchain.ptx_isa_version``) and generates code for ``arch`` (``sm_90a``; not
    checked for a ptxas whose ``--help`` lists no targets). TritonSeedError listing every candidate with the PTX
    version it reads when none does."""
    from evaluators.toolchain import ptx_isa_version, ptxas_targets

    need = divmod(int(ptx_version), 10)
    tried = []
    for p in candidates:
        if p is None:
            continue
        isa = ptx_isa_version(p)
        targets = ptxas_targets(p)
        if isa is not None and isa >= need and (not targets or arch in targets):
            return Path(p)
        reads = f"PTX {isa[0]}.{isa[1]}" if isa else "an unknown PTX version"
        tried.append(f"{p} (reads {reads}{'' if not targets or arch in targets else f', no {arch}'})")
    raise TritonSeedError(f"no ptxas reads PTX {need[0]}.{need[1]} for {arch}: tried {'; '.join(tried) or 'none'}")


@contextmanager
def triton_ptxas(path: Path | None) -> Iterator[None]:
    """Within the block Triton runs ``path`` as ptxas (``TRITON_PTXAS_ENV``); the previous values are restored
    after. None: leave Triton's choice alone."""
    if path is None:
        yield
        return
    saved = {k: os.environ.get(k) for k in TRITON_PTXAS_ENV}
    os.environ.update({k: str(path) for k in TRITON_PTXAS_ENV})
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def compile_triton(fn: Any, signature: Mapping[str, str], constexprs: Mapping[str, Any] | None = None, *,
                   num_warps: int = 4, num_stages: int = 3, capability: int = SEED_CAPABILITY,
                   ptx_version: int | None = None) -> TritonPTX:
    """Compile the ``@triton.jit`` function ``fn`` to PTX for ``GPUTarget("cuda", capability, 32)`` (no GPU
    needed). signature: argument name -> Triton type (``"*bf16"``, ``"i32"``, ``"fp32"``; constexpr arguments
    may be left out); constexprs: their values; ptx_version: Triton's ``ptx_version`` option (None: Triton's
    default, from its own ptxas). Triton assembles with ``choose_ptxas``'s pick among its own ptxas and the
    project's (``evaluators.toolchain.ptxas_candidates``). Raises TritonSeedError naming a missing argument, or
    the ptxas binaries tried when none reads ``ptx_version``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    constexprs = dict(constexprs or {})
    names = list(fn.arg_names)
    sig = {}
    for n in names:
        if n in constexprs:
            sig[n] = "constexpr"
        elif n in signature:
            sig[n] = signature[n]
        else:
            raise TritonSeedError(f"Triton argument {n!r} of {fn.__name__} has no type (signature) and no "
                                  f"constexpr value")
    options: dict[str, Any] = {"num_warps": num_warps, "num_stages": num_stages}
    if ptx_version is not None:
        options["ptx_version"] = ptx_version
    from evaluators.toolchain import ptxas_candidates, ptxas_version

    own = triton_own_ptxas(capability)
    ptxas = own if ptx_version is None else choose_ptxas(ptx_version, triton_arch(capability),
                                                         [own, *ptxas_candidates()])
    with triton_ptxas(ptxas if ptxas != own else None):
        k = triton.compile(ASTSource(fn=fn, signature=sig, constexprs=constexprs),
                           target=GPUTarget("cuda", capability, 32), options=options)
    used = f"{ptxas} ({ptxas_version(ptxas).rsplit(', ', 1)[-1]})" if ptxas is not None else "Triton's default"
    md = k.metadata._asdict() if hasattr(k.metadata, "_asdict") else dict(vars(k.metadata))
    runtime = [n for n in names if sig[n] != "constexpr"]
    # the scratch pointers this Triton version appends (none before 3.3, global_scratch, then profile_scratch)
    n_params = len(parse_module(k.asm["ptx"]).function(md["name"]).params)
    extra = max(0, n_params - len(runtime)) if not any(sig[n].startswith("tensordesc") for n in runtime) else 2
    return TritonPTX(ptx=k.asm["ptx"], name=md["name"], arg_names=runtime + list(SCRATCH_PARAMS[:extra]),
                     num_warps=int(md["num_warps"]), shared=int(md.get("shared") or 0),
                     global_scratch_size=int(md.get("global_scratch_size") or 0),
                     cubin=k.asm.get("cubin", b""), metadata=md, ptxas=used)


def workload_signature(workload: Workload, param_map: Mapping[str, str]) -> dict[str, str]:
    """Triton types of the kernel arguments mapped to ABI parameters (``param_map``: Triton name -> ABI name):
    buffers get the element type of the workload's arrays (``make_inputs`` / ``outputs`` at the smallest gate
    shape), scalars the type of their ``.param`` (``u32`` -> ``i32``, ``f32`` -> ``fp32``)."""
    import numpy as np

    shape = min(workload.gate_shapes, key=lambda s: int(np.prod(s)))
    arrays = workload.make_inputs(shape, 0)
    dtypes = {k: getattr(v, "dtype", None) for k, v in arrays.items()}
    dtypes.update({o.name: o.dtype for o in workload.outputs(shape)})
    specs = {p.name: p for p in workload.abi}
    out = {}
    for tname, abi_name in param_map.items():
        spec = specs[abi_name]
        if spec.kind == "scalar":
            out[tname] = SCALAR_TYPES[spec.ptx_type]
            continue
        dt = dtypes.get(abi_name)
        key = str(getattr(dt, "name", dt))
        if key not in TRITON_DTYPES:
            raise TritonSeedError(f"ABI buffer {abi_name!r} has element type {key!r}, which has no Triton type; "
                                  f"give the signature explicitly")
        out[tname] = TRITON_DTYPES[key]
    return out


def default_param_map(arg_names: Sequence[str], workload: Workload) -> dict[str, str]:
    """Triton argument -> ABI parameter by name (case-insensitive, ``_ptr`` suffix ignored): ``x_ptr`` -> x."""
    abi = {p.name.lower(): p.name for p in workload.abi}
    out = {}
    for n in arg_names:
        if n in SCRATCH_PARAMS:
            continue
        key = n.lower().removesuffix("_ptr")
        if key in abi:
            out[n] = abi[key]
    return out


def adapt_to_abi(compiled: TritonPTX, workload: Workload, param_map: Mapping[str, str], *,
                 arch: str | None = SEED_ARCH, entry: str | None = None) -> str:
    """Compiled Triton PTX with the workload's ABI (module docstring): ``.param`` list in ABI order,
    ``param_map`` (Triton argument -> ABI parameter name) naming which is which; scratch parameters removed;
    ``.target`` set to ``arch`` (None: kept); the entry renamed to ``entry`` (default: the workload's).
    Raises TritonSeedError naming an unmapped argument, an unknown ABI name, a type mismatch or scratch use."""
    if compiled.global_scratch_size:
        raise TritonSeedError(f"{compiled.name} needs {compiled.global_scratch_size} bytes of global scratch per "
                              "program; the workload ABI has no scratch buffer")
    module = parse_module(compiled.ptx, filename=f"{compiled.name}.ptx")
    fn = module.function(compiled.name)
    if len(fn.params) != len(compiled.arg_names):
        raise TritonSeedError(f"{compiled.name} has {len(fn.params)} .params, Triton's arguments are "
                              f"{compiled.arg_names}")
    by_arg = dict(zip(compiled.arg_names, fn.params))
    specs = {p.name: p for p in workload.abi}
    for tname, abi_name in param_map.items():
        if tname not in by_arg:
            raise TritonSeedError(f"--map {tname}={abi_name}: {compiled.name} has no argument {tname!r}; it has "
                                  f"{[a for a in compiled.arg_names if a not in SCRATCH_PARAMS]}")
        if abi_name not in specs:
            raise TritonSeedError(f"--map {tname}={abi_name}: the {workload.name} ABI has no parameter "
                                  f"{abi_name!r}; it has {list(specs)}")
    unmapped = [a for a in compiled.arg_names if a not in SCRATCH_PARAMS and a not in param_map]
    if unmapped:
        raise TritonSeedError(f"Triton argument(s) {unmapped} of {compiled.name} map to no ABI parameter; name "
                              f"them with --map ARG=ABI_NAME (ABI: {list(specs)})")
    # Several Triton arguments may carry one ABI parameter (a row stride equal to N): the first one's .param
    # stays, the others' loads read it.
    inverse: dict[str, str] = {}
    aliases: dict[str, str] = {}
    for tname in compiled.arg_names:
        abi_name = param_map.get(tname)
        if abi_name is None:
            continue
        if abi_name in inverse:
            first = by_arg[inverse[abi_name]]
            if (first.type, first.attributes) != (by_arg[tname].type, by_arg[tname].attributes):
                raise TritonSeedError(f"--map {tname}={abi_name}: .{by_arg[tname].type} differs from "
                                      f"{inverse[abi_name]}'s .{first.type}")
            aliases[by_arg[tname].name] = first.name
        else:
            inverse[abi_name] = tname
    # A scalar the kernel reads through a pointer (Inductor's unspecialized float, a 0-d tensor): its loads
    # become loads of the ABI's by-value .param, which takes the pointer's place.
    by_value: dict[str, ast.Param] = {}
    for abi_name, tname in inverse.items():
        p, spec = by_arg[tname], specs[abi_name]
        if spec.kind == "scalar" and p.type in ("u64", "b64") and spec.ptx_type not in ("u64", "b64", "s64"):
            new = ast.Param(type=spec.ptx_type, name=f"{compiled.name}_{abi_name}_value")
            _scalar_through_pointer(fn.body or [], p.name, new.name, spec.ptx_type)
            by_value[abi_name] = new
    # Scratch pointers: unused when their size is 0; their loads read a null pointer instead.
    scratch = {by_arg[a].name for a in SCRATCH_PARAMS if a in by_arg}
    scratch |= {by_arg[inverse[a]].name for a in by_value}
    _replace_param_loads(fn.body or [], scratch, aliases)
    params: list[ast.Param] = []
    for spec in workload.abi:
        tname = inverse.get(spec.name)
        if tname is None:  # the kernel does not read it: an unused parameter keeps the ABI's position
            params.append(ast.Param(type=spec.ptx_type, name=f"{workload.entry}_unused_{spec.name}"))
            continue
        if spec.name in by_value:
            params.append(by_value[spec.name])
            continue
        p = by_arg[tname]
        if spec.kind == "scalar" and (p.type[1:] != spec.ptx_type[1:] or (p.type[0] == "f") != (spec.ptx_type[0] == "f")):
            raise TritonSeedError(f"--map {tname}={spec.name}: {compiled.name} declares .{p.type}, the ABI .{spec.ptx_type}")
        params.append(p)
    fn.params = params
    fn.name = entry or workload.entry
    if arch is not None:
        module.target = (arch, *[t for t in module.target[1:] if not t.startswith("sm_")])
    return print_module(module)


def _scalar_through_pointer(body: list, pointer: str, value: str, ptx_type: str) -> None:
    """In place: every load through the pointer parameter ``pointer`` (``ld.param`` of it, then ``mov`` /
    ``cvta`` copies of that register, then ``ld.global`` at offset 0 from one) becomes ``ld.param`` of the
    by-value parameter ``value`` (guard kept). TritonSeedError when the pointer is used otherwise, or the load
    is not as wide as ``ptx_type``."""
    held: set[str] = set()
    bits = int(re.sub(r"\D", "", ptx_type))
    for event, s, lst, i, _depth in ast.iter_body(body):
        if event != "stmt" or not isinstance(s, ast.Instruction) or not s.operands:
            continue
        ops = s.operands
        src = ops[1] if len(ops) == 2 else None
        if s.opcode == "ld" and "param" in s.modifiers and isinstance(src, ast.Address) \
                and isinstance(src.base, ast.Symbol) and src.base.name == pointer:
            held.add(ops[0].name)  # type: ignore[union-attr]
            continue
        mentioned = {r.name for o in ops for r in _registers(o)}
        if not mentioned & held:
            continue
        if s.opcode in ("mov", "cvta") and isinstance(src, ast.Register) and src.name in held:
            held.add(ops[0].name)  # type: ignore[union-attr]
            continue
        if s.opcode == "ld" and isinstance(src, ast.Address) and isinstance(src.base, ast.Register) \
                and src.base.name in held and not src.offset:
            width = next((int(m[1:]) for m in s.modifiers if re.fullmatch(r"[bsuf]\d+", m)), 0)
            if width != bits or any(m in ("v2", "v4", "v8") for m in s.modifiers):
                raise TritonSeedError(f"{s.full_opcode} reads {width} bits through {pointer}; the ABI passes .{ptx_type}")
            dst = ops[0]
            if isinstance(dst, ast.Vector) and len(dst.elements) == 1:
                dst = dst.elements[0]
            lst[i] = ast.Instruction("ld", ("param", f"b{bits}"), (dst, ast.Address(ast.Symbol(value))), s.predicate)
            continue
        raise TritonSeedError(f"{s.full_opcode} uses the pointer {pointer} other than by a load; cannot pass it by value")


def _registers(op: ast.Operand) -> list[ast.Register]:
    if isinstance(op, ast.Register):
        return [op]
    if isinstance(op, ast.Address) and isinstance(op.base, ast.Register):
        return [op.base]
    if isinstance(op, ast.Vector | ast.ParenList | ast.HandleAddress):
        return [r for e in op.elements for r in _registers(e)]
    return []


def _replace_param_loads(body: list, zero: set[str], aliases: Mapping[str, str]) -> None:
    """In place, in every scope: ``ld.param.X %r, [p]`` of a parameter in ``zero`` -> ``mov.bX %r, 0``; of a
    parameter in ``aliases`` -> the same load of ``aliases[p]``. Any other use of those parameters (their
    address taken) raises TritonSeedError."""
    for event, s, lst, i, _depth in ast.iter_body(body):
        if event != "stmt" or not isinstance(s, ast.Instruction):
            continue
        for k, op in enumerate(s.operands):
            base = op.base if isinstance(op, ast.Address) else op
            if not (isinstance(base, ast.Symbol) and (base.name in zero or base.name in aliases)):
                continue
            if s.opcode != "ld" or "param" not in s.modifiers or k != 1 or not isinstance(op, ast.Address):
                raise TritonSeedError(f"parameter {base.name} is used by {s.full_opcode}, not only loaded")
            if base.name in zero:
                bits = next((m[1:] for m in s.modifiers if re.fullmatch(r"[bsu]\d+", m)), "64")
                lst[i] = ast.Instruction("mov", (f"b{bits}",), (s.operands[0], ast.Immediate("0")), s.predicate)
            else:
                new = ast.Address(ast.Symbol(aliases[base.name]), op.offset)
                lst[i] = ast.Instruction(s.opcode, s.modifiers, (s.operands[0], new), s.predicate)


@dataclass
class TritonSeed:
    """A Triton kernel adapted to a workload: ``ptx`` (ABI-conforming PTX text) and ``launch`` (the rule:
    grid as given, block = 32 x num_warps, dynamic smem = Triton's shared bytes)."""

    ptx: str
    launch: LaunchRule
    compiled: TritonPTX

    def config_lines(self, path: str) -> str:
        """The ``workload`` config keys that start a search from this seed (YAML)."""
        lr = self.launch
        grid = ", ".join(str(g) for g in lr.grid)
        return (f"seed_ptx: {path}\nseed_launch: {{grid: [{grid}], block: [{lr.block[0]}, {lr.block[1]}, "
                f"{lr.block[2]}], dynamic_smem: {lr.dynamic_smem}}}")


def triton_seed(fn: Any, workload: Workload, *, grid: Sequence[str | int], constexprs: Mapping[str, Any] | None = None,
                param_map: Mapping[str, str] | None = None, num_warps: int = 4, num_stages: int = 3,
                arch: str = SEED_ARCH, capability: int = SEED_CAPABILITY) -> TritonSeed:
    """``fn`` compiled for ``capability`` at the project's PTX version and adapted to ``workload``'s ABI
    (``param_map`` default: by name, ``default_param_map``), launched on ``grid`` (expressions of the
    workload's scalars). TritonSeedError / SeedConfigError on a mismatch."""
    runtime = [n for n in fn.arg_names if n not in (constexprs or {})]
    pmap = dict(param_map) if param_map is not None else default_param_map(runtime, workload)
    unmapped = [a for a in runtime if a not in pmap]
    if unmapped:
        raise TritonSeedError(f"Triton argument(s) {unmapped} of {fn.__name__} map to no ABI parameter; name them "
                              f"with --map ARG=ABI_NAME (ABI: {[p.name for p in workload.abi]})")
    compiled = compile_triton(fn, workload_signature(workload, pmap), constexprs, num_warps=num_warps,
                              num_stages=num_stages, capability=capability, ptx_version=project_ptx_version())
    text = adapt_to_abi(compiled, workload, pmap, arch=arch)
    rule = LaunchRule.from_config({"grid": list(grid), "block": [32 * compiled.num_warps, 1, 1],
                                   "dynamic_smem": compiled.shared})
    return TritonSeed(text, rule, compiled)


# -------------------------------------------------------------------------------------------------- Inductor


def inductor_kernels(fn: Callable[..., Any], *args: Any) -> list[Any]:
    """The Triton kernels Inductor generates for ``torch.compile(fn, dynamic=True)(*args)`` (needs CUDA torch
    and tensors on the GPU), as Inductor's ``CachingAutotuner`` objects in launch order: ``.fn`` is the ``@triton.jit``
    function, ``.launchers[0]`` the chosen config (``.config.kwargs``, ``.config.num_warps``, ``.bin``). Raises
    TritonSeedError when Inductor produced no Triton kernel."""
    import torch
    from torch._inductor.codecache import PyCodeCache
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    _, sources = run_and_get_code(torch.compile(fn, dynamic=True), *args)
    kernels = []
    for src in sources:
        mod = PyCodeCache.load(src)
        for name in re.findall(r"^(triton_\w+) = async_compile\.triton\(", src, flags=re.M):
            kernels.append(getattr(mod, name))
    if not kernels:
        raise TritonSeedError("torch.compile generated no Triton kernel for the reference")
    return kernels


def inductor_rmsnorm_seed(workload: Workload, shape: tuple[int, int] = (4096, 4096), arch: str = SEED_ARCH) -> TritonSeed:
    """The Triton kernel ``torch.compile`` generates for RMSNorm (``x * rsqrt(mean(x^2) + eps) * w`` in float32)
    at ``shape`` with dynamic shapes and an unspecialized eps (``torch._dynamo.config.specialize_float =
    False``), so M, N and eps are kernel arguments, adapted to the RMSNorm ABI ``(x, w, y, M, N, eps)``.

    Arguments are matched by Inductor's naming: ``out_ptr*`` / ``in_out_ptr*`` -> y; the ``in_ptr`` of x's
    element type -> x, the other -> w (in order when both are float32); ``xnumel`` -> M; ``r*numel`` and the
    size symbols ``ks*`` (row strides) -> N; a float scalar -> eps (compiled as fp32). Grid:
    ``cdiv(M, XBLOCK)`` for the chosen config's XBLOCK rows per program. Needs CUDA torch. TritonSeedError
    naming the arguments when the generated code is not one row-reduction kernel of that form."""
    import torch

    if not torch.cuda.is_available():
        raise TritonSeedError(f"--inductor needs a CUDA build of torch and a GPU (torch {torch.__version__}, "
                              f"CUDA available: no): Inductor generates Triton kernels for CUDA tensors only")
    dt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[workload.dtype]
    m, n = shape
    x = torch.randn(m, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=torch.float32)

    def rmsnorm(x: Any, w: Any, eps: float) -> Any:
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w).to(x.dtype)

    import torch._dynamo.config as dynamo_config

    saved = dynamo_config.specialize_float
    dynamo_config.specialize_float = False
    try:
        kernels = inductor_kernels(rmsnorm, x, w, 1e-6)
    finally:
        dynamo_config.specialize_float = saved
    if len(kernels) != 1:
        raise TritonSeedError(f"torch.compile generated {len(kernels)} Triton kernels for RMSNorm; a seed needs one")
    autotuner = kernels[0]
    jit = autotuner.fn
    cfg = autotuner.launchers[0].config
    constexprs = dict(cfg.kwargs)
    sig = dict(autotuner.triton_meta["signature"])
    constexprs.update({k: v for k, v in (autotuner.triton_meta.get("constants") or {}).items()
                       if isinstance(k, str) and k in jit.arg_names})
    names = [a for a in jit.arg_names if a not in constexprs and sig.get(a) != "constexpr"]
    mapping, types = inductor_rmsnorm_mapping(names, sig, getattr(jit, "src", ""), workload)
    compiled = compile_triton(jit, types, constexprs, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
                              ptx_version=project_ptx_version())
    text = adapt_to_abi(compiled, workload, mapping, arch=arch)
    xblock = int(constexprs.get("XBLOCK", 1))
    rule = LaunchRule.from_config({"grid": [f"cdiv(M, {xblock})" if xblock > 1 else "M", 1, 1],
                                   "block": [32 * compiled.num_warps, 1, 1], "dynamic_smem": compiled.shared})
    return TritonSeed(text, rule, compiled)


def _scalar_pointer(src: str, name: str) -> bool:
    """Whether the Triton source only ever reads ``name`` at offset 0 (``tl.load(in_ptr2 + (0))``): a scalar
    passed through memory."""
    uses = re.findall(rf"\b{re.escape(name)}\b\s*\+\s*([^,)\]]+\)?)", src.split(":", 1)[-1])
    return bool(uses) and all(u.replace(" ", "") in ("(0)", "0", "0)") for u in uses)


def inductor_rmsnorm_mapping(names: Sequence[str], signature: Mapping[str, Any], src: str,
                             workload: Workload) -> tuple[dict[str, str], dict[str, str]]:
    """(Inductor argument -> RMSNorm ABI name, argument -> Triton type to compile with) for the arguments
    ``names`` of an Inductor RMSNorm kernel with Triton types ``signature`` and source ``src``: the output
    pointer -> y; a pointer read only at offset 0 (an unspecialized float) or a float scalar -> eps (fp32);
    the input pointer of x's element type -> x, the other -> w; ``xnumel`` -> M; ``r*numel`` and ``ks*`` -> N.
    TritonSeedError naming the arguments when that does not cover the ABI exactly once per buffer."""
    x_type = TRITON_DTYPES[workload.dtype]
    mapping: dict[str, str] = {}
    types: dict[str, str] = {}
    outputs = [a for a in names if str(signature.get(a, "")).startswith("*") and a.startswith(("out_ptr", "in_out_ptr"))]
    if len(outputs) > 1:
        raise TritonSeedError(f"the Inductor kernel writes {len(outputs)} buffers {outputs}; the ABI has one output")
    for a in names:
        t = str(signature.get(a, ""))
        if t.startswith("*"):
            if a in outputs:
                mapping[a] = "y"
            elif t.startswith("*fp") and _scalar_pointer(src, a):
                mapping[a], types[a] = "eps", "*fp32"
                continue
            elif t == x_type and "x" not in mapping.values():
                mapping[a] = "x"
            else:
                mapping[a] = "w"
            types[a] = TRITON_DTYPES["fp32"] if mapping[a] == "w" else x_type
        elif t.startswith("fp"):
            mapping[a], types[a] = "eps", "fp32"
        elif a == "xnumel":
            mapping[a], types[a] = "M", "i32"
        elif re.fullmatch(r"r\d*_?numel|ks\d+", a):
            mapping[a], types[a] = "N", "i32"
    unmapped = [a for a in names if a not in mapping]
    if unmapped or sorted(set(mapping.values())) != sorted(p.name for p in workload.abi):
        raise TritonSeedError(f"Inductor kernel arguments {tuple(names)} with types {dict(signature)}: mapped "
                              f"{mapping}, cannot map {unmapped} onto the ABI {[p.name for p in workload.abi]}")
    return mapping, types


# ------------------------------------------------------------------------------------------------------- CLI


def _load(spec: str) -> Any:
    mod_name, _, attr = spec.partition(":")
    if not attr:
        raise TritonSeedError(f"--kernel {spec!r}: expected MODULE:FUNCTION (a @triton.jit function)")
    obj = getattr(importlib.import_module(mod_name), attr, None)
    if obj is None or not hasattr(obj, "arg_names"):
        raise TritonSeedError(f"--kernel {spec}: {attr!r} is not a @triton.jit function of {mod_name}")
    return obj


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k or not v:
            raise TritonSeedError(f"{what} {it!r}: expected NAME=VALUE")
        out[k] = v
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m workloads.triton_seed``: see the module docstring. Exit 0 on success, 2 on bad input."""
    ap = argparse.ArgumentParser(prog="python -m workloads.triton_seed", description=__doc__.splitlines()[0])
    ap.add_argument("workload", help="a workload config name (conf/workload/<name>.yaml), e.g. rmsnorm")
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--kernel", help="MODULE:FUNCTION of a @triton.jit kernel")
    src.add_argument("--inductor", action="store_true", help="the kernel torch.compile generates (CUDA torch)")
    ap.add_argument("--map", action="append", default=[], metavar="ARG=ABI", help="Triton argument -> ABI parameter")
    ap.add_argument("--constexpr", action="append", default=[], metavar="NAME=INT", help="constexpr values")
    ap.add_argument("--num-warps", type=int, default=4)
    ap.add_argument("--num-stages", type=int, default=3)
    ap.add_argument("--grid", default="M,1,1", help="grid expressions of the workload's scalars (default M,1,1)")
    ap.add_argument("--arch", default=SEED_ARCH, help=f"the .target written into the seed (default {SEED_ARCH})")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=VALUE", help="workload option")
    ap.add_argument("-o", "--output", required=True, help="where to write the PTX")
    args = ap.parse_args(argv)
    from workloads.registry import get_workload

    try:
        workload = get_workload(args.workload, **_pairs(args.option, "--option"))
        if args.inductor:
            seed = inductor_rmsnorm_seed(workload, arch=args.arch)
        else:
            fn = _load(args.kernel)
            consts = {k: int(v) for k, v in _pairs(args.constexpr, "--constexpr").items()}
            pmap = _pairs(args.map, "--map") or None
            seed = triton_seed(fn, workload, grid=args.grid.split(","), constexprs=consts, param_map=pmap,
                               num_warps=args.num_warps, num_stages=args.num_stages, arch=args.arch)
    except (TritonSeedError, SeedConfigError, ValueError) as e:
        print(f"triton_seed: {e}", file=sys.stderr)
        return 2
    Path(args.output).write_text(seed.ptx)
    print(f"wrote {args.output}: entry {workload.entry}, {seed.compiled.num_warps} warps, "
          f"{seed.compiled.shared} bytes dynamic smem (Triton kernel {seed.compiled.name}, ptxas "
          f"{seed.compiled.ptxas})")
    print("workload config:\n" + seed.config_lines(args.output))
    return 0


if __name__ == "__main__":
    sys.exit(main())
