"""The Pub/Sub emulator of the Google Cloud CLI, started once for every integration module that uses it; it runs
in its own process group and the whole group is killed when the session ends, or within a second of this
process dying. Skips only when gcloud's emulator, java or google-cloud-pubsub is absent; with CI=true it fails."""
import os
import shutil

import pytest

from tests.integration.services import free_port, require, start, stop, wait_for_port

PROJECT = "dpstream-test"


def _emulator_installed() -> bool:
    gcloud = shutil.which("gcloud")
    if gcloud is None or shutil.which("java") is None:
        return False
    sdk_root = os.path.dirname(os.path.dirname(os.path.realpath(gcloud)))
    return os.path.isdir(os.path.join(sdk_root, "platform", "pubsub-emulator"))


@pytest.fixture(scope="session")
def emulator(tmp_path_factory):
    require(_emulator_installed(), "the Pub/Sub emulator is not installed (needs gcloud with the "
                                   "pubsub-emulator component, and java)")
    try:
        from google.cloud import pubsub_v1
    except ImportError:
        require(False, "google-cloud-pubsub is not installed (pip install -e '.[pubsub]')")
    port = free_port()
    log_path = str(tmp_path_factory.mktemp("emulator") / "emulator.log")
    service = start(["gcloud", "beta", "emulators", "pubsub", "start", f"--host-port=127.0.0.1:{port}",
                     f"--project={PROJECT}"], log_path)
    before = os.environ.get("PUBSUB_EMULATOR_HOST")
    try:
        wait_for_port(port, service, 60, log_path)
        os.environ["PUBSUB_EMULATOR_HOST"] = f"127.0.0.1:{port}"
        yield pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    finally:
        stop(service)
        if before is None:
            os.environ.pop("PUBSUB_EMULATOR_HOST", None)
        else:
            os.environ["PUBSUB_EMULATOR_HOST"] = before
