"""The sections of benchmarks/run.py: one module each, plus the datasets and reporting they share."""
