"""Example jobs and library use of dpstream; `flights.toml` is the job `dpstream demo` runs (package data)."""
