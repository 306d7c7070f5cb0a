"""The launcher of exported kernels: load cubins with CuPy, check buffers against the workload's ABI, dispatch
on the problem shape over buckets, launch; and a ``torch.library`` custom op around it.

A *manifest* (``dispatch.json`` in an export dir, format ``MANIFEST_FORMAT``) describes one workload and the
kernels that serve it:

- ``workload``: the workload's ``spec()`` (``_target_`` + options); its ``launch_dims`` is the launch rule
  (grid, block, dynamic shared memory per shape) and its ``scalars`` give the scalar arguments;
- ``entry``, ``abi`` (``workloads.base.ParamSpec`` fields in ``.param`` order) and ``dims`` (names of the
  problem-shape dimensions, e.g. ``["M", "N"]``);
- ``buffers``: per buffer of the ABI its kind, symbolic shape over ``dims`` (e.g. ``["M", "N"]``, ``["N"]``)
  and dtype name (``bf16``, ``fp16``, ``fp32``...), as ``buffer_specs`` reads them off the workload;
- ``buckets``: kernels in dispatch order, each with ``cubin`` (file name next to the manifest), ``launch``
  (``LaunchConfig.to_json``), ``param_types`` (the entry's ``.param`` types) and ``when``: per dimension an
  inclusive ``[lo, hi]`` range (``null`` = unbounded). The first bucket whose ranges hold the shape serves it;
  a single kernel is one bucket with ``when: {}``;
- ``measured_against``: what the objective was measured against (evaluator, estimate flag, baseline, gate
  version, objective definition).

Use::

    from archive.launcher import load
    kern = load("outputs/.../best")             # the manifest dir
    y = kern(x=x, w=w)["y"]                     # torch tensors or CuPy arrays on the GPU; outputs allocated
    op = kern.torch_op()                        # torch.ops.ptxforge.<name>(x, w) -> y, with a fake impl

Errors: ``ManifestError`` for a manifest that cannot be used (missing key, unknown format, missing cubin file),
``BufferError`` for a buffer that does not match the ABI (a missing or unknown name, wrong dtype, rank, size,
device or layout: the message names the buffer, axis and expected value), ``NoBucket`` when no bucket serves a
shape. Loading and launching need CuPy and the ptxforge package (the workload's launch rule); checking does not.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

MANIFEST_FORMAT = 1
MANIFEST_NAME = "dispatch.json"

# dtype names of the workloads (workloads.dtypes) and of numpy / torch / CuPy arrays, mapped to the former.
_DTYPE_NAMES = {"bfloat16": "bf16", "bf16": "bf16", "float16": "fp16", "half": "fp16", "fp16": "fp16",
                "float32": "fp32", "float": "fp32", "fp32": "fp32", "float64": "fp64", "double": "fp64",
                "int32": "int32", "int64": "int64", "uint32": "uint32", "uint64": "uint64", "int8": "int8",
                "uint8": "uint8", "int16": "int16", "uint16": "uint16", "bool": "bool"}


class ManifestError(ValueError):
    """A manifest that cannot be used; the message names the file and the key."""


class BufferError(ValueError):
    """A buffer that does not match the workload ABI; the message names the buffer, and the axis or property."""


class NoBucket(LookupError):
    """No bucket of the manifest serves the shape; the message lists the buckets' ranges."""


def dtype_name(dtype: Any) -> str:
    """The workload dtype name (``bf16``, ``fp16``, ``fp32``, ``int32``...) of a numpy, torch or CuPy dtype (or
    of a dtype name). ValueError for a dtype without one."""
    text = str(dtype).removeprefix("torch.").removeprefix("<class 'numpy.").removesuffix("'>")
    name = getattr(dtype, "name", None) or text
    name = _DTYPE_NAMES.get(str(name), _DTYPE_NAMES.get(text))
    if name is None:
        raise ValueError(f"dtype {dtype!r} has no workload dtype name; known: {sorted(set(_DTYPE_NAMES.values()))}")
    return name


