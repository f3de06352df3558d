"""Which store failures mean "access refused": credentials missing, invalid or expired, or a
policy that does not allow the request. Retrying cannot fix these, so they get their own error
(``AccessDeniedError``) and exit code instead of a generic failure a scheduler would retry.

Each carrier says it its own way: s3fs maps S3's AccessDenied / InvalidAccessKeyId /
ExpiredToken ... to ``PermissionError``; botocore raises ``NoCredentialsError`` before any
request when no credentials are found; obstore raises ``PermissionDeniedError`` (403) and
``UnauthenticatedError`` (401); gcsfs raises ``OSError("Forbidden: ...")`` for a 403 and an
``HttpError`` whose ``code`` is 401; adlfs passes azure-core's ``ClientAuthenticationError`` or
an ``HttpResponseError`` whose ``status_code`` is 401 / 403."""

from __future__ import annotations

from collections.abc import Sequence

# exception classes, by name (their packages are optional): no credentials found, or refused
_DENIED_CLASSES = frozenset({
    "NoCredentialsError", "PartialCredentialsError", "CredentialRetrievalError",  # botocore
    "PermissionDeniedError", "UnauthenticatedError",  # obstore
    "ClientAuthenticationError",  # azure-core
})
# S3 error codes of a refused request (botocore's ClientError.response["Error"]["Code"])
_DENIED_CODES = frozenset({
    "AccessDenied", "AllAccessDisabled", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
    "InvalidToken", "TokenRefreshRequired", "AccountProblem", "InvalidSecurity",
    "AuthorizationFailure", "AuthenticationFailed", "AuthorizationPermissionMismatch",  # Azure's
})
_DENIED_TEXT_CLASSES = frozenset({"PermissionError", "AccessDeniedError"})  # as named in error texts
_CHAIN = 8  # causes followed at most (a cycle or a very long chain stops there)


def botocore_answer(e: BaseException | None) -> tuple[str, int | None] | None:
    """The S3 error code and HTTP status of botocore's error ``e`` (None: not one)."""
    response = getattr(e, "response", None)
    if not isinstance(response, dict):
        return None
    return (str(response.get("Error", {}).get("Code", "")),
            response.get("ResponseMetadata", {}).get("HTTPStatusCode"))


def _denied_one(e: BaseException) -> bool:
    if isinstance(e, PermissionError) or type(e).__name__ in _DENIED_CLASSES:
        return True
    answer = botocore_answer(e)
    if answer is not None and answer[0] in _DENIED_CODES:
        return True
    status = getattr(e, "status_code", None)  # azure-core
    if status is None and type(e).__name__ == "HttpError":  # gcsfs: ``code`` is the HTTP status
        status = getattr(e, "code", None)
    if status in (401, 403):
        return True
    return type(e) is OSError and str(e).startswith("Forbidden: ")  # gcsfs's 403


def access_denied(e: BaseException) -> bool:
    """Whether ``e``, or an error it was raised from, says the store refused access."""
    seen: BaseException | None = e
    for _ in range(_CHAIN):
        if seen is None:
            return False
        if _denied_one(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def refused(error_text: str) -> bool:
    """Whether a per-object error reported as text - ``"Code: message"`` of an S3 DeleteObjects
    answer, ``"ErrorClass: message"`` of a delete that raised - is a refusal of access."""
    head = error_text.split(":", 1)[0].strip()
    return head in _DENIED_CODES or head in _DENIED_CLASSES or head in _DENIED_TEXT_CLASSES


def all_refused(failures: Sequence[tuple[str, str]]) -> bool:
    """Whether there are failures, ``(path, error text)``, and the store refused every one."""
    return bool(failures) and all(refused(err) for _, err in failures)
