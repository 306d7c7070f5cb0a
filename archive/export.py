"""Export the best kernels of a run: PTX, cubin and a JSON card each.

``export_best(store, archive, out_dir)`` writes, for the best elite overall (name ``best``) and for the elite of
every archive cell (name ``cell_<i>_<j>_...``):

- ``<name>.ptx``: the module as the gate judged it (``judged_ptx``: the canonical print of the stored text, which
  keeps comments and debug directives that ptxas may read otherwise than the parser);
- ``<name>.cubin``: the stored cubin, else that text compiled now with ``evaluators.toolchain.compile_ptx`` for
  ``arch`` (when ptxas refuses or is missing, the card says why and no cubin is written);
- ``<name>.json``: the card, see ``card_for``;

plus ``index.json`` listing every exported kernel with its objective and cell, and the launcher
(``archive.launcher``): ``dispatch.json`` (a manifest with the best kernel as its one bucket) and
``launcher.py`` (a copy of the module), so ``archive.launcher.load(<dir>)`` launches the best kernel on torch
tensors or CuPy arrays with shape and dtype checks. Every card says what its objective was measured against
(``measured_against``: evaluator, GPU measurement or estimate, baseline, gate version, objective definition).
"""

from __future__ import annotations

import hashlib
import json
import platform
import time
import tomllib
from dataclasses import asdict, dataclass, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

from archive.grid import GridArchive
from archive.store import UNVERIFIED, CandidateRow, Store

CARD_VERSION = 1


@dataclass(frozen=True)
class ExportedKernel:
    """Files written for one kernel (cubin_path None when no cubin could be produced)."""

    name: str
    candidate_id: int
    ptx_path: Path
    cubin_path: Path | None
    card_path: Path


def _versions(store: Store) -> dict[str, Any]:
    v: dict[str, Any] = {"card": CARD_VERSION, "python": platform.python_version()}
    v["ptxforge"] = _ptxforge_version()
    try:
        from evaluators.toolchain import ptxas_version

        v["ptxas"] = ptxas_version()
    except Exception as e:  # no ptxas here: the card still records everything else
        v["ptxas"] = f"unavailable: {e}"
    run_versions = store.get_meta("versions")
    if run_versions is not None:
        v["run"] = run_versions
    return v


def _ptxforge_version() -> str | None:
    try:
        return metadata.version("ptxforge")
    except metadata.PackageNotFoundError:  # running from a source tree: read its pyproject
        try:
            pyproject = Path(__file__).resolve().parents[1] / "pyproject.toml"
            return str(tomllib.loads(pyproject.read_text())["project"]["version"]) + "+source"
        except (OSError, KeyError, tomllib.TOMLDecodeError):
            return None


def _config(meta: dict[str, Any], *keys: str) -> Any:
    node: Any = meta.get("config") or {}
    for k in keys:
        if not isinstance(node, dict) or k not in node:
            return None
        node = node[k]
    return node


def workload_from_meta(meta: dict[str, Any]) -> Any:
    """The run's workload rebuilt from the stored Hydra config (``config.workload``: ``_target_`` + options,
    or the older ``name`` + ``options``), None when the config names none or the workload cannot be built."""
    node = _config(meta, "workload")
    if not isinstance(node, dict) or not ("_target_" in node or "name" in node):
        return None
    try:
        from workloads.registry import build_workload

        return build_workload(node)
    except Exception:  # unknown or unbuildable workload: the card is written without ABI details
        return None


def _jsonable(x: Any) -> Any:
    return asdict(x) if is_dataclass(x) and not isinstance(x, type) else x


def unverified(row: CandidateRow, pending: bool = False) -> str | None:
    """Why ``row``'s kernel has no compute-sanitizer verdict: ``pending`` (its elite's verdict still owed when the
    run ended), the reason the engine recorded when the tool gave none (``archive.store.UNVERIFIED``), else
    None."""
    if pending:
        return "pending: the run ended before its compute-sanitizer verdict"
    return row.reason if (row.reason or "").startswith(UNVERIFIED) else None


