"""Export a multi-task run's product: one kernel per shape bucket plus the manifest the launcher dispatches on.

``export_dispatch(store, archive, tasks, workload, out_dir)`` takes, for every task of an ``evolve.tasks.TaskSet``,
the archive's best elite of that task (``evolve.tasks.best_per_task``) and writes into ``out_dir``:

- ``bucket_<i>.ptx`` / ``bucket_<i>.cubin`` / ``bucket_<i>.json``: the kernel, its cubin (ptxas for the run's
  arch) and its card (``archive.export.card_for``, with the lineage: which operators made each step);
- ``manifest.json``: ``DISPATCH_FORMAT``, the workload (name, options, entry, ABI), the arch, the objective's
  definition, and ``buckets``: per task ``{task, name, lo, hi, shapes, cubin, ptx, card, entry, launch,
  candidate_id, objective}`` where the row length ``N`` (the last shape axis) selects the bucket with
  ``lo < N <= hi`` (``hi`` null: unbounded).

A task without an elite is filled by the nearest task that has one (lower first) and the bucket says so
(``"borrowed_from"``), so the dispatch covers every row length.

The same folder gets ``dispatch.json`` and ``launcher.py`` from ``archive.launcher.write_manifest`` (one bucket
per task, ``when: {N: [lo + 1, hi]}``, inclusive), so ``archive.launcher.load(folder)`` loads the cubins with CuPy,
checks buffers against the ABI and dispatches on the shape, and ``.torch_op()`` is the ``torch.library`` custom
op that hands torch tensors to it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from archive.export import _config, _ptx_target, _versions, export_kernel, unverified
from archive.store import Store

DISPATCH_FORMAT = "ptxforge-dispatch/1"
MANIFEST = "manifest.json"


def _jsonable_abi(workload: Any) -> list[dict[str, str]]:
    return [{"name": p.name, "kind": p.kind, "ptx_type": p.ptx_type} for p in getattr(workload, "abi", ())]


def export_dispatch(store: Store, archive: Any, tasks: Any, workload: Any, out_dir: str | Path, *,
                    arch: str | None = None) -> dict[str, Any]:
    """Write the per-bucket kernels and ``manifest.json`` (module docstring); returns the manifest.

    archive: the run's GridArchive with the ``"task"`` dimension (elite ``candidate_id`` = store row id);
    tasks: the run's ``evolve.tasks.TaskSet``; workload: the run's Workload (entry, ABI, options);
    arch: ptxas target for the cubins (default the store config's ``hardware.arch``, else the ``.target`` of the PTX).
    Raises ValueError when no task has an elite (nothing to dispatch to).
    """
    from archive.lineage import build_graph, lineage_steps
    from evolve.tasks import best_per_task

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    best = best_per_task(archive, tasks)
    if not best:
        raise ValueError("export_dispatch: no task has an elite; nothing to dispatch to")
    meta = store.meta()
    arch = arch or _config(meta, "hardware", "arch") or _ptx_target(store.get(int(next(iter(best.values())).candidate_id)).ptx)
    versions = _versions(store)
    graph = build_graph(store)
    buckets = []
    for t in tasks.tasks:
        src = t.index
        if src not in best:  # nearest task with an elite, lower first
            src = next(i for i in tasks.neighbours(t.index, len(tasks.tasks)) if i in best)
        row = store.get(int(best[src].candidate_id))
        steps = [{k: s[k] for k in ("id", "operator", "objective")} for s in lineage_steps(store, row.id, graph)]
        name = f"bucket_{t.index:02d}"
        pending = archive.is_pending(row.id)
        k = export_kernel(row, out, name, workload=workload, arch=arch, versions=versions, lineage=steps,
                          store_meta=meta, pending=pending)
        bucket = {"task": t.index, "name": t.name, "lo": t.lo, "hi": t.hi, "shapes": [list(s) for s in t.shapes],
                  "cubin": k.cubin_path.name if k.cubin_path else None, "ptx": k.ptx_path.name,
                  "card": k.card_path.name, "entry": row.entry, "launch": row.launch, "candidate_id": row.id,
                  "objective": row.objective, "unverified": unverified(row, pending)}
        if src != t.index:
            bucket["borrowed_from"] = src
        buckets.append(bucket)
    manifest = {"format": DISPATCH_FORMAT, "workload": {"name": getattr(workload, "name", None),
                                                        "options": dict(workload.options()),
                                                        "entry": getattr(workload, "entry", None),
                                                        "abi": _jsonable_abi(workload)},
                "arch": arch, "axis": -1, "objective": meta.get("objective"), "versions": versions,
                "buckets": buckets}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, default=str))
    write_launcher_manifest(out, workload, manifest)
    return manifest


def bucket_kernel(folder: str | Path, bucket: Mapping[str, Any]) -> Any:
    """The ``population.kernel.Kernel`` of one manifest bucket: its PTX file (``bucket["ptx"]``, relative to the
    dispatch ``folder``), entry and launch. Raises OSError for a missing PTX file, the parser's errors for bad PTX."""
    from population.kernel import Kernel, LaunchConfig
    from population.parser import parse_module

    ptx = (Path(folder) / bucket["ptx"]).read_text()
    return Kernel(module=parse_module(ptx, filename=bucket["ptx"]), entry=bucket["entry"],
                  launch=LaunchConfig.from_json(bucket["launch"]))


def write_launcher_manifest(out: Path, workload: Any, manifest: dict[str, Any]) -> Path:
    """``dispatch.json`` + ``launcher.py`` for ``archive.launcher`` from this module's manifest (buckets with a
    cubin only); returns the path ``archive.launcher.write_manifest`` wrote."""
    from archive.launcher import Bucket, buffer_specs, write_manifest
    from evaluators.gpu.args import param_types

    dims, _ = buffer_specs(workload)
    axis = dims[manifest.get("axis", -1)]
    buckets = []
    for b in manifest["buckets"]:
        if not b.get("cubin"):
            continue
        kernel = bucket_kernel(out, b)
        info = {k: b.get(k) for k in ("task", "name", "candidate_id", "objective", "shapes", "card", "borrowed_from")}
        buckets.append(Bucket(name=f"bucket_{b['task']:02d}", cubin=b["cubin"], launch=b["launch"],
                              param_types=list(param_types(kernel)), when={axis: (b["lo"] + 1, b["hi"])}, info=info))
    return write_manifest(out, workload, buckets, measured_against=manifest.get("objective") or {})


def load_manifest(path: str | Path) -> dict[str, Any]:
    """Read ``manifest.json`` (a file or the folder holding it); ValueError naming the file when it is not a
    ptxforge dispatch manifest or its buckets do not cover every row length in order."""
    p = Path(path)
    if p.is_dir():
        p = p / MANIFEST
    m = json.loads(p.read_text())
    if m.get("format") != DISPATCH_FORMAT:
        raise ValueError(f"{p}: format {m.get('format')!r}, expected {DISPATCH_FORMAT!r}")
    prev = 0
    for i, b in enumerate(m.get("buckets", [])):
        if b["lo"] != prev:
            raise ValueError(f"{p}: buckets[{i}] starts at {b['lo']}, the previous ends at {prev}")
        prev = b["hi"] if b["hi"] is not None else prev
    if not m.get("buckets") or m["buckets"][-1]["hi"] is not None:
        raise ValueError(f"{p}: the last bucket must be unbounded (hi null)")
    return m


def bucket_for(manifest: dict[str, Any], n: int) -> dict[str, Any]:
    """The bucket of row length ``n``: ``lo < n <= hi``. ValueError for n < 1."""
    if n < 1:
        raise ValueError(f"row length must be >= 1, got {n}")
    for b in manifest["buckets"]:
        if n > b["lo"] and (b["hi"] is None or n <= b["hi"]):
            return b
    raise ValueError(f"no bucket holds row length {n}")
