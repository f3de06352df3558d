"""``moto_server`` with its per-request backend lookup done once per signed service.

moto's dispatcher finds each request's backend under one global lock: it lists moto's package
directory, stats every entry and tries the URL patterns of every service, ~1-2 ms a request.
Requests that arrive together queue on that lock, which no S3 endpoint does: two executors
against one moto wait for each other there (most of a py-spy profile of moto under two Spark
workers was threads waiting on it). Here a request signed for (service, region) goes to the app
the first such request resolved (S3 only: moto picks its backend by the signature alone, while
DynamoDB's depends on a header and others' on the path); every other request takes moto's path.

moto's CompleteMultipartUpload also copies the object some eight times in Python (each part read
twice, joined twice, turned into ``bytes`` twice) before storing it: 0.2-0.9 s of this machine's
CPU for a 60 MB object, on the cores the client under test runs on, which S3 spends on its own
hosts. ``lean_complete`` gives the same answer (checks, ETag, checksum) from one read of each
part and one join (``tests/s3/test_moto_store.py`` compares the two).

    python -m tests.support.moto_store -H 127.0.0.1 -p PORT
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import signal
import sys
from collections.abc import Iterator
from typing import Any

from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.s3 import models as s3_models
from moto.s3.exceptions import EntityTooSmall, InvalidPart, MalformedXML
from moto.s3.utils import compute_checksum
from moto.utilities.utils import md5_hash
from werkzeug.serving import run_simple

# SigV4: "Credential=<key>/<date>/<region>/<service>/aws4_request"
_SCOPE = re.compile(r"Credential=[^/,]+/\d{8}/([^/,]+)/([^/,]+)/aws4_request")


CACHED_SERVICES = frozenset({"s3"})


def signed_scope(environ: dict[str, Any]) -> tuple[str, str] | None:
    """The (region, service) a request is signed for when its app may be cached, else None."""
    if environ.get("PATH_INFO", "").startswith("/moto-api"):
        return None
    match = _SCOPE.search(environ.get("HTTP_AUTHORIZATION", ""))
    if match is None or match.group(2) not in CACHED_SERVICES:
        return None
    return match.group(1), match.group(2)


class CachedDispatch(DomainDispatcherApplication):
    """moto's dispatcher, its answer kept per signed (region, service)."""

    def __init__(self) -> None:
        super().__init__(create_backend_app)
        self._by_scope: dict[tuple[str, str], Any] = {}

    def get_application(self, environ: dict[str, Any]) -> Any:
        scope = signed_scope(environ)
        if scope is None:
            return super().get_application(environ)
        app = self._by_scope.get(scope)
        if app is None:  # a race here resolves twice to the same app: harmless
            app = self._by_scope[scope] = super().get_application(environ)
        return app


def lean_complete(self: s3_models.FakeMultipart, body: Iterator[tuple[int, str]]
                  ) -> tuple[bytearray, str, tuple[str, str, int]]:
    """``FakeMultipart.complete`` with one read of each part and one join: the same parts
    checked (``InvalidPart``, ``EntityTooSmall``, ``MalformedXML``), the same ETag and checksum
    (moto's defaults: CRC64NVME over the whole object unless the upload named another)."""
    how = s3_models.MultipartChecksumBuilder(self.metadata.get("x-amz-checksum-algorithm"),
                                             self.metadata.get("x-amz-checksum-type"))
    composite = how.checksum_type == "COMPOSITE"
    total, md5s, part_sums = bytearray(), bytearray(), bytearray()
    last, count = None, 0
    for number, etag in body:
        part = self.parts.get(number)
        part_etag = None if part is None else part.etag.replace('"', "")
        if part_etag is None or part_etag != etag.replace('"', ""):
            raise InvalidPart()
        if last is not None and last.contentsize < s3_models.S3_UPLOAD_PART_MIN_SIZE:
            raise EntityTooSmall()
        md5s.extend(bytes.fromhex(part_etag))
        value = part.value
        total.extend(value)
        if composite:
            part_sums.extend(compute_checksum(value, how.checksum_algorithm, encode_base64=False))
        last, count = part, count + 1
    if count == 0:
        raise MalformedXML
    summed = compute_checksum(bytes(part_sums) if composite else total, how.checksum_algorithm).decode()
    full_etag = md5_hash()
    full_etag.update(bytes(md5s))
    # the object's buffer takes the bytearray as it is (``FakeKey.value`` writes it)
    return total, f"{full_etag.hexdigest()}-{count}", (how.checksum_type, summed, count if composite else 1)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-H", "--host", default="127.0.0.1")
    ap.add_argument("-p", "--port", type=int, required=True)
    args = ap.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))  # as moto_server: moto builds URLs with it
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # no log line per request
    s3_models.FakeMultipart.complete = lean_complete
    app = CachedDispatch()
    app.debug = True  # as moto_server
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