@dataclass(frozen=True)
class Bucket:
    """One kernel of a dispatch table. name: a label; cubin: file name relative to the manifest; launch:
    ``LaunchConfig.to_json()``; param_types: the entry's ``.param`` types; when: dim name -> (lo, hi) inclusive,
    None for unbounded (empty: every shape); info: free data kept in the manifest (objective, candidate id...)."""

    name: str
    cubin: str
    launch: dict[str, Any]
    param_types: list[str]
    when: dict[str, tuple[int | None, int | None]] = field(default_factory=dict)
    info: dict[str, Any] = field(default_factory=dict)

    def holds(self, dims: Mapping[str, int]) -> bool:
        """Whether every range of ``when`` holds the shape's dimension of that name."""
        for name, (lo, hi) in self.when.items():
            v = dims.get(name)
            if v is None or (lo is not None and v < lo) or (hi is not None and v > hi):
                return False
        return True

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "cubin": self.cubin, "launch": self.launch, "param_types": list(self.param_types),
                "when": {k: [lo, hi] for k, (lo, hi) in self.when.items()}, "info": self.info}

    @classmethod
    def from_json(cls, d: Mapping[str, Any], where: str = "bucket") -> Bucket:
        try:
            when = {str(k): (None if v[0] is None else int(v[0]), None if v[1] is None else int(v[1]))
                    for k, v in dict(d.get("when") or {}).items()}
            return cls(str(d["name"]), str(d["cubin"]), dict(d["launch"]), [str(t) for t in d["param_types"]], when,
                       dict(d.get("info") or {}))
        except (KeyError, TypeError, IndexError, ValueError) as e:
            raise ManifestError(f"{where}: {type(e).__name__}: {e} (needs name, cubin, launch, param_types, "
                                f"when {{dim: [lo, hi]}})") from None


