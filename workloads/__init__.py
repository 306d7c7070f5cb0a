"""Workloads: one operation each (reference, inputs, shapes, ABI, tolerances, bytes model, seeds)."""