def card_for(row: CandidateRow, *, name: str, workload: Any = None, gpu: Any = None, arch: str | None = None,
             versions: dict[str, Any] | None = None, lineage: list[dict[str, Any]] | None = None,
             store_meta: dict[str, Any] | None = None, pending: bool = False) -> dict[str, Any]:
    """The JSON card of one stored candidate.

    Keys: name, candidate_id, identity, entry, launch (``LaunchConfig.to_json``), launch_dims (per measured
    shape: grid, block, dynamic smem bytes, when a workload is given), abi (the workload's ``ParamSpec`` list),
    workload, dtype, status, reason, objective, objective_definition, shapes (the stored per-shape numbers:
    time_us in µs, gbps in GB/s, frac_copy, speedups, baseline_us, estimate), resources, occupancy,
    traffic_bytes (bytes), features, cell, method (evaluator, estimate flag), gpu, arch, versions, operator,
    edit_text, parents, lineage (operator and objective per step), exported_at (UNIX seconds), unverified (why
    the kernel has no compute-sanitizer verdict: ``pending`` when the run ended still owing it, the tool's reason
    when it gave none; None when it has one or the evaluator gives none)."""
    m = row.metrics
    meta = store_meta or {}
    card: dict[str, Any] = {
        "name": name, "candidate_id": row.id, "identity": row.identity,
        "entry": row.entry or getattr(workload, "entry", ""), "launch": row.launch,
        "workload": getattr(workload, "name", None) or meta.get("workload") or _config(meta, "workload", "name"),
        "dtype": getattr(workload, "dtype", None),
        "abi": [_jsonable(p) for p in getattr(workload, "abi", ())] or None,
        "status": row.status, "reason": row.reason, "objective": row.objective,
        "objective_definition": meta.get("objective") or (
            f"geomean speedup over {workload.primary_baseline} across the measured shapes"
            if workload is not None else None),
        "shapes": m.get("shapes", []), "resources": m.get("resources"), "occupancy": m.get("occupancy"),
        "traffic_bytes": m.get("traffic_bytes"), "measured_dram_bytes": m.get("measured_dram_bytes"),
        "features": row.features, "cell": row.cell,
        "method": {"evaluator": meta.get("evaluator") or _config(meta, "evaluator", "kind"),
                   "estimate": bool(m.get("estimate", False)),
                   "eval_seconds": row.eval_seconds,
                   # the correctness gate that judged it (evaluators.gpu.gate.GATE_VERSION; None: static/older)
                   "gate_version": (m.get("extra") or {}).get("gate_version")},
        "gpu": _jsonable(gpu) if gpu is not None else (meta.get("gpu") or _config(meta, "hardware", "name")),
        "arch": arch,
        "versions": versions or {}, "operator": row.operator, "edit_text": row.edit_text, "parents": row.parents,
        "lineage": lineage or [], "exported_at": time.time(),
        "unverified": unverified(row, pending),
    }
    card["measured_against"] = measured_against(meta, workload, estimate=bool(m.get("estimate", False)))
    if workload is not None and row.launch:
        from population.kernel import LaunchConfig

        launch = LaunchConfig.from_json(row.launch)
        dims = []
        for s in card["shapes"]:
            shape = tuple(s["shape"])
            try:
                grid, block, smem = workload.launch_dims(shape, launch)
                dims.append({"shape": list(shape), "grid": list(grid), "block": list(block), "smem_bytes": smem})
            except ValueError as e:
                dims.append({"shape": list(shape), "error": str(e)})
        card["launch_dims"] = dims
    return card


def _kind(evaluator: Any, estimate: bool) -> str:
    """How a card's objective came about, in words."""
    if evaluator == "replay":
        return "replay: recorded H200 GPU time where a recorded run measured the kernel, else a surrogate ESTIMATE"
    return "ESTIMATE (static model, no GPU measurement)" if estimate else "GPU measurement"


