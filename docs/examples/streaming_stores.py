"""A mutation operator kept outside the package: give one global store the streaming cache hint ``.cs``.

PTX ISA 9.0, ``st``: ``.cs`` ("cache streaming, likely accessed once") allocates the line with evict-first
policy, so outputs written once do not push re-read inputs out of L1/L2. Used in docs/add-an-operator.md.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from evolve.operators.base import NoProposal, OperatorContext
from evolve.operators.common import instruction_sites
from population.edit_script import EditScript, SetModifier
from population.kernel import Kernel

CACHE_OPERATORS = ("wb", "cg", "cs", "wt")  # st's .cop values; at most one per instruction


@dataclass
class StreamingStores:
    """Adds ``.cs`` to one ``st.global`` that has no cache operator yet, chosen uniformly."""

    name: str = "streaming_stores"
    weight: float = 1.0

    def propose(self, parent: Kernel, ctx: OperatorContext, rng: np.random.Generator) -> EditScript:
        sites = [s for s in instruction_sites(parent)
                 if s.node.opcode == "st" and "global" in s.node.modifiers
                 and not any(m in CACHE_OPERATORS for m in s.node.modifiers)]
        if not sites:
            raise NoProposal("no st.global without a cache operator")
        site = sites[int(rng.integers(len(sites)))]
        return EditScript((SetModifier(site.line, add="cs"),))
