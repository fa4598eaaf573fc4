"""Run every benchmark module in turn."""

import importlib
import pkgutil

import benchmarks

for module in sorted(m.name for m in pkgutil.iter_modules(benchmarks.__path__)):
    if module.startswith("bench_"):
        print(f"\n== {module} ==", flush=True)
        importlib.import_module(f"benchmarks.{module}").main([])
