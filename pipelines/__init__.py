"""dpstream pipelines: Beam PTransforms, mechanisms, job runner and the command line."""