# ----------------------------------------------------------------------------------------- buffer specs
def buffer_specs(workload: Any, probes: Sequence[Sequence[int]] | None = None
                 ) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(dims, buffers) of a workload, read off it: the dimension names from ``workload.scalars(shape)`` (the
    scalars whose value is a shape dimension, e.g. M and N) and, per ABI buffer, kind, symbolic shape over the
    dims and dtype name, from ``make_inputs`` (numpy) and ``outputs`` at two probe shapes whose dimensions are
    all distinct (an axis is the dimension whose size it has at both probes, else a constant).

    probes: two shapes (default: the two smallest of the workload's gate and search shapes with distinct
    dimensions). ValueError when an axis matches no dimension at both probes and is not constant."""
    import numpy as np

    if probes is None:
        cands = sorted({tuple(int(x) for x in s) for s in [*getattr(workload, "gate_shapes", []),
                                                           *getattr(workload, "search_shapes", [])]
                        if len(set(s)) == len(s)}, key=lambda s: (int(np.prod(s)), s))
        probes = [cands[0], next(s for s in cands[1:] if all(a != b for a, b in zip(s, cands[0])))]
    a, b = (tuple(int(x) for x in p) for p in probes)
    sa, sb = workload.scalars(a), workload.scalars(b)
    dims = []
    for i in range(len(a)):
        name = next((k for k in sa if sa[k] == a[i] and sb.get(k) == b[i]), None)
        dims.append(name or f"d{i}")
    ins_a, ins_b = workload.make_inputs(a, 0, xp=np), workload.make_inputs(b, 0, xp=np)
    outs_a = {o.name: o for o in workload.outputs(a)}
    outs_b = {o.name: o for o in workload.outputs(b)}
    buffers: dict[str, dict[str, Any]] = {}
    for p in workload.abi:
        if p.kind == "scalar":
            continue
        if p.name in ins_a:
            shp_a, shp_b, dt = tuple(ins_a[p.name].shape), tuple(ins_b[p.name].shape), dtype_name(ins_a[p.name].dtype)
        elif p.name in outs_a:
            shp_a, shp_b, dt = tuple(outs_a[p.name].shape), tuple(outs_b[p.name].shape), outs_a[p.name].dtype
        else:
            why = (" (an intermediate of a pipeline workload: the exported kernel is its evolved stage, which runs "
                   "between the workload's reference stages, workloads.pipeline)" if hasattr(workload, "intermediates")
                   else "")
            raise ValueError(f"ABI buffer {p.name!r} is neither an input of make_inputs nor an output{why}")
        sym: list[str | int] = []
        for ax, (x, y) in enumerate(zip(shp_a, shp_b)):
            hit = [dims[i] for i in range(len(a)) if a[i] == x and b[i] == y]
            if hit:
                sym.append(hit[0])
            elif x == y:
                sym.append(int(x))
            else:
                raise ValueError(f"buffer {p.name!r} axis {ax}: size {x} at {a}, {y} at {b} is no dimension")
        buffers[p.name] = {"kind": p.kind, "shape": sym, "dtype": _DTYPE_NAMES.get(str(dt), str(dt))}
    return dims, buffers


def write_manifest(out_dir: str | Path, workload: Any, buckets: Sequence[Bucket], *,
                   measured_against: Mapping[str, Any] | None = None, copy_launcher: bool = True) -> Path:
    """Write ``<out_dir>/dispatch.json`` for ``workload`` and ``buckets`` (their cubin files must already be
    in ``out_dir``) and, with ``copy_launcher``, this module as ``<out_dir>/launcher.py``. Returns the manifest
    path. ManifestError for an empty bucket list or a missing cubin file."""
    out = Path(out_dir)
    if not buckets:
        raise ManifestError(f"{out / MANIFEST_NAME}: no buckets")
    for b in buckets:
        if not (out / b.cubin).is_file():
            raise ManifestError(f"{out / MANIFEST_NAME}: bucket {b.name!r}: cubin {b.cubin} is not in {out}")
    dims, buffers = buffer_specs(workload)
    manifest = {
        "format": MANIFEST_FORMAT, "workload": workload.spec(), "entry": workload.entry, "dims": dims,
        "abi": [{"name": p.name, "kind": p.kind, "ptx_type": p.ptx_type} for p in workload.abi],
        "buffers": buffers, "buckets": [b.to_json() for b in buckets],
        "measured_against": dict(measured_against or {}),
    }
    path = out / MANIFEST_NAME
    path.write_text(json.dumps(manifest, indent=2, default=str))
    if copy_launcher:
        (out / "launcher.py").write_text(Path(__file__).read_text())
    return path


# ------------------------------------------------------------------------------------------- the launcher
class Launcher:
    """The kernels of one manifest (module docstring).

    manifest: the parsed ``dispatch.json``; root: the directory its cubin names are relative to.
    ManifestError for a manifest that cannot be used. CuPy is imported on the first launch only, so shapes and
    dtypes can be checked without a GPU."""

    def __init__(self, manifest: Mapping[str, Any], root: str | Path) -> None:
        self.root = Path(root)
        where = str(self.root / MANIFEST_NAME)
        if manifest.get("format") != MANIFEST_FORMAT:
            raise ManifestError(f"{where}: format {manifest.get('format')!r}, this launcher reads {MANIFEST_FORMAT}")
        try:
            self.workload_spec = dict(manifest["workload"])
            self.entry = str(manifest["entry"])
            self.dims = [str(d) for d in manifest["dims"]]
            self.abi = [dict(p) for p in manifest["abi"]]
            self.buffers = {str(k): dict(v) for k, v in manifest["buffers"].items()}
            raw = list(manifest["buckets"])
        except (KeyError, TypeError, AttributeError) as e:
            raise ManifestError(f"{where}: missing or malformed key {e}") from None
        self.buckets = [Bucket.from_json(b, f"{where}: buckets[{i}]") for i, b in enumerate(raw)]
        if not self.buckets:
            raise ManifestError(f"{where}: no buckets")
        for b in self.buckets:
            if not (self.root / b.cubin).is_file():
                raise ManifestError(f"{where}: bucket {b.name!r}: cubin file {self.root / b.cubin} is missing")
        self.measured_against = dict(manifest.get("measured_against") or {})
        self._workload: Any = None
        self._functions: dict[tuple[str, int], Any] = {}

    # -------------------------------------------------------------------------------------- checking
    def inputs(self) -> list[str]:
        """Names of the buffers a caller passes (input and inout), in ABI order."""
        return [p["name"] for p in self.abi if p["kind"] in ("input", "inout")]

    def outputs(self) -> list[str]:
        """Names of the output buffers, in ABI order."""
        return [p["name"] for p in self.abi if p["kind"] == "output"]

    def shape_of(self, buffers: Mapping[str, Any]) -> tuple[int, ...]:
        """The problem shape (one size per ``dims``) that ``buffers`` (name -> array with ``shape`` and
        ``dtype``: numpy, torch or CuPy) describe, after checking every given buffer's dtype, rank and sizes
        against the ABI. BufferError naming the buffer and what is wrong; output buffers may be left out."""
        known = set(self.buffers)
        unknown = sorted(set(buffers) - known)
        if unknown:
            raise BufferError(f"unknown buffer(s) {unknown}; the {self.entry} ABI has {sorted(known)}")
        missing = [n for n in self.inputs() if n not in buffers]
        if missing:
            raise BufferError(f"missing input buffer(s) {missing}; the {self.entry} ABI needs {self.inputs()}")
        sizes: dict[str, tuple[int, str]] = {}
        for name, spec in self.buffers.items():
            if name not in buffers:
                continue
            arr = buffers[name]
            try:
                got = dtype_name(arr.dtype)
            except (AttributeError, ValueError):
                raise BufferError(f"buffer {name!r}: {type(arr).__name__} with dtype "
                                  f"{getattr(arr, 'dtype', None)!r} is not a {spec['dtype']} array") from None
            want = spec["dtype"]
            if got != want and not (want == "bf16" and got == "uint16" and _is_cupy(arr)):
                raise BufferError(f"buffer {name!r}: dtype {got}, the ABI needs {want}")
            shape = tuple(int(x) for x in arr.shape)
            sym = spec["shape"]
            if len(shape) != len(sym):
                raise BufferError(f"buffer {name!r}: {len(shape)} dimension(s) {shape}, the ABI needs "
                                  f"{len(sym)} ({', '.join(map(str, sym))})")
            for ax, (n, s) in enumerate(zip(shape, sym)):
                if isinstance(s, int):
                    if n != s:
                        raise BufferError(f"buffer {name!r} axis {ax}: size {n}, the ABI needs {s}")
                elif s in sizes and sizes[s][0] != n:
                    raise BufferError(f"buffer {name!r} axis {ax}: size {n}, but {s} = {sizes[s][0]} from "
                                      f"{sizes[s][1]}")
                else:
                    sizes.setdefault(s, (n, f"{name}.shape[{ax}]"))
        lost = [d for d in self.dims if d not in sizes]
        if lost:
            raise BufferError(f"dimension(s) {lost} not given by any buffer passed")
        return tuple(sizes[d][0] for d in self.dims)

    def bucket_for(self, shape: Sequence[int]) -> Bucket:
        """The first bucket whose ranges hold ``shape``; NoBucket listing the buckets otherwise."""
        named = dict(zip(self.dims, (int(x) for x in shape)))
        for b in self.buckets:
            if b.holds(named):
                return b
        ranges = "; ".join(f"{b.name}: {b.when or 'any'}" for b in self.buckets)
        raise NoBucket(f"no bucket serves shape {named}; buckets: {ranges}")

    # ------------------------------------------------------------------------------------- launching
    @property
    def workload(self) -> Any:
        """The workload rebuilt from the manifest's spec (``workloads.registry.build_workload``)."""
        if self._workload is None:
            from workloads.registry import build_workload

            self._workload = build_workload(self.workload_spec)
        return self._workload

    def _function(self, bucket: Bucket, device: int) -> Any:
        """The CuPy Function of ``bucket`` loaded on GPU ``device`` (call inside that device's context)."""
        fn = self._functions.get((bucket.name, device))
        if fn is None:
            import cupy as cp

            mod = cp.cuda.Module()
            mod.load((self.root / bucket.cubin).read_bytes())  # bytes, never a path: no stale module cache
            fn = mod.get_function(self.entry)
            self._functions[(bucket.name, device)] = fn
        return fn

    def __call__(self, stream: Any = None, **buffers: Any) -> dict[str, Any]:
        """Launch on ``buffers`` (name -> torch tensor or CuPy array on the current GPU, C-contiguous); missing
        outputs are allocated like the inputs (torch when the inputs are torch tensors). Returns every output by
        name. stream: a CuPy stream (default: the current torch stream for torch tensors, else CuPy's current).
        BufferError / NoBucket as ``shape_of`` / ``bucket_for``."""
        shape = self.shape_of(buffers)
        bucket = self.bucket_for(shape)
        use_torch = any(_is_torch(a) for a in buffers.values())
        devices = {}
        for name, arr in buffers.items():
            _check_device_layout(name, arr)
            devices[name] = _device_of(arr)
        if len(set(devices.values())) > 1:
            raise BufferError(f"buffers on different GPUs: {devices}; the kernel runs on one")
        device = next(iter(devices.values()))
        import cupy as cp

        with cp.cuda.Device(device):
            outs = {n: buffers[n] if n in buffers else self._alloc(n, shape, use_torch, device)
                    for n in self.outputs()}
            self.launch(bucket, shape, {**buffers, **outs}, stream=stream if stream is not None else
                        (_torch_stream(device) if use_torch else None), device=device)
        return outs

    def _alloc(self, name: str, shape: tuple[int, ...], use_torch: bool, device: int) -> Any:
        spec = self.buffers[name]
        named = dict(zip(self.dims, shape))
        dims = tuple(named[s] if isinstance(s, str) else int(s) for s in spec["shape"])
        if use_torch:
            import torch

            tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
            return torch.empty(dims, dtype=tdt[spec["dtype"]], device=f"cuda:{device}")
        import cupy as cp

        from workloads.dtypes import storage_dtype

        return cp.empty(dims, dtype=storage_dtype(spec["dtype"], cp))

    def launch(self, bucket: Bucket, shape: tuple[int, ...], buffers: Mapping[str, Any], stream: Any = None,
               device: int = 0) -> None:
        """Launch ``bucket``'s kernel at ``shape`` on ``buffers`` (every ABI buffer, already checked, on GPU
        ``device``; call inside that device's CuPy context) with the workload's grid/block/shared-memory rule
        and scalars."""
        from evaluators.gpu.args import build_args, launch_function
        from population.kernel import LaunchConfig

        wl = self.workload
        grid, block, smem = wl.launch_dims(tuple(shape), LaunchConfig.from_json(bucket.launch))
        ptrs = {n: (a.data_ptr() if _is_torch(a) else a) for n, a in buffers.items()}
        args = build_args(wl.abi, bucket.param_types, ptrs, wl.scalars(tuple(shape)), self.entry)
        fn = self._function(bucket, device)
        launch_function(fn, grid, block, args, smem, stream)

    # ----------------------------------------------------------------------------------------- torch op
    def torch_op(self, name: str | None = None) -> Any:
        """A ``torch.library`` custom op ``ptxforge::<name>`` (default: the entry and the first bucket's
        candidate id) taking the input buffers as tensors in ABI order and returning the outputs (one tensor,
        or a tuple in ABI order), with a fake implementation so ``torch.compile`` can trace it."""
        import torch

        op_name = re.sub(r"\W", "_", name or f"{self.entry}_{self.buckets[0].info.get('candidate_id', 'k')}")
        ins, outs = self.inputs(), self.outputs()
        launcher = self

        def impl(*tensors: torch.Tensor) -> Any:
            res = launcher(**dict(zip(ins, tensors)))
            return res[outs[0]] if len(outs) == 1 else tuple(res[o] for o in outs)

        def fake(*tensors: torch.Tensor) -> Any:
            shape = launcher.shape_of(dict(zip(ins, tensors)))
            named = dict(zip(launcher.dims, shape))
            tdt = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}
            made = [tensors[0].new_empty(tuple(named[s] if isinstance(s, str) else s
                                               for s in launcher.buffers[o]["shape"]),
                                         dtype=tdt[launcher.buffers[o]["dtype"]]) for o in outs]
            return made[0] if len(made) == 1 else tuple(made)

        params = ", ".join(f"Tensor {n}" for n in ins)
        ret = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
        lib = torch.library.Library("ptxforge", "FRAGMENT")
        lib.define(f"{op_name}({params}) -> {ret}")
        lib.impl(op_name, impl, "CUDA")
        torch.library.register_fake(f"ptxforge::{op_name}", fake, lib=lib)
        self._torch_lib = lib  # the registration lives as long as the launcher
        return getattr(torch.ops.ptxforge, op_name)


