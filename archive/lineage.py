"""The lineage DAG of a run and the Plotly figures built from it and from the archive.

``build_graph(store)`` gives a ``networkx.DiGraph`` whose nodes are candidate row ids (attributes: identity,
operator, edit_text, status, reason, objective, cell, generation, island, created) and whose edges run parent
-> child (attribute ``order``: 0 for the primary parent, the one the edit script was written against; 1.. for
extra parents of a crossover). The lineage of a kernel follows primary parents back to a seed.

Figures (``plotly.graph_objects.Figure``; the tracker logs them to W&B, ``save_figure_json`` writes the Plotly
JSON, no HTML or image export needed):

- ``lineage_figure``: objective per step along the best kernel's lineage, each point with its operator and
  edit in the hover text.
- ``family_tree_figure``: every candidate at x = lineage depth, coloured by objective (failed ones grey).
- ``heatmap_figure`` / ``heatmap_figures``: max elite objective over each pair of descriptors.

Edit text and reasons can come from a language model: they are HTML-escaped before Plotly renders them.
"""

from __future__ import annotations

import html
import itertools
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import networkx as nx

if TYPE_CHECKING:  # the figures import plotly when drawn: the kernel export needs only the graph
    import plotly.graph_objects as go

from archive.grid import GridArchive
from archive.store import Store

_HOVER_EDIT_LINES = 6


def build_graph(store: Store) -> nx.DiGraph:
    """The lineage DAG of every row in ``store`` (see the module docstring for attributes).

    Parents are taken from ``parent_ids``; a parent identity without a row id is resolved to the earliest row
    with that identity; parents that are not in the store (e.g. seeds of another run) are left out."""
    g = nx.DiGraph()
    first_of: dict[str, int] = {}
    rows = store.candidates(with_ptx=False)
    for r in rows:
        first_of.setdefault(r.identity, r.id)  # type: ignore[arg-type]
        g.add_node(r.id, identity=r.identity, operator=r.operator, edit_text=r.edit_text, status=r.status,
                   reason=r.reason, objective=r.objective, cell=r.cell, generation=r.generation, island=r.island,
                   created=r.created)
    for r in rows:
        parents = list(r.parent_ids) or [first_of[p] for p in r.parents if p in first_of]
        for order, p in enumerate(parents):
            if p in g and p != r.id:
                g.add_edge(p, r.id, order=order)
    return g


def primary_parent(graph: nx.DiGraph, node: int) -> int | None:
    """The parent the node's edit was applied to (edge order 0), None for a root."""
    preds = [(d.get("order", 0), p) for p, _, d in graph.in_edges(node, data=True)]
    return min(preds)[1] if preds else None


def lineage_path(graph: nx.DiGraph, node: int) -> list[int]:
    """Row ids from the root seed to ``node`` along primary parents. KeyError for an unknown node."""
    if node not in graph:
        raise KeyError(f"no candidate {node} in the lineage graph")
    path, seen = [node], {node}
    while (p := primary_parent(graph, path[-1])) is not None and p not in seen:
        path.append(p)
        seen.add(p)
    return path[::-1]


def _best_id(store: Store) -> int:
    best = store.best()
    if best is None:
        raise ValueError(f"{store.path}: no candidate with status ok, so there is no best lineage")
    return int(best.id)  # type: ignore[arg-type]


def lineage_steps(store: Store, candidate_id: int | None = None,
                  graph: nx.DiGraph | None = None) -> list[dict[str, Any]]:
    """Rows for a report of the lineage of ``candidate_id`` (default: the best ok row), root first.

    Each dict: step (0 = root), id, identity (first 12 hex), operator, edit_text, status, objective,
    delta (objective - previous step's objective, None when either is missing), ratio (objective / previous
    objective, None when either is missing or the previous is 0). ValueError when the store has no ok row."""
    g = graph if graph is not None else build_graph(store)
    node = _best_id(store) if candidate_id is None else int(candidate_id)
    out: list[dict[str, Any]] = []
    prev: float | None = None
    for step, n in enumerate(lineage_path(g, node)):
        a = g.nodes[n]
        obj = a["objective"]
        out.append({"step": step, "id": n, "identity": a["identity"][:12], "operator": a["operator"],
                    "edit_text": a["edit_text"], "status": a["status"], "objective": obj,
                    "delta": None if obj is None or prev is None else obj - prev,
                    "ratio": None if obj is None or not prev else obj / prev})
        prev = obj
    return out


