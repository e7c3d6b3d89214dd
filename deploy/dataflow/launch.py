"""Flex template entry point: template parameters -> `dpstream run`.

The launcher calls this file with the template's parameters and Dataflow's
own pipeline options as `--name=value` arguments. `job_file`, `output`,
`ledger` and `max_seconds` (metadata.json) become `dpstream run` arguments;
everything else is passed to Beam after `--`. A gs:// job file is copied to
a local file first (the job loader reads local files).
"""
import argparse
import os
import sys
import tempfile

from apache_beam.io.filesystems import FileSystems

from dpstream.pipelines.cli import main as cli


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dpstream-flex-template")
    parser.add_argument("--job_file", required=True)
    parser.add_argument("--output", required=True)
    parser.add_argument("--ledger", required=True)
    parser.add_argument("--max_seconds")
    own, beam_args = parser.parse_known_args(argv)
    job_file = own.job_file
    if FileSystems.get_scheme(job_file) not in (None, "file"):
        with FileSystems.open(job_file) as remote:
            content = remote.read()
        handle, job_file = tempfile.mkstemp(suffix=".toml")
        with os.fdopen(handle, "wb") as local:
            local.write(content)
    command = ["run", job_file, "--output", own.output, "--ledger", own.ledger]
    if own.max_seconds:
        command += ["--max-seconds", own.max_seconds]
    return cli.main([*command, "--", "--runner=DataflowRunner", *beam_args])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
