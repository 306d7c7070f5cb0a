"""KDA (Kimi Delta Attention) forward workloads: ``KDARecurrent`` (the fused recurrent kernel, stage 1) and
``KDAChunk`` (the chunked prefill pipeline, stage 2, evolving its inter-chunk state pass).

``data``: the operation's inputs, output, reference and tolerance (shared); ``reference``: float64 references
(JAX ``lax.scan`` on the CPU, and a plain NumPy loop); ``chunk_math``: the chunked (UT-transform) form for any
array module and dtype (the float64 chunked reference and the pipeline's reference stages); ``recurrent`` and
``chunk``: the workloads; ``baselines``: fla's ``fused_recurrent_kda``, ``chunk_gated_delta_rule_fwd_h`` and
``chunk_kda``; ``kda_naive.cu`` / ``kda_template.cu`` and ``kda_chunk_naive.cu`` / ``kda_chunk_template.cu``: the
seeds.
"""

from workloads.kda.chunk import KDAChunk
from workloads.kda.recurrent import KDARecurrent

__all__ = ["KDAChunk", "KDARecurrent"]