def measured_against(meta: dict[str, Any], workload: Any = None, *, estimate: bool | None = None) -> dict[str, Any]:
    """What a run's objectives were measured against, from its store meta ``provenance``
    (``evolve.runinfo.run_provenance``): evaluator (``gpu`` / ``static``), estimate (True: a static-model
    estimate, not a GPU measurement), baseline, gate_version, objective (its definition) and the hardware.
    Older stores without provenance give what their config says (None where unknown)."""
    prov = meta.get("provenance") or {}
    est = prov.get("estimate", meta.get("estimate")) if estimate is None else (estimate or prov.get("estimate"))
    return {"evaluator": prov.get("evaluator") or _config(meta, "evaluator", "kind"),
            "estimate": bool(est),
            "kind": _kind(prov.get("evaluator") or _config(meta, "evaluator", "kind"), bool(est)),
            "baseline": prov.get("baseline") or getattr(workload, "primary_baseline", None),
            "gate_version": prov.get("gate_version"),
            "objective": prov.get("objective"),
            "hardware": prov.get("hardware") or _config(meta, "hardware")}


def _ptx_target(ptx: str) -> str | None:
    """The ``.target`` of the module as the gate judged it (``judged_ptx``: a ``.target`` in a comment or in text
    the parser reads otherwise than ptxas decides nothing, red-team round 16 ``rt16_comment_target_export``),
    ``sm_90a``; None when it names none."""
    try:
        text = judged_ptx(ptx)
    except Exception:  # ParseError: the stored text, comments skipped (module_target)
        text = ptx
    return _target_of(text)


def _target_of(text: str) -> str | None:
    """``evaluators.toolchain.module_target`` of ``text``, None when it names no ``sm_XY`` target."""
    from evaluators.toolchain import module_target

    try:
        return module_target(text)
    except ValueError:
        return None


def judged_ptx(ptx: str) -> str:
    """The text the gate compiled for a stored module: its canonical print (``Kernel.canonical_ptx``; the pool
    compiles a Kernel, ``evaluators.toolchain.compile_ptx``, never its stored text). The stored text keeps trivia
    and debug directives as written, and ptxas may read them otherwise than the parser: instructions after a
    ``.loc`` on its line, a ``/*`` there opening a comment (red-team round 15, ``rt15_loc_hidden_store``,
    ``rt15_loc_phantom_init``); shipping the stored text would ship code no check saw. ParseError when the text
    does not parse (a stored row always did)."""
    from population.parser import parse_module
    from population.printer import print_module

    return print_module(parse_module(ptx, filename="stored.ptx"), canonical=True)


def _cubin_for(row: CandidateRow, text: str | None, arch: str | None) -> tuple[bytes | None, str | None]:
    if row.cubin:
        return row.cubin, None
    if text is None:
        return None, "the stored text does not parse: no judged text to compile"
    try:
        from evaluators.toolchain import compile_ptx

        return compile_ptx(text, arch).cubin, None
    except Exception as e:  # CompileError, ToolchainNotFound: the card records why there is no cubin
        return None, f"{type(e).__name__}: {e}"