def load(path: str | Path) -> Launcher:
    """The Launcher of ``path`` (a manifest file or the directory holding ``dispatch.json``). ManifestError for
    a missing, unreadable or unusable manifest."""
    p = Path(path)
    mfile = p / MANIFEST_NAME if p.is_dir() else p
    try:
        manifest = json.loads(mfile.read_text())
    except OSError as e:
        raise ManifestError(f"{mfile}: cannot read the manifest: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise ManifestError(f"{mfile}: not JSON: {e}") from None
    if not isinstance(manifest, dict):
        raise ManifestError(f"{mfile}: not a manifest (a JSON object)")
    return Launcher(manifest, mfile.parent)


def _is_torch(a: Any) -> bool:
    return type(a).__module__.startswith("torch")


def _is_cupy(a: Any) -> bool:
    return type(a).__module__.startswith("cupy")


def _torch_stream(device: int) -> Any:
    """torch's current stream on ``device`` as a CuPy stream (kernels queue behind the caller's torch work)."""
    import cupy as cp
    import torch

    return cp.cuda.ExternalStream(torch.cuda.current_stream(device).cuda_stream, device)


def _device_of(arr: Any) -> int:
    """The GPU index of a torch CUDA tensor or a CuPy array."""
    if _is_torch(arr):
        return int(arr.device.index if arr.device.index is not None else 0)
    return int(arr.device.id)


def _check_device_layout(name: str, arr: Any) -> None:
    """BufferError unless ``arr`` is a C-contiguous GPU array (torch CUDA tensor or CuPy array)."""
    if _is_torch(arr):
        if not arr.is_cuda:
            raise BufferError(f"buffer {name!r}: a {arr.device} tensor; the kernel needs a CUDA tensor")
        if not arr.is_contiguous():
            raise BufferError(f"buffer {name!r}: not contiguous (strides {tuple(arr.stride())}); pass "
                              f"{name}.contiguous()")
    elif _is_cupy(arr):
        if not arr.flags.c_contiguous:
            raise BufferError(f"buffer {name!r}: not C-contiguous; pass cupy.ascontiguousarray({name})")
    else:
        raise BufferError(f"buffer {name!r}: a {type(arr).__name__}; the kernel needs a torch CUDA tensor or a "
                          f"CuPy array")
