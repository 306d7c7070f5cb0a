"""KDA (Kimi Delta Attention) forward workloads: ``KDARecurrent`` (the fused recurrent kernel, stage 1).

``reference``: float64 references (JAX ``lax.scan`` on the CPU, and a plain NumPy loop); ``recurrent``: the
workload; ``baselines``: fla's ``fused_recurrent_kda``; ``kda_naive.cu`` / ``kda_template.cu``: the seeds.
"""

from workloads.kda.recurrent import KDARecurrent

__all__ = ["KDARecurrent"]