def export_kernel(row: CandidateRow, out_dir: Path, name: str, **card_kw: Any) -> ExportedKernel:
    """Write ``<name>.ptx``, ``<name>.cubin`` and ``<name>.json`` for one row (see ``card_for`` for card_kw)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        judged: str | None = judged_ptx(row.ptx)
        form = "canonical print of the stored text (what the gate compiled)"
    except Exception as e:  # ParseError: only the stored cubin, if any, is shipped as judged
        judged, form = None, f"stored text, which does not parse ({type(e).__name__}: {str(e)[:160]})"
    text = judged if judged is not None else row.ptx
    arch = card_kw.get("arch") or _target_of(text)  # the judged text's target (parsed once)
    ptx_path = out_dir / f"{name}.ptx"
    ptx_path.write_text(text)
    cubin, err = _cubin_for(row, judged, arch)
    cubin_path = None
    card = card_for(row, name=name, **{**card_kw, "arch": arch})
    card["ptx_sha256"] = hashlib.sha256(text.encode()).hexdigest()
    card["ptx_form"] = form
    if cubin is not None:
        cubin_path = out_dir / f"{name}.cubin"
        cubin_path.write_bytes(cubin)
        card["cubin_sha256"] = hashlib.sha256(cubin).hexdigest()
        card["cubin_source"] = "store" if row.cubin else f"ptxas -arch={arch}"
    else:
        card["cubin_error"] = err
    card_path = out_dir / f"{name}.json"
    card_path.write_text(json.dumps(card, indent=2, sort_keys=True, default=str))
    return ExportedKernel(name, int(row.id), ptx_path, cubin_path, card_path)  # type: ignore[arg-type]


def export_best(store: Store, archive: GridArchive | None, out_dir: str | Path, workload: Any = None, *,
                arch: str | None = None, gpu: Any = None, cells: bool = True) -> list[ExportedKernel]:
    """Export the best kernel overall (``best``) and, with ``cells``, every cell's elite (``cell_i_j_k``).

    archive: the run's GridArchive whose elites' ``candidate_id`` are store row ids; None exports only the
    store's best ok row. workload / arch / gpu default to what the store's ``config`` meta names
    (``workload``, ``hardware.arch``, ``hardware.name``), else no workload, the PTX's own ``.target``, None.
    Returns the exported kernels, best first. ValueError when there is nothing to export; StoreError when an
    elite's row is missing from the store."""
    from archive.lineage import build_graph, lineage_steps

    out = Path(out_dir)
    if archive is not None and len(archive):
        best_row = store.get(int(archive.best().candidate_id))  # type: ignore[union-attr]
        elites = archive.elites() if cells else []
    else:
        best_row = store.best()
        elites = []
    if best_row is None:
        raise ValueError(f"{store.path}: no ok candidate to export")
    meta = store.meta()
    if workload is None:
        workload = workload_from_meta(meta)
    arch = arch or _config(meta, "hardware", "arch") or _ptx_target(best_row.ptx)
    kw = {"workload": workload, "gpu": gpu, "arch": arch, "versions": _versions(store), "store_meta": meta}
    graph = build_graph(store)  # one scan of the store serves every exported kernel's lineage

    def lineage(row: CandidateRow) -> list[dict[str, Any]]:
        return [{k: s[k] for k in ("id", "operator", "objective")} for s in lineage_steps(store, row.id, graph)]

    def pending(row: CandidateRow) -> bool:
        return archive is not None and archive.is_pending(row.id)

    done = [export_kernel(best_row, out, "best", lineage=lineage(best_row), pending=pending(best_row), **kw)]
    for e in elites:
        row = store.get(int(e.candidate_id))
        done.append(export_kernel(row, out, "cell_" + "_".join(str(c) for c in e.cell), lineage=lineage(row),
                                  pending=pending(row), **kw))
    index = []
    for k in done:
        card = json.loads(k.card_path.read_text())
        index.append({"name": k.name, "candidate_id": k.candidate_id, "ptx": k.ptx_path.name,
                      "cubin": k.cubin_path.name if k.cubin_path else None, "card": k.card_path.name,
                      "objective": card["objective"], "cell": card["cell"], "unverified": card["unverified"]})
    (out / "index.json").write_text(json.dumps(index, indent=2))
    if workload is not None and done[0].cubin_path is not None:
        write_best_manifest(out, done[0], best_row, workload, measured_against(meta, workload))
    return done


def write_best_manifest(out: Path, best: ExportedKernel, row: CandidateRow, workload: Any,
                        against: dict[str, Any]) -> Path | None:
    """``dispatch.json`` + ``launcher.py`` in ``out`` with ``best`` as the one bucket (every shape). A workload
    whose buffers cannot be described (``archive.launcher.buffer_specs``) gets no manifest and a warning."""
    import logging

    from archive.launcher import Bucket, write_manifest
    from evaluators.gpu.args import param_types

    try:
        bucket = Bucket("best", best.cubin_path.name, dict(row.launch), param_types(row.kernel()),  # type: ignore[union-attr]
                        info={"candidate_id": row.id, "identity": row.identity, "objective": row.objective})
        return write_manifest(out, workload, [bucket], measured_against=against)
    except Exception as e:  # the kernels are exported; only the launcher manifest is missing
        logging.getLogger(__name__).warning("no launcher manifest in %s: %s", out, e)
        return None
