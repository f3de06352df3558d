"""Azurite's blob service on a free loopback port, in memory: found (``.ci-node/``, installed by
``.ci/azurite-setup``; ``LSO_AZURITE_BLOB``; ``PATH``), started, waited for and stopped. Shared
by the Azure tests' fixture and ``bench/object_store_bench.py --store azure``."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tests.support.processes import ChildServer, free_port

ROOT = Path(__file__).resolve().parents[2]
# Azurite's well-known development account (public, documented by Microsoft)
AZURITE_ACCOUNT = "devstoreaccount1"
AZURITE_KEY = "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw=="
READY_SECONDS = 60.0


def azurite_exe() -> str | None:
    """The ``azurite-blob`` executable, or None when it is not installed."""
    local = ROOT / ".ci-node" / "node_modules" / ".bin" / "azurite-blob"
    if local.exists():
        return str(local)
    return os.environ.get("LSO_AZURITE_BLOB") or shutil.which("azurite-blob")


def azure_options(endpoint: str) -> dict[str, str]:
    """pylance's storage options for the development account at ``endpoint``
    (``http://HOST:PORT/devstoreaccount1``: Azurite itself or a proxy in front of it)."""
    return {"azure_storage_account_name": AZURITE_ACCOUNT, "azure_storage_account_key": AZURITE_KEY,
            "azure_storage_endpoint": endpoint, "allow_http": "true"}


def connection_string(endpoint: str) -> str:
    """The azure-storage-blob / adlfs connection string of the same account."""
    return (f"DefaultEndpointsProtocol=http;AccountName={AZURITE_ACCOUNT};AccountKey={AZURITE_KEY};"
            f"BlobEndpoint={endpoint};")


class AzuriteProcess(ChildServer):
    """``azurite-blob`` on 127.0.0.1 (in memory); ``endpoint`` is the account's blob endpoint."""

    def __init__(self, exe: str) -> None:
        self.exe = exe
        self.endpoint = ""

    def start(self) -> AzuriteProcess:
        port = free_port()
        self.endpoint = f"http://127.0.0.1:{port}/{AZURITE_ACCOUNT}"
        self.launch([self.exe, "--blobHost", "127.0.0.1", "--blobPort", str(port), "--inMemoryPersistence",
                     "--silent", "--skipApiVersionCheck", "--loose", "--disableTelemetry"],
                    f"{self.endpoint}?comp=list", "Azurite", READY_SECONDS, quiet=True)
        return self

    def __enter__(self) -> AzuriteProcess:
        return self.start()
