"""Checks of a workload's own definition before a run spends any evaluation on it.

A seed that does not fit its own workload (a ``.param`` list other than ``abi``, an ``entry`` the module does
not export, a launch its ``launch_dims`` refuses at a search shape, a ``.cu`` seed nvcc rejects) or a pipeline
whose stage list does not match its ABI is an authoring error, not a candidate: without this check the run goes
on for its whole budget with every candidate ``launch_error`` (0 % valid) and the final line does not say why.
``check_workload`` turns each into one ``WorkloadConfigError`` naming the workload, the seed and the reason;
``evolve.app`` calls it right after building the workload, so ``python -m evolve`` stops with
``configuration error: workload: ...`` (exit status 2) before any work.
"""

from __future__ import annotations

from workloads.base import AbiMismatch, Workload, check_abi
from workloads.registry import WorkloadConfigError, build_workload

REQUIRED_ATTRIBUTES = ("name", "entry", "dtype", "abi", "knob_space", "default_knobs", "search_shapes",
                       "benchmark_shapes", "gate_shapes", "heldout_shapes", "distributions", "primary_baseline")


def check_workload(workload: Workload, key: str = "workload") -> None:
    """Check ``workload``'s seeds (and, for a pipeline workload, its stage list) against its own ABI and launch
    rule; a seed that passes may still fail ptxas or the gate, which are the evaluation's to judge.

    First the attributes every workload sets (``REQUIRED_ATTRIBUTES``) and ``spec()``: ``build_workload(spec())``
    must rebuild an equal workload, as the GPU workers do (a class whose ``options()`` leaves out a constructor
    argument fails there, not on the CPU). Then, for every kernel of ``workload.seeds()`` (in order; the message names it ``seed i``): its ``entry`` is a
    function of its module, its parameter types conform to ``workload.abi`` (``workloads.base.check_abi``), and
    ``workload.launch_dims`` accepts its launch at every search shape. A ``workloads.pipeline.PipelineWorkload``
    is checked with ``validate_stages`` at its first gate shape (inputs drawn with ``make_inputs(shape, 0)``).

    Raises WorkloadConfigError (a ValueError) naming ``key``, the workload class and the first breach: a missing
    attribute, a ``spec()`` that does not rebuild the workload, seeds()
    raised (e.g. ``workloads.cuda_build.SeedBuildError`` with nvcc's first error and its line), no seeds, an
    entry missing, an ABI mismatch (the parameter, expected and found types), a launch rule refusal (the shape
    and the rule's message), or a stage-list breach.
    """
    cls = f"{type(workload).__module__}.{type(workload).__qualname__}"
    where = f"{key} ({cls})"
    missing = [a for a in REQUIRED_ATTRIBUTES if not hasattr(workload, a)]
    if missing:
        raise WorkloadConfigError(f"{where}: no {missing}; a workload sets {', '.join(REQUIRED_ATTRIBUTES)} "
                                  f"(class attributes or in __init__; docs/add-a-workload.md)")
    spec = workload.spec()
    try:
        again = build_workload(dict(spec), key=f"{key} rebuilt from spec()")
    except WorkloadConfigError as e:
        raise WorkloadConfigError(f"{where}: spec() {spec} does not rebuild it, as the GPU workers do (options() "
                                  f"must return every constructor argument): {e}") from None
    if again.spec() != spec:
        raise WorkloadConfigError(f"{where}: spec() {spec} rebuilds a workload whose spec() is {again.spec()} "
                                  f"(options() must return every constructor argument)")
    try:
        seeds = list(workload.seeds())
    except Exception as e:  # nvcc errors, a missing .ptx file, a bad default knob: the user's code, named
        raise WorkloadConfigError(f"{where}: seeds() raised {type(e).__name__}: {e}") from None
    if not seeds:
        raise WorkloadConfigError(f"{where}: seeds() returned no kernels; the search needs at least one")
    for i, k in enumerate(seeds):
        try:
            fn = k.module.function(k.entry)
        except KeyError:
            raise WorkloadConfigError(f"{where}: seed {i}: entry {k.entry!r} is not in its module (entries: "
                                      f"{[f.name for f in k.module.entries]}); the class's entry names "
                                      f"the .entry every seed exports") from None
        try:
            check_abi(workload.abi, [p.type for p in fn.params], k.entry)
        except AbiMismatch as e:
            raise WorkloadConfigError(f"{where}: seed {i} does not match the workload's abi: {e}; the abi is "
                                      f"({', '.join(f'{p.name} .{p.ptx_type}' for p in workload.abi)})") from None
        for shape in workload.search_shapes:
            try:
                workload.launch_dims(tuple(shape), k.launch)
            except ValueError as e:
                raise WorkloadConfigError(f"{where}: seed {i} (block {k.launch.block}): launch_dims refuses search "
                                          f"shape {tuple(shape)}: {e}") from None
    from workloads.pipeline import PipelineWorkload

    if isinstance(workload, PipelineWorkload) and workload.gate_shapes:
        shape = tuple(workload.gate_shapes[0])
        try:
            workload.validate_stages(shape, list(workload.make_inputs(shape, 0)))
        except ValueError as e:
            raise WorkloadConfigError(f"{where}: stages: {e}") from None
