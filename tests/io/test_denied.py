"""``io.denied.access_denied``: each carrier's way of saying the store refused access is one,
and failures a retry or a fix of the URI can cure are not."""

from __future__ import annotations

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError

from lance_spark_ops.errors import AccessDeniedError, LanceError
from lance_spark_ops.io.denied import access_denied


def _client_error(code: str, status: int) -> ClientError:
    return ClientError({"Error": {"Code": code, "Message": code},
                        "ResponseMetadata": {"HTTPStatusCode": status}}, "GetObject")


def _raised_from(cause: BaseException) -> BaseException:
    """``cause`` behind a wrapper, as s3fs and our own layers chain them."""
    try:
        try:
            raise cause
        except BaseException as e:
            raise OSError("wrapped") from e
    except OSError as outer:
        return outer


def _http_response_error(status: int) -> BaseException:
    from azure.core.exceptions import HttpResponseError

    e = HttpResponseError(message="refused")
    e.status_code = status
    return e


def _denied_cases() -> list[BaseException]:
    import obstore.exceptions as obstore_errors
    from azure.core.exceptions import ClientAuthenticationError
    from gcsfs.retry import HttpError

    return [
        PermissionError("Access Denied"),  # s3fs's translation of AccessDenied, and local files
        NoCredentialsError(),  # botocore, before any request
        _client_error("AccessDenied", 403),
        _client_error("InvalidAccessKeyId", 403),
        _client_error("ExpiredToken", 400),
        obstore_errors.PermissionDeniedError("403 Forbidden"),
        obstore_errors.UnauthenticatedError("401 Unauthorized"),
        ClientAuthenticationError(message="Server failed to authenticate the request"),
        _http_response_error(403),
        HttpError({"code": 401, "message": "Invalid Credentials"}),
        OSError("Forbidden: bucket/ds.lance/_versions\nno access"),  # gcsfs's 403
        _raised_from(_client_error("AccessDenied", 403)),
    ]


def _other_cases() -> list[BaseException]:
    from gcsfs.retry import HttpError

    return [
        FileNotFoundError("gone"),
        ConnectionResetError("reset"),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        _client_error("SlowDown", 503),
        _client_error("NoSuchKey", 404),
        _client_error("InternalError", 500),
        _http_response_error(503),
        HttpError({"code": 503, "message": "Backend Error"}),
        OSError("Forbidden words in a message that is not gcsfs's"),
        LanceError("no Lance dataset here"),
    ]


@pytest.mark.parametrize("error", _denied_cases(), ids=lambda e: type(e).__name__)
def test_refusals_are_access_denied(error: BaseException) -> None:
    assert access_denied(error)


@pytest.mark.parametrize("error", _other_cases(), ids=lambda e: type(e).__name__)
def test_other_failures_are_not(error: BaseException) -> None:
    assert not access_denied(error)


def test_a_cycle_of_causes_ends() -> None:
    a, b = OSError("a"), OSError("b")
    a.__cause__, b.__cause__ = b, a
    assert not access_denied(a)


def test_access_denied_error_survives_pickling() -> None:
    """Raised in a Spark task, it reaches the driver as itself (the job's exit code depends on it)."""
    import pickle

    e = pickle.loads(pickle.dumps(AccessDeniedError("read refused: Access Denied", path="s3://b/t/data/f.lance")))
    assert type(e) is AccessDeniedError and e.path == "s3://b/t/data/f.lance"


@pytest.mark.parametrize("text, expected", [
    ("AccessDenied: Access Denied", True),  # a DeleteObjects answer's per-key error
    ("InvalidAccessKeyId: The AWS Access Key Id you provided does not exist", True),
    ("AccessDeniedError: s3://b/t/data/f.lance: delete refused: PermissionError: Access Denied", True),
    ("PermissionError: [Errno 13] Permission denied: '/data/t/f.lance'", True),
    ("InternalError: We encountered an internal error", False),
    ("LanceError: s3://b/t/data/f.lance: delete failed: ConnectionError: reset", False),
    ("SlowDown: Please reduce your request rate", False),
])
def test_refused_texts(text: str, expected: bool) -> None:
    from lance_spark_ops.io.denied import refused

    assert refused(text) is expected
