"""The job files of the Pub/Sub integration tests: one builder, the releases each test needs as text."""
from datetime import datetime, timezone

COUNTS_AND_TOP = '[[release]]\nkind = "histogram"\nname = "counts"\n[[release]]\nkind = "topk"\nname = "top"\nk = 1'
COUNTS_AND_ALERTS = (
    '[[release]]\nkind = "histogram"\nname = "counts"\n[[release]]\nkind = "svt"\nname = "busy"\nmetric = "count"\n'
    'maximum = 40\nthreshold = 0.5\nsigma_threshold = 0.2\npersist_threshold = true')


def iso(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, tz=timezone.utc).isoformat().replace("+00:00", "Z")


def pubsub_input(subscription: str) -> str:
    return f'format = "pubsub"\nsubscription = "{subscription}"\ntimestamp_attribute = "ts"'


def job_text(*, input_table: str, start: float, windows: int, window_s: float, output: str, scope: str,
             epsilon: float, seed: int, releases: str = COUNTS_AND_TOP, partitions: tuple[str, ...] = ("A", "B", "C"),
             lateness_s: float | None = None, unit_period_s: float | None = None) -> str:
    """A job over `windows` windows of `window_s` seconds from `start`, one user x destination event source."""
    lateness = "" if lateness_s is None else f'allowed_lateness = "{lateness_s}s"\n'
    unit = "" if unit_period_s is None else f'unit_period = "{unit_period_s}s"\n'
    listed = ", ".join(f'"{p}"' for p in partitions)
    return f"""
[input]
{input_table}
user = "user"
partition = "dest"
partitions = [{listed}]
[window]
size = "{window_s}s"
start = "{iso(start)}"
end = "{iso(start + windows * window_s)}"
{lateness}[privacy]
scope = "{scope}"
epsilon = {epsilon}
delta = 1e-6
max_partitions = 1
{unit}{releases}
[output]
format = "jsonl"
path = "{output}"
[beam]
seed = {seed}
"""
