"""GPU backend tests: selection logic (runs anywhere) and GPU-vs-CPU parity (marked ``gpu``,
skipped without CUDA)."""
