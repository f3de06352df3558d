"""gcp-storage-emulator on a given port, in memory, with GCS's generation preconditions.

The emulator ignores ``ifGenerationMatch`` (GCS's conditional create, ``=0``: only if absent,
412 otherwise), so two racing conditional creates would both "win" on it. This launcher adds
the documented precondition to its object-creating handlers (JSON uploads and the XML PUT),
nothing else: the conditional-put tests then show that our client asks for the condition and
reads GCS's 412 as a conflict. The emulator serves one request at a time, so the check and
the create are atomic, as on GCS.

It also answers every object listing whole, ignoring ``maxResults``; the launcher pages it as
GCS documents (at most ``maxResults`` items and prefixes in name order, then a
``nextPageToken`` that ``pageToken`` continues from), so request counts of listings are GCS's.

Run: ``python gcs_server.py PORT``; prints ``ready`` once it listens; stops on SIGTERM.
"""

from __future__ import annotations

import json
import signal
import sys
import threading
from http import HTTPStatus
from typing import Any

from gcp_storage_emulator import server
from gcp_storage_emulator.exceptions import NotFound
from gcp_storage_emulator.handlers import objects

_MESSAGE = "At least one of the pre-conditions you specified did not hold."
_PRECONDITION_FAILED = {"error": {"code": 412, "message": _MESSAGE, "errors": [
    {"domain": "global", "reason": "conditionNotMet", "message": _MESSAGE}]}}


def _object_name(request: Any) -> str | None:
    if "name" in request.query:
        return request.query["name"][0]
    if request.params and request.params.get("object_id"):
        return request.params["object_id"]
    data = request.data
    if isinstance(data, dict):
        meta = data.get("meta", data)
        if isinstance(meta, dict):
            return meta.get("name")
    return None


def _holds(request: Any, storage: Any) -> bool:
    """Whether the request's generation precondition (if any) holds now."""
    want = request.query.get("ifGenerationMatch", [None])[0]
    if want is None:
        want = request.get_header("x-goog-if-generation-match", None)
    if want is None or "upload_id" in request.query:  # a resumable upload's chunks were checked at its start
        return True
    name = _object_name(request)
    try:
        current = str(storage.get_file_obj(request.params["bucket_name"], name).get("generation"))
    except NotFound:
        current = "0"
    return current == str(want)


def _checked(handler: Any) -> Any:
    def run(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        if not _holds(request, storage):
            response.status = HTTPStatus.PRECONDITION_FAILED
            response.json(_PRECONDITION_FAILED)
            return None
        return handler(request, response, storage, *args, **kwargs)

    return run


def _paged(handler: Any) -> Any:
    """``objects.ls`` cut to ``maxResults`` entries after ``pageToken`` (the last name of the
    previous page, in this emulator an opaque token as GCS's are)."""

    def run(request: Any, response: Any, storage: Any, *args: Any, **kwargs: Any) -> Any:
        out = handler(request, response, storage, *args, **kwargs)
        limit = int((request.query.get("maxResults") or ["0"])[0] or 0)
        token = (request.query.get("pageToken") or [""])[0]
        if response.status != HTTPStatus.OK or (not limit and not token):
            return out
        body = json.loads(response._content)  # what objects.ls answered: every entry
        entries = sorted([(i["name"], i) for i in body.get("items") or []]
                         + [(p, None) for p in body.get("prefixes") or []], key=lambda e: e[0])
        entries = [e for e in entries if e[0] > token]
        page = {"kind": "storage#objects"}
        if limit and len(entries) > limit:
            entries = entries[:limit]
            page["nextPageToken"] = entries[-1][0]
        page["items"] = [i for _, i in entries if i is not None]
        page["prefixes"] = [n for n, i in entries if i is None]
        response.json(page)
        return out

    return run


def _patch() -> None:
    creating = {objects.insert, objects.xml_upload}

    def wrap(fn: Any) -> Any:
        return _checked(fn) if fn in creating else _paged(fn) if fn is objects.ls else fn

    server.HANDLERS = tuple(
        (regex, {method: wrap(fn) for method, fn in handlers.items()}) for regex, handlers in server.HANDLERS
    )


def main() -> None:
    port = int(sys.argv[1])
    _patch()
    srv = server.create_server("127.0.0.1", port, in_memory=True)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    srv.start()
    print("ready", flush=True)
    stop.wait()
    srv.stop()


if __name__ == "__main__":
    main()
