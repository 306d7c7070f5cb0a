"""Seeds from outside: start a search from the user's own kernel (``workload.seed_ptx=<file.ptx | file.cu>``).

The kernel must implement the workload's operation with the workload's ABI (``Workload.abi``: its ``.entry``
takes the same parameters in the same order; ``workloads.base.check_abi``), and its launch rule is stated in
the config, because a foreign kernel has its own (Triton picks its grid, warps and shared memory)::

    workload:
      _target_: workloads.rmsnorm.RMSNorm
      dtype: bf16
      seed_ptx: my_rmsnorm.ptx          # or .cu (compiled with nvcc -ptx for targets.spec.SEED_ARCH)
      seed_entry: null                  # the .entry to start from (default: the only one, or workload.entry)
      seed_launch:
        grid: [M, 1, 1]                 # expressions of the workload's scalars at the shape (M, N, ...)
        block: [128, 1, 1]              # threads per CTA
        dynamic_smem: 0                 # bytes of dynamic shared memory per CTA

Grid expressions are integers, names of ``Workload.scalars(shape)`` (RMSNorm: ``M``, ``N``), ``+ - * // %``,
parentheses and ``cdiv(a, b)`` (ceiling division), ``min``, ``max``; ``block_x`` / ``block_y`` /
``block_z`` name the launch's block (an edit may change it).

``ExternalSeedWorkload`` wraps the configured workload: inputs, reference, shapes, gate rules and baselines are
the workload's; its seeds are the user's kernel alone, its launch rule is the one above, and it has no template
knobs (``knob_space`` is empty, so the template operator declines with "no template knobs" and the other
operators edit the user's PTX). ``workloads.registry.build_workload`` applies it when a workload config holds
``seed_ptx``.
"""

from __future__ import annotations

import ast as pyast
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from population.kernel import Kernel, LaunchConfig
from workloads.base import AbiMismatch, Dim3, OutputSpec, Shape, StagePlan, Workload, check_abi

#: Config keys of a workload node that belong to the external seed, not to the workload's constructor.
SEED_KEYS = ("seed_ptx", "seed_entry", "seed_launch")


class SeedConfigError(ValueError):
    """A ``seed_ptx`` configuration that cannot be used; the message names the config key and the file."""


# ------------------------------------------------------------------------------------------------ launch rule


