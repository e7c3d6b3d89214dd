"""Side-by-side benchmarks against peer systems; not part of `make test`."""
