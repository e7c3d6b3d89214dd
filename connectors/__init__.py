"""dpstream connectors: read events into timestamped records and write releases."""
