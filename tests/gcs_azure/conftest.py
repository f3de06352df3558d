"""GCS and Azure emulators on loopback for the whole session, and a fresh bucket / container per test.

* gcp-storage-emulator (PyPI, test extra), in memory, through ``gcs_server.py`` (which adds
  GCS's ``ifGenerationMatch`` precondition the emulator lacks). Our options are pylance's: a
  service-account file naming the emulator (``gcs_base_url``, ``disable_oauth``) and
  ``allow_http``.
* Azurite (npm, installed into ``.ci-node/`` by ``.ci/azurite-setup``; the fixture runs that
  script when Azurite is missing and skips only when it cannot install), blob service only,
  in memory. Options are pylance's ``azure_storage_*`` keys with the account's endpoint URL.

Both servers bind 127.0.0.1 on a free port, are waited for with a bounded poll and stopped at
teardown.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.support.azurite import AzuriteProcess, azure_options, azurite_exe, connection_string
from tests.support.processes import free_port, stop_process, wait_http

ROOT = Path(__file__).resolve().parents[2]


# -- GCS -----------------------------------------------------------------------------------
@dataclass
class GCS:
    endpoint: str
    bucket: str
    service_account: str  # path of the service-account file naming the emulator

    @property
    def options(self) -> dict[str, str]:
        """pylance's storage options for the emulator (the file's gcs_base_url + disable_oauth)."""
        return {"google_service_account": self.service_account, "allow_http": "true"}

    def uri(self, name: str) -> str:
        return f"gs://{self.bucket}/{name}"

    def fs(self) -> Any:
        """A gcsfs filesystem on the emulator (its JSON-API class; see io.options.filesystem_class)."""
        from gcsfs.core import GCSFileSystem

        return GCSFileSystem(endpoint_url=self.endpoint, token="anon", skip_instance_cache=True,
                             use_listings_cache=False)


@pytest.fixture(scope="session")
def gcs_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """The emulator's URL and a service-account file for it (pylance's way to name an endpoint)."""
    pytest.importorskip("gcp_storage_emulator")
    pytest.importorskip("gcsfs")
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("gcs_server.py")), str(port)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    endpoint = f"http://127.0.0.1:{port}"
    key = tmp_path_factory.mktemp("gcs") / "service-account.json"
    # object_store wants a private key and an email in the file even with disable_oauth (never used)
    key.write_text(json.dumps({"gcs_base_url": endpoint, "disable_oauth": True,
                               "client_email": "test@emulator", "private_key": "unused",
                               "private_key_id": "unused"}))
    try:
        wait_http(f"{endpoint}/", proc, "gcp-storage-emulator")
        yield endpoint, str(key)
    finally:
        stop_process(proc)


@pytest.fixture
def gcs(gcs_endpoint: tuple[str, str]) -> GCS:
    """A new, empty bucket on the emulator."""
    endpoint, key = gcs_endpoint
    env = GCS(endpoint, f"lso-{uuid.uuid4().hex[:12]}", key)
    env.fs().mkdir(env.bucket)
    return env


# -- Azure ---------------------------------------------------------------------------------
@dataclass
class Azure:
    endpoint: str  # the account's blob endpoint: http://127.0.0.1:PORT/devstoreaccount1
    container: str

    @property
    def options(self) -> dict[str, str]:
        """pylance's storage options for Azurite."""
        return azure_options(self.endpoint)

    def uri(self, name: str) -> str:
        return f"az://{self.container}/{name}"

    @property
    def connection_string(self) -> str:
        return connection_string(self.endpoint)

    def client(self) -> Any:
        from azure.storage.blob import BlobServiceClient

        return BlobServiceClient.from_connection_string(self.connection_string)

    def fs(self) -> Any:
        """An adlfs filesystem on Azurite, from a connection string (not our option translation)."""
        from adlfs import AzureBlobFileSystem

        return AzureBlobFileSystem(connection_string=self.connection_string, skip_instance_cache=True,
                                   use_listings_cache=False)


@pytest.fixture(scope="session")
def azurite_endpoint() -> Iterator[str]:
    """Azurite's blob service; installed by ``.ci/azurite-setup`` when missing (skip if it cannot be)."""
    pytest.importorskip("adlfs")
    exe = azurite_exe()
    if exe is None:
        setup = subprocess.run(["bash", str(ROOT / ".ci" / "azurite-setup")], capture_output=True, text=True,
                               timeout=600)
        exe = azurite_exe()
        if exe is None:
            pytest.skip(f"Azurite cannot be installed here: {(setup.stderr or setup.stdout)[-300:]}")
    with AzuriteProcess(exe) as azurite:
        yield azurite.endpoint


@pytest.fixture
def azure(azurite_endpoint: str) -> Azure:
    """A new, empty container on Azurite."""
    env = Azure(azurite_endpoint, f"lso-{uuid.uuid4().hex[:12]}")
    env.client().create_container(env.container)
    return env