def _hover_edit(text: str) -> str:
    lines = text.splitlines()
    shown = lines[:_HOVER_EDIT_LINES] + ([f"... ({len(lines) - _HOVER_EDIT_LINES} more lines)"]
                                         if len(lines) > _HOVER_EDIT_LINES else [])
    return "<br>".join(html.escape(x) for x in shown) or "(seed)"


def _fmt_obj(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"


def lineage_figure(store: Store, candidate_id: int | None = None, *, objective_name: str = "objective",
                   graph: nx.DiGraph | None = None) -> go.Figure:
    """Objective along the lineage of ``candidate_id`` (default: the best ok row): one point per step, hover
    text with id, operator, status and the edit script. ValueError when the store has no ok row."""
    import plotly.graph_objects as go

    steps = lineage_steps(store, candidate_id, graph)
    hover = [f"#{s['id']} {html.escape(s['operator'])} [{s['status']}]<br>{objective_name}: "
             f"{_fmt_obj(s['objective'])}<br>{_hover_edit(s['edit_text'])}" for s in steps]
    fig = go.Figure(go.Scatter(
        x=[s["step"] for s in steps], y=[s["objective"] for s in steps], mode="lines+markers+text",
        text=[html.escape(s["operator"]) for s in steps], textposition="top center", hovertext=hover,
        hoverinfo="text", name="lineage"))
    fig.update_layout(title=f"Lineage of candidate #{steps[-1]['id']} ({len(steps)} steps)",
                      xaxis_title="step from seed", yaxis_title=objective_name, showlegend=False)
    return fig


def _depths(graph: nx.DiGraph) -> dict[int, int]:
    depth: dict[int, int] = {}
    for n in sorted(graph.nodes):  # ids grow with time, so a primary parent always comes first
        p = primary_parent(graph, n)
        depth[n] = 0 if p is None or p not in depth else depth[p] + 1
    return depth


def family_tree_figure(store_or_graph: Store | nx.DiGraph, *, objective_name: str = "objective") -> go.Figure:
    """Every candidate as a marker at x = lineage depth, y = its rank within that depth; edges to primary
    parents; ok candidates coloured by objective, the others grey. Trace 0 holds the edges, trace 1 the ok
    nodes, trace 2 the failed nodes (so the figure's node count is len(trace 1) + len(trace 2))."""
    import plotly.graph_objects as go

    g = store_or_graph if isinstance(store_or_graph, nx.DiGraph) else build_graph(store_or_graph)
    depth = _depths(g)
    pos: dict[int, tuple[int, int]] = {}
    for d, group in itertools.groupby(sorted(g.nodes, key=lambda n: (depth[n], n)), key=lambda n: depth[n]):
        for rank, n in enumerate(group):
            pos[n] = (d, rank)
    ex: list[float | None] = []
    ey: list[float | None] = []
    for n in g.nodes:
        p = primary_parent(g, n)
        if p is not None:
            ex += [pos[p][0], pos[n][0], None]
            ey += [pos[p][1], pos[n][1], None]
    ok = [n for n in g.nodes if g.nodes[n]["status"] == "ok" and g.nodes[n]["objective"] is not None]
    okset = set(ok)
    bad = [n for n in g.nodes if n not in okset]

    def hover(n: int) -> str:
        a = g.nodes[n]
        why = f"<br>{html.escape(a['reason'][:120])}" if a["reason"] else ""
        return (f"#{n} {html.escape(a['operator'])} [{a['status']}] {objective_name}: {_fmt_obj(a['objective'])}"
                f"{why}<br>{_hover_edit(a['edit_text'])}")

    fig = go.Figure([
        go.Scatter(x=ex, y=ey, mode="lines", line={"width": 0.5, "color": "#999"}, hoverinfo="skip",
                   name="edges"),
        go.Scatter(x=[pos[n][0] for n in ok], y=[pos[n][1] for n in ok], mode="markers", name="ok",
                   marker={"color": [g.nodes[n]["objective"] for n in ok], "colorscale": "Viridis",
                           "showscale": True, "colorbar": {"title": objective_name}, "size": 7},
                   hovertext=[hover(n) for n in ok], hoverinfo="text", customdata=ok),
        go.Scatter(x=[pos[n][0] for n in bad], y=[pos[n][1] for n in bad], mode="markers", name="failed",
                   marker={"color": "lightgrey", "size": 5, "symbol": "x"},
                   hovertext=[hover(n) for n in bad], hoverinfo="text", customdata=bad),
    ])
    fig.update_layout(title=f"Family tree ({g.number_of_nodes()} candidates, {len(ok)} ok)",
                      xaxis_title="lineage depth (edits from a seed)", yaxis_title="candidate",
                      yaxis={"showticklabels": False})
    return fig


def heatmap_figure(archive: GridArchive, dim_x: str, dim_y: str, *, objective_name: str = "objective") -> go.Figure:
    """Max elite objective per (dim_x bin, dim_y bin) over all other descriptors; empty cells blank.
    KeyError for an unknown dimension."""
    import plotly.graph_objects as go

    z = archive.project(dim_x, dim_y)
    dx = next(d for d in archive.dims if d.name == dim_x)
    dy = next(d for d in archive.dims if d.name == dim_y)
    zl = [[None if v != v else float(v) for v in row] for row in z]  # NaN -> None: Plotly leaves it blank
    fig = go.Figure(go.Heatmap(z=zl, x=dx.labels(), y=dy.labels(), colorscale="Viridis",
                               colorbar={"title": objective_name}, hoverongaps=False))
    fig.update_layout(title=f"Archive: best {objective_name} by {dim_x} x {dim_y}",
                      xaxis_title=f"{dim_x} ({dx.unit})" if dx.unit else dim_x,
                      yaxis_title=f"{dim_y} ({dy.unit})" if dy.unit else dim_y)
    return fig


def heatmap_figures(archive: GridArchive, *, objective_name: str = "objective") -> dict[str, go.Figure]:
    """One heatmap per pair of descriptors, keyed ``"<dim_x>__<dim_y>"``."""
    return {f"{a.name}__{b.name}": heatmap_figure(archive, a.name, b.name, objective_name=objective_name)
            for a, b in itertools.combinations(archive.dims, 2)}


def save_figure_json(fig: go.Figure, path: str | Path) -> Path:
    """Write the figure as Plotly JSON (``plotly.io.read_json`` reads it back); returns the path."""
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(fig.to_json())
    return p


def graph_to_json(graph: nx.DiGraph) -> dict[str, Any]:
    """The lineage graph as node-link JSON (for artifacts and offline analysis)."""
    return json.loads(json.dumps(nx.node_link_data(graph, edges="edges"), default=str))


# ------------------------------------------------------------------------------------------ step details
def _directive_lines() -> Any:
    import re

    from population.edit_script import PERF_DIRECTIVES

    return re.compile(r"^\s*\.({})\b".format("|".join(sorted(PERF_DIRECTIVES))))


def _body_hunks(base: Any, kernel: Any) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """(removed lines, added lines) of every hunk between the canonical PTX of ``base`` and ``kernel``,
    performance-directive lines left out (those are compared separately)."""
    import difflib

    pat = _directive_lines()
    a = [ln.strip() for ln in base.canonical_ptx.splitlines() if not pat.match(ln)]
    b = [ln.strip() for ln in kernel.canonical_ptx.splitlines() if not pat.match(ln)]
    return [(tuple(a[i1:i2]), tuple(b[j1:j2]))
            for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes()
            if tag != "equal"]


def _hunk_text(h: tuple[tuple[str, ...], tuple[str, ...]]) -> str:
    old, new = h
    if old and new:
        return f"replaced {len(old)} line(s) ({old[0]!s:.60}) with {len(new)} ({new[0]!s:.60})"
    if new:
        return f"inserted {len(new)} line(s) ({new[0]!s:.60})"
    return f"deleted {len(old)} line(s) ({old[0]!s:.60})"


def own_edits(kernel: Any, workload: Any) -> dict[str, Any] | None:
    """What a template-instance kernel changed relative to ``workload.instantiate(its knobs)``: directives
    (name -> values, None when removed), dynamic shared memory (bytes, when changed), and body hunks. None when
    the kernel is not a template instance (it lacks a knob of ``workload.knob_space``)."""
    from evolve.operators.template import (
        current_knobs,
        directive_map,
        is_template_instance,
        knob_space_of,
        late_knobs_of,
    )

    space = knob_space_of(workload)
    late = late_knobs_of(workload)
    if not is_template_instance(kernel, space, late):
        return None
    base = workload.instantiate(current_knobs(kernel, space, late))
    have, want = directive_map(base), directive_map(kernel)
    return {"directives": {n: want.get(n) for n in sorted(set(have) | set(want)) if have.get(n) != want.get(n)},
            "smem": (kernel.launch.dynamic_smem_bytes
                     if kernel.launch.dynamic_smem_bytes != base.launch.dynamic_smem_bytes else None),
            "body": _body_hunks(base, kernel)}


def template_step(parent: Any, child: Any, workload: Any) -> dict[str, list[str]]:
    """For a KNOBS step parent -> child: which of the parent's own edits (``own_edits``) the child still has
    (``kept``) and which it lost (``dropped``), as short descriptions. A parent that is not a template
    instance is a jump onto the template family: ``dropped`` says its code is not kept."""
    p = own_edits(parent, workload)
    if p is None:
        return {"kept": [], "dropped": ["the parent is not a template instance: the step re-instantiates the "
                                        "template and keeps none of the parent's code"]}
    c = own_edits(child, workload) or {"directives": {}, "smem": None, "body": []}
    kept, dropped = [], []
    for name, values in p["directives"].items():
        what = f".{name} {','.join(map(str, values))}" if values is not None else f"removed .{name}"
        (kept if c["directives"].get(name, "absent") == values else dropped).append(what)
    if p["smem"] is not None:
        (kept if c["smem"] == p["smem"] else dropped).append(f"dynamic shared memory {p['smem']} bytes")
    child_body = set(c["body"])
    for h in p["body"]:
        (kept if h in child_body else dropped).append(_hunk_text(h))
    return {"kept": kept, "dropped": dropped}


def lineage_report(store: Store, candidate_id: int | None = None, *, workload: Any = None, diff: bool = False,
                   graph: nx.DiGraph | None = None) -> list[dict[str, Any]]:
    """``lineage_steps`` with, per step after the root: ``ptx_diff`` (``population.edits.diff_text`` of parent
    and child, with ``diff``), and for a KNOBS step with a ``workload`` given, ``kept`` / ``dropped`` (see
    ``template_step``). ValueError when the store has no ok row and no id is given."""
    steps = lineage_steps(store, candidate_id, graph)
    kernels: dict[int, Any] = {}

    def kernel(i: int) -> Any:
        if i not in kernels:
            kernels[i] = store.get(i).kernel()
        return kernels[i]

    for prev, step in itertools.pairwise(steps):
        if diff:
            from population.edits import diff_text

            step["ptx_diff"] = diff_text(kernel(prev["id"]), kernel(step["id"]))
        if workload is not None and step["edit_text"].lstrip().startswith("KNOBS"):
            try:
                step.update(template_step(kernel(prev["id"]), kernel(step["id"]), workload))
            except Exception as e:  # a template that cannot be rebuilt here: say so rather than guess
                step["dropped"] = [f"not checked: {type(e).__name__}: {e}"]
                step["kept"] = []
    return steps


def format_lineage(steps: list[dict[str, Any]], *, objective_name: str = "objective", estimate: bool = False) -> str:
    """The report of ``lineage_report`` as text: one header line per step (step, id, operator, status,
    objective and its change), the edit script indented, kept / dropped edits of template steps, and the PTX
    diff when present."""
    if not steps:
        return "(empty lineage)"
    est = " (ESTIMATE)" if estimate else ""
    out = [f"lineage of candidate #{steps[-1]['id']}: {len(steps)} step(s), seed -> kernel; "
           f"{objective_name}{est}"]
    for s in steps:
        change = ""
        if s.get("ratio") is not None:
            change = f"  ({100 * (s['ratio'] - 1):+.1f}%)"
        out.append(f"step {s['step']:>2}  #{s['id']:<6} {s['operator']:<10} {s['status']:<16} "
                   f"{objective_name} {_fmt_obj(s['objective'])}{change}")
        for line in (s["edit_text"] or "").splitlines():
            out.append(f"      | {line}")
        if s.get("kept"):
            out.append("      kept from the parent: " + "; ".join(s["kept"]))
        if s.get("dropped"):
            out.append("      DROPPED from the parent: " + "; ".join(s["dropped"]))
        if s.get("ptx_diff"):
            out += [f"      {ln}" for ln in s["ptx_diff"].rstrip("\n").splitlines()]
    return "\n".join(out)
