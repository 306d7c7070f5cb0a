"""Machine code of cubins for the red-team rounds that compare what the gate judged with what ships (rounds 15-16):
the ``.text`` section of an entry, the ELF flags (the SM it is for), the gate's cubin and the exported one."""

from __future__ import annotations

import struct
from pathlib import Path

from archive.export import export_kernel
from archive.store import CandidateRow
from evaluators.toolchain import compile_ptx
from population.kernel import Kernel


def text_section(cubin: bytes, entry: str = "rmsnorm") -> bytes:
    """The machine code of ``entry`` in an ELF64 cubin (its ``.text.<entry>`` section). KeyError when absent."""
    shoff = struct.unpack_from("<Q", cubin, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def header(i: int) -> tuple:
        return struct.unpack_from("<IIQQQQIIQQ", cubin, shoff + i * shentsize)

    names = header(shstrndx)[4]
    for i in range(shnum):
        h = header(i)
        start = names + h[0]
        if cubin[start:cubin.index(b"\0", start)] == f".text.{entry}".encode():
            return cubin[h[4]:h[4] + h[5]]
    raise KeyError(f".text.{entry}")


def elf_flags(cubin: bytes) -> int:
    """e_flags of an ELF64 cubin: the SM the machine code is for (0x6005a04 for sm_90 from ptxas 13.0)."""
    return struct.unpack_from("<I", cubin, 0x30)[0]


def gated_cubin(k: Kernel) -> bytes:
    """The cubin the gate runs: ``compile_ptx`` of the Kernel (its canonical print) for the H200's sm_90."""
    return compile_ptx(k, "sm_90").cubin


def gated(k: Kernel) -> bytes:
    """The entry's machine code as the gate compiles it."""
    return text_section(gated_cubin(k), k.entry)


def exported_cubin(k: Kernel, out_dir: Path) -> bytes:
    """The cubin ``archive.export`` writes for the kernel's stored row (``CandidateRow.from_eval``: ``Kernel.ptx``,
    no cubin), with no arch passed, as ``export_best`` calls it for a store whose config names no
    ``hardware.arch``."""
    row = CandidateRow(identity=k.identity, status="ok", entry=k.entry, ptx=k.ptx, launch=k.launch.to_json(), id=1)
    ex = export_kernel(row, out_dir, "best")
    assert ex.cubin_path is not None, "no cubin exported"
    return ex.cubin_path.read_bytes()
