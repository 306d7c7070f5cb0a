"""Judging kernels: ptxas toolchain, occupancy, static traffic, workloads, GPU worker pool, gate, benchmark."""
