"""Side-by-side benchmarks: each prints ratios against a peer measured in the same run.

Run all with ``python -m benchmarks`` (``make bench``), or one module with
``python -m benchmarks.bench_ridge``. Nothing here is asserted in CI: the
machines are shared and noisy, so targets are read as ratios, not seconds.
"""
