"""One botocore data loader per process, shared by every S3 client the process makes.

s3fs makes a new aiobotocore session for each filesystem instance, and a session parses
botocore's JSON data (the S3 service model, its endpoint rule set, ``endpoints.json``,
partitions: ~0.3 s CPU) on its first client. A Spark worker's first task on S3 paid that, and
importing s3fs / aiobotocore (~0.3 s more), in its critical path (``bench/compact_timeline.py``
at 20 ms, load ~9: 1.3-3.4 s from a fresh worker's task start to its first request). Here the
session s3fs will use gets a data loader shared by the process (credentials, config and
profiles stay the session's own: only the parsed, read-only data files are shared), and
``warm()`` parses them once - in the worker daemon before it forks (``spark.runtime.daemon``),
so every forked worker starts with them parsed. Best effort: any failure leaves s3fs as it is.

Each S3 client also builds a TLS verify context - OpenSSL parsing the whole CA bundle, ~0.08 s
CPU, 3/4 of a fresh worker's first request (``bench/cluster_timeline.py``) - even for an http://
endpoint. ``http_session_class`` is aiobotocore's HTTP session with that context made once per
process and CA setting and shared by its clients (``s3_http``: a context is only read once
built); ``warm()`` makes the default one before the daemon forks. Clients with a client
certificate or a proxy build their own, as before.

The session's responses also parse their timestamps (every GET's ``Last-Modified``) with the
standard library's RFC 1123 / ISO 8601 parsers rather than dateutil's general one (~60 us a
response with the GIL held, beside the decoding that needs it); a value they do not read goes
to botocore's parser as before.
"""

from __future__ import annotations

import functools
import threading
from datetime import datetime
from email.utils import parsedate_to_datetime
from typing import Any

_LOCK = threading.Lock()
_LOADER: Any = None


def shared_loader() -> Any:
    """The process's botocore data loader (made on first use, with botocore's default path)."""
    global _LOADER
    with _LOCK:
        if _LOADER is None:
            import botocore.session

            _LOADER = botocore.session.Session().get_component("data_loader")
        return _LOADER


def fast_timestamp(value: Any) -> datetime:
    """botocore's ``parse_timestamp`` for the two forms S3 sends (``Sun, 29 Nov 2026 03:20:00
    GMT`` in headers, ``2026-11-29T03:20:00.000Z`` in XML): the same aware UTC datetime."""
    if isinstance(value, str) and value:
        try:
            if value[-1] == "Z" and "T" in value:
                return datetime.fromisoformat(value)
            if value.endswith(" GMT"):
                return parsedate_to_datetime(value)
        except (TypeError, ValueError):
            pass
    from botocore.utils import parse_timestamp

    return parse_timestamp(value)


def prime(fs: Any) -> None:
    """Give an s3fs filesystem that has no session yet one whose data loader is the shared one
    (the session s3fs would make itself, from the same keywords). Anything else: untouched."""
    if getattr(fs, "session", 1) is not None or getattr(fs, "_s3", None) is not None:
        return
    try:
        import aiobotocore.session

        session = aiobotocore.session.AioSession(**getattr(fs, "kwargs", {}))
        session.register_component("data_loader", shared_loader())
        session.get_component("response_parser_factory").set_parser_defaults(timestamp_parser=fast_timestamp)
        fs.session = session
    except Exception:  # noqa: BLE001 - s3fs makes its own session as before
        return


@functools.cache
def http_session_class() -> Any:
    """``s3_http.SharedContextSession`` (aiobotocore's HTTP session whose TLS verify context is
    ``shared_verify_context``); None without aiobotocore."""
    try:
        from lance_spark_ops.io.s3_http import SharedContextSession
    except ImportError:
        return None
    return SharedContextSession


def warm() -> bool:
    """Import s3fs and parse the data an S3 client needs into the shared loader, without a
    network call, a thread or an event loop (safe before a fork). False when s3fs is absent."""
    try:
        import aiobotocore.session  # noqa: F401 - the import is part of the warm-up
        import botocore.session
        import s3fs  # noqa: F401

        session = botocore.session.Session()
        session.register_component("data_loader", shared_loader())
        # a client's creation reads what s3fs's first client reads (no connection is opened)
        client = session.create_client("s3", region_name="us-east-1", aws_access_key_id="warm",
                                       aws_secret_access_key="warm", endpoint_url="http://127.0.0.1:9")
        cls = http_session_class()
        verify = getattr(client._endpoint.http_session, "_verify", None)  # noqa: SLF001 - the resolved CA setting
        if cls is not None and verify is not None:
            cls(verify=verify).shared_verify_context()  # an aiobotocore client's default context
        return True
    except Exception:  # noqa: BLE001 - nothing to warm
        return False