_FUNCS = {"cdiv": lambda a, b: -(-a // b), "min": min, "max": max}


def _eval(node: pyast.AST, names: Mapping[str, int], expr: str) -> int:
    if isinstance(node, pyast.Expression):
        return _eval(node.body, names, expr)
    if isinstance(node, pyast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, pyast.Name):
        if node.id not in names:
            raise ValueError(f"{expr!r}: unknown name {node.id!r}; known: {sorted(names)}")
        return int(names[node.id])
    if isinstance(node, pyast.UnaryOp) and isinstance(node.op, pyast.USub):
        return -_eval(node.operand, names, expr)
    if isinstance(node, pyast.BinOp):
        a, b = _eval(node.left, names, expr), _eval(node.right, names, expr)
        ops = {pyast.Add: lambda: a + b, pyast.Sub: lambda: a - b, pyast.Mult: lambda: a * b,
               pyast.FloorDiv: lambda: a // b, pyast.Mod: lambda: a % b}
        fn = ops.get(type(node.op))
        if fn is None:
            raise ValueError(f"{expr!r}: operator {type(node.op).__name__} is not allowed (+ - * // % only)")
        if isinstance(node.op, pyast.FloorDiv | pyast.Mod) and b == 0:
            raise ValueError(f"{expr!r}: division by zero")
        return fn()
    if isinstance(node, pyast.Call) and isinstance(node.func, pyast.Name) and node.func.id in _FUNCS \
            and not node.keywords:
        return int(_FUNCS[node.func.id](*(_eval(a, names, expr) for a in node.args)))
    raise ValueError(f"{expr!r}: only integers, names, + - * // %, cdiv(), min() and max() are allowed")


class _AnyName(dict):
    """Every name is bound to 1: checks a grid expression's form before the workload's scalars are known."""

    def __contains__(self, key: object) -> bool:
        return True

    def __missing__(self, key: str) -> int:
        return 1


def eval_int(expr: str | int, names: Mapping[str, int]) -> int:
    """The integer value of a grid expression (module docstring) with ``names`` bound; ValueError saying what
    is wrong (unknown name, operator, syntax)."""
    if isinstance(expr, bool):
        raise ValueError(f"{expr!r}: a grid dimension must be an integer expression")
    if isinstance(expr, int):
        return expr
    try:
        tree = pyast.parse(str(expr), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"{expr!r}: not an expression ({e.msg})") from None
    return _eval(tree, names, str(expr))


@dataclass(frozen=True)
class LaunchRule:
    """How the user's kernel is launched: ``grid`` (three integer expressions of the workload's scalars),
    ``block`` (threads per CTA, x y z) and ``dynamic_smem`` (bytes of dynamic shared memory per CTA)."""

    grid: tuple[str | int, str | int, str | int]
    block: tuple[int, int, int] = (256, 1, 1)
    dynamic_smem: int = 0

    @classmethod
    def from_config(cls, node: Mapping[str, Any] | None, key: str = "workload.seed_launch") -> LaunchRule:
        """The rule of a ``seed_launch`` mapping (``grid`` required; ``block`` default 256x1x1; ``dynamic_smem``
        default 0). SeedConfigError naming ``key.<field>`` for a missing or malformed field."""
        if not node or "grid" not in node:
            raise SeedConfigError(f"{key}.grid is required: the grid of the seed kernel as three expressions of "
                                  "the workload's scalars, e.g. [M, 1, 1] or [cdiv(M, 4), 1, 1]")
        unknown = set(node) - {"grid", "block", "dynamic_smem"}
        if unknown:
            raise SeedConfigError(f"{key}: unknown key(s) {sorted(unknown)}; have grid, block, dynamic_smem")

        def dims(name: str, value: Any, ints: bool) -> tuple:
            v = list(value) if isinstance(value, list | tuple) else [value]
            v += [1] * (3 - len(v))
            if len(v) != 3 or (ints and not all(isinstance(x, int) and not isinstance(x, bool) and x >= 1 for x in v)):
                raise SeedConfigError(f"{key}.{name}: expected up to three {'positive integers' if ints else 'expressions'}"
                                      f", got {value!r}")
            return tuple(v)

        grid = dims("grid", node["grid"], ints=False)
        for i, g in enumerate(grid):
            try:
                pyast.parse(str(g), mode="eval")
            except SyntaxError:
                raise SeedConfigError(f"{key}.grid[{i}]: {g!r} is not an expression") from None
            try:  # the form is checked now (names get their values at each shape)
                eval_int(g, _AnyName())
            except ValueError as e:
                if "division by zero" not in str(e):
                    raise SeedConfigError(f"{key}.grid[{i}]: {e}") from None
        block = dims("block", node.get("block", [256, 1, 1]), ints=True)
        smem = node.get("dynamic_smem", 0)
        if not isinstance(smem, int) or isinstance(smem, bool) or smem < 0:
            raise SeedConfigError(f"{key}.dynamic_smem: bytes >= 0, got {smem!r}")
        if block[0] * block[1] * block[2] > 1024:
            raise SeedConfigError(f"{key}.block: {block} has more than 1024 threads")
        return cls(grid=grid, block=block, dynamic_smem=smem)  # type: ignore[arg-type]

    def to_config(self) -> dict[str, Any]:
        """The ``seed_launch`` mapping of this rule (plain data)."""
        return {"grid": list(self.grid), "block": list(self.block), "dynamic_smem": self.dynamic_smem}

    def grid_for(self, names: Mapping[str, int], block: Dim3) -> Dim3:
        """The grid at the given scalar values and block; ValueError naming the dimension on a bad expression
        or a dimension below 1."""
        bound = {**names, "block_x": block[0], "block_y": block[1], "block_z": block[2]}
        out = []
        for i, g in enumerate(self.grid):
            try:
                v = eval_int(g, bound)
            except ValueError as e:
                raise ValueError(f"seed_launch.grid[{i}]: {e}") from None
            if v < 1:
                raise ValueError(f"seed_launch.grid[{i}] = {g!r} gives {v} CTAs at {dict(names)}; need >= 1")
            out.append(v)
        return (out[0], out[1], out[2])


# ------------------------------------------------------------------------------------------------ the kernel


def seed_path(path: str | Path, key: str = "workload.seed_ptx") -> Path:
    """``path`` (``~`` expanded) when it is an existing ``.ptx`` or ``.cu`` file; SeedConfigError naming ``key``
    for a missing file or another suffix."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise SeedConfigError(f"{key}={path}: no such file")
    if p.suffix not in (".ptx", ".cu"):
        raise SeedConfigError(f"{key}={path}: expected a .ptx or .cu file")
    return p


def read_seed_ptx(path: str | Path, key: str = "workload.seed_ptx") -> str:
    """PTX text of a ``.ptx`` file, or of a ``.cu`` file compiled with nvcc (``workloads.cuda_build``).
    SeedConfigError naming ``key`` for a missing file or another suffix; SeedBuildError when nvcc fails."""
    p = seed_path(path, key)
    if p.suffix == ".ptx":
        return p.read_text()
    from workloads.cuda_build import build_ptx

    return build_ptx(p.resolve())


def seed_kernel(text: str, workload: Workload, rule: LaunchRule, *, entry: str | None = None,
                source: str = "seed.ptx", key: str = "workload.seed_ptx") -> Kernel:
    """The user's PTX as a seed Kernel of ``workload``: parsed (PTXSyntaxError with ``source``:line:col), its
    entry chosen (``entry``, else the only ``.entry``, else the one named ``workload.entry``) and checked
    against ``workload.abi`` (SeedConfigError naming the parameter and the ABI), launched by ``rule``.
    operator ``"seed"``, no knobs."""
    from population.parser import parse_module

    module = parse_module(text, filename=source)
    names = [f.name for f in module.entries]
    if not names:
        raise SeedConfigError(f"{key}={source}: the module has no .entry")
    if entry is None:
        entry = names[0] if len(names) == 1 else (workload.entry if workload.entry in names else None)
        if entry is None:
            raise SeedConfigError(f"{key}={source}: {len(names)} entries {names}; choose one with "
                                  f"{key.rsplit('.', 1)[0]}.seed_entry")
    elif entry not in names:
        raise SeedConfigError(f"{key.rsplit('.', 1)[0]}.seed_entry={entry}: {source} has entries {names}")
    fn = module.function(entry)
    try:
        check_abi(workload.abi, [p.type for p in fn.params], entry)
    except AbiMismatch as e:
        abi = ", ".join(f"{p.name} .{p.ptx_type}" for p in workload.abi)
        raise SeedConfigError(f"{key}={source}: {e}; the {workload.name} ABI is ({abi})") from None
    return Kernel(module=module, entry=entry,
                  launch=LaunchConfig(block=rule.block, dynamic_smem_bytes=rule.dynamic_smem), operator="seed")


# -------------------------------------------------------------------------------------------- the workload


class ExternalSeedWorkload(Workload):
    """``workload`` searched from the user's kernel (module docstring).

    workload: the wrapped Workload (or its ``_target_`` spec); seed_ptx: path of the .ptx / .cu file;
    seed_launch: the launch rule mapping; seed_entry: the entry to use (None: see ``seed_kernel``).
    Raises SeedConfigError (naming ``workload.seed_*``) on a bad file, entry, ABI or launch rule.
    """

    def __init__(self, workload: Workload | Mapping[str, Any], seed_ptx: str,
                 seed_launch: Mapping[str, Any] | None = None, seed_entry: str | None = None):
        if not isinstance(workload, Workload):
            from workloads.registry import build_workload

            workload = build_workload(dict(workload))
        self.inner = workload
        self.seed_ptx = str(seed_ptx)
        self.seed_entry = seed_entry
        seed_path(seed_ptx)  # a wrong path is named before the launch rule that goes with it
        self.rule = LaunchRule.from_config(seed_launch)
        self._seed = seed_kernel(read_seed_ptx(seed_ptx), workload, self.rule, entry=seed_entry,
                                 source=str(seed_ptx))
        for attr in ("name", "entry", "dtype", "abi", "search_shapes", "benchmark_shapes", "gate_shapes",
                     "heldout_shapes", "distributions", "primary_baseline", "baseline_names", "uses_atomics",
                     "scalar_draws", "nonfinite_distributions"):
            setattr(self, attr, getattr(workload, attr))
        if hasattr(workload, "elt"):  # bytes per streamed element (evaluators.features reads it when present)
            self.elt = workload.elt
        self.entry = self._seed.entry
        self.knob_space: dict[str, tuple[int, ...]] = {}
        self.default_knobs: dict[str, int] = {}

    def __repr__(self) -> str:
        return f"ExternalSeedWorkload({self.inner!r}, seed_ptx={self.seed_ptx!r})"

    def options(self) -> dict[str, Any]:
        return {**self.inner.options(), "seed_ptx": self.seed_ptx, "seed_launch": self.rule.to_config(),
                "seed_entry": self.seed_entry}

    def spec(self) -> dict[str, Any]:
        """The wrapped workload's spec plus ``seed_ptx`` / ``seed_launch`` / ``seed_entry``: what
        ``workloads.registry.build_workload`` turns back into this wrapper (in a GPU worker, a Ray actor)."""
        return {**self.inner.spec(), "seed_ptx": self.seed_ptx, "seed_launch": self.rule.to_config(),
                "seed_entry": self.seed_entry}

    # kernels: the user's only; no template
    def seeds(self) -> list[Kernel]:
        """[the user's kernel] (a fresh Kernel each call, sharing nothing mutable)."""
        from population.edits import copy_module

        return [Kernel(module=copy_module(self._seed.module), entry=self._seed.entry, launch=self._seed.launch,
                       operator="seed")]

    def instantiate(self, knobs: Mapping[str, int]) -> Kernel:
        """No template: ValueError (the template operator sees an empty ``knob_space`` and declines first)."""
        raise ValueError(f"the seed from {self.seed_ptx} has no template knobs (got {dict(knobs)})")

    # launch: the configured rule
    def launch_dims(self, shape: Shape, launch: LaunchConfig) -> tuple[Dim3, Dim3, int]:
        """(grid from ``seed_launch.grid`` at the workload's scalars for ``shape``, launch.block, launch's dynamic
        shared memory). ValueError for a bad grid expression or a block over 1024 threads."""
        if launch.threads > 1024:
            raise ValueError(f"block {launch.block} has {launch.threads} threads; the limit is 1024")
        names = {k: int(v) for k, v in self.inner.scalars(shape).items() if float(v).is_integer()}
        return self.rule.grid_for(names, launch.block), launch.block, launch.dynamic_smem_bytes

    def elements_per_cta_sweep(self, shape: Shape, launch: LaunchConfig) -> int:
        """Output elements per CTA: the outputs' element count over the grid's CTAs (rounded up)."""
        grid, _, _ = self.launch_dims(shape, launch)
        total = sum(math.prod(o.shape) for o in self.inner.outputs(shape))
        return max(1, -(-total // (grid[0] * grid[1] * grid[2])))

    # everything else is the workload's
    def baselines(self, inputs: Mapping[str, Any], shape: Shape, names: tuple[str, ...],
                  notes: dict[str, str]) -> dict[str, Any]:
        return self.inner.baselines(inputs, shape, names, notes)

    def bytes_moved(self, shape: Shape) -> int:
        return self.inner.bytes_moved(shape)

    def flops(self, shape: Shape) -> int:
        return self.inner.flops(shape)

    def make_inputs(self, shape: Shape, seed: int, distribution: str = "normal",
                    xp: ModuleType = np) -> dict[str, Any]:
        return self.inner.make_inputs(shape, seed, distribution, xp)

    def outputs(self, shape: Shape) -> list[OutputSpec]:
        return self.inner.outputs(shape)

    def scalars(self, shape: Shape, params: Mapping[str, float] | None = None) -> dict[str, int | float]:
        return self.inner.scalars(shape, params) if params else self.inner.scalars(shape)

    def reference(self, inputs: Mapping[str, Any], xp: ModuleType = np,
                  params: Mapping[str, float] | None = None) -> dict[str, Any]:
        return self.inner.reference(inputs, xp, params) if params else self.inner.reference(inputs, xp)

    def reference_rows(self, inputs: Mapping[str, Any], rows: Any, xp: ModuleType = np,
                       params: Mapping[str, float] | None = None) -> dict[str, Any]:
        return self.inner.reference_rows(inputs, rows, xp, params)

    def reference_blocks(self, inputs: Mapping[str, Any], max_elements: int, xp: ModuleType = np,
                         params: Mapping[str, float] | None = None
                         ) -> Iterator[tuple[tuple[slice, ...], dict[str, Any]]]:
        return self.inner.reference_blocks(inputs, max_elements, xp, params)

    def draw_params(self, seed: int) -> dict[str, float]:
        return self.inner.draw_params(seed)

    def plan(self, inputs: Mapping[str, Any], outputs: Mapping[str, Any], shape: Shape,
             params: Mapping[str, float] | None = None, xp: ModuleType = np) -> StagePlan:
        return self.inner.plan(inputs, outputs, shape, params, xp)

    @property
    def tolerance(self) -> tuple[float, float]:
        return self.inner.tolerance


def with_seed_ptx(workload: Workload, node: Mapping[str, Any], key: str = "workload") -> Workload:
    """``workload`` wrapped in ExternalSeedWorkload when the config ``node`` holds ``seed_ptx`` (else itself);
    ``key`` names the node in error messages."""
    path = node.get("seed_ptx")
    if not path:
        return workload
    try:
        return ExternalSeedWorkload(workload, path, node.get("seed_launch"), node.get("seed_entry"))
    except SeedConfigError as e:
        raise SeedConfigError(str(e).replace("workload.", f"{key}.", 1)) from None
