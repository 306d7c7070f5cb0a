"""GPU evaluation through CuPy: one worker process per GPU, the correctness gate, the benchmark, baselines."""
