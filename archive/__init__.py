"""MAP-Elites archive, QD metrics, the SQLite store, lineage, lessons memory and export.

Public surface::

    GridArchive(dims, qd_offset=0.0); default_dimensions(gpu); dims_from_config(spec)
    Store(path)                      # SQLite (WAL): every candidate, checkpoints, lessons, run metadata
    Lessons(store, knowledge, family=..., gpu=..., run=...); open_knowledge(path | "default" | None)
    export_best(store, archive, out_dir)
    archive.lineage: build_graph(store), lineage_steps(store), lineage_report(store, id, workload=, diff=),
                     lineage/family-tree/heatmap figures (plotly); ``python -m archive lineage <run dir>``
    archive.launcher: load(export dir) -> Launcher (CuPy launch, ABI checks, shape buckets, torch custom op);
                      write_manifest(out_dir, workload, buckets)
"""

from archive.export import export_best
from archive.grid import AddResult, Dimension, Elite, GridArchive, default_dimensions, dims_from_config
from archive.knowledge import KnowledgeStore, open_knowledge
from archive.lessons import Lessons
from archive.metrics import ArchiveStats
from archive.store import CandidateRow, Store, StoreError

__all__ = [
    "AddResult",
    "ArchiveStats",
    "CandidateRow",
    "Dimension",
    "Elite",
    "GridArchive",
    "KnowledgeStore",
    "Lessons",
    "Store",
    "StoreError",
    "default_dimensions",
    "dims_from_config",
    "export_best",
    "open_knowledge",
]
