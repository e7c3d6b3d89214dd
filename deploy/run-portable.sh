#!/usr/bin/env bash
# Run a dpstream job on Beam's PortableRunner, on this machine, through the same Job API and Fn API
# a Flink or Spark job server uses: Beam's Python job service plus an SDK worker pool in a separate
# process (workers do not share the submitting process, as on a cluster). Both services are stopped
# when the script exits, whatever happens.
#
# Usage: deploy/run-portable.sh JOB.toml [dpstream run options] [-- extra Beam options]
#   e.g. deploy/run-portable.sh examples/flights.toml --output /tmp/flights -- --job_name=flights
# Environment:
#   PYTHON        the interpreter of dpstream's virtualenv (default: $VIRTUAL_ENV/bin/python, else python3);
#                 its directory must hold a `python` that imports apache_beam (the worker pool starts `python`)
#   JOB_PORT      job service port (default: a free port)
#   WORKER_PORT   SDK worker pool port (default: a free port)
#   STARTUP_S     seconds to wait for each service to listen (default 60)
set -euo pipefail

if [[ $# -lt 1 ]]; then
  echo "usage: $0 JOB.toml [dpstream run options] [-- extra Beam options]" >&2
  exit 2
fi

PYTHON="${PYTHON:-${VIRTUAL_ENV:+$VIRTUAL_ENV/bin/python}}"
PYTHON="${PYTHON:-python3}"
STARTUP_S="${STARTUP_S:-60}"
free_port() { "$PYTHON" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
JOB_PORT="${JOB_PORT:-$(free_port)}"
WORKER_PORT="${WORKER_PORT:-$(free_port)}"

LOGS="$(mktemp -d "${TMPDIR:-/tmp}/dpstream-portable.XXXXXX")"
PIDS=()
cleanup() {
  local status=$?
  for pid in "${PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
  if [[ $status -ne 0 ]]; then echo "run-portable: service logs kept in $LOGS" >&2; else rm -rf "$LOGS"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

wait_for_port() {  # PORT NAME LOG
  if ! "$PYTHON" - "$1" "$STARTUP_S" <<'EOF'
import socket, sys, time
port, deadline = int(sys.argv[1]), time.monotonic() + float(sys.argv[2])
while time.monotonic() < deadline:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        sys.exit(0)
    except OSError:
        time.sleep(0.2)
sys.exit(1)
EOF
  then
    echo "run-portable: the $2 did not listen on port $1 within ${STARTUP_S}s; its log:" >&2
    tail -n 20 "$3" >&2
    exit 2
  fi
}

"$PYTHON" -m apache_beam.runners.portability.local_job_service_main --port "$JOB_PORT" \
  >"$LOGS/job-service.log" 2>&1 &
PIDS+=($!)
PATH="$(dirname "$PYTHON"):$PATH" "$PYTHON" -m apache_beam.runners.worker.worker_pool_main \
  --service_port "$WORKER_PORT" >"$LOGS/worker-pool.log" 2>&1 &
PIDS+=($!)
wait_for_port "$JOB_PORT" "job service" "$LOGS/job-service.log"
wait_for_port "$WORKER_PORT" "SDK worker pool" "$LOGS/worker-pool.log"

OWN=() EXTRA=()
while [[ $# -gt 0 && "$1" != "--" ]]; do OWN+=("$1"); shift; done
[[ $# -gt 0 ]] && shift
EXTRA=("$@")

"$PYTHON" -m dpstream.pipelines.cli.main run "${OWN[@]}" -- \
  --runner=PortableRunner --job_endpoint="localhost:$JOB_PORT" \
  --environment_type=EXTERNAL --environment_config="localhost:$WORKER_PORT" \
  "${EXTRA[@]}"
