"""Benchmarks: each module measures a subject against a baseline from the same run."""
