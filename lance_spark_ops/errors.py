"""Typed errors: every failure the library reports is a LanceError subclass.

Errors name the file (or dataset) and what was wrong so a failed job can be diagnosed
from its log line alone. ``CommitConflict`` (retry the operation) is kept apart from
``IncompatibleTransaction`` (give up) and ``CommitStateUnknown`` (do not clean up).
"""

from __future__ import annotations


class LanceError(Exception):
    """Root of every error raised by lance_spark_ops."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        self.message = message
        self.path = path
        super().__init__(f"{path}: {message}" if path else message)

    def __reduce__(self) -> tuple:
        # pickled from Spark tasks back to the driver, keeping the class and the path
        return (_rebuild, (type(self), self.message, self.path))


def _rebuild(cls: type[LanceError], message: str, path: str | None) -> LanceError:
    return cls(message, path=path)


class NotFoundError(LanceError):
    """A dataset, version, file or column does not exist."""


class DatasetNotFound(NotFoundError):
    """Nothing where the caller pointed: no dataset at the URI, no such table or namespace in a
    namespace - a caller's mistake, found before any work starts (jobs exit 6)."""


class FormatError(LanceError):
    """A file or manifest does not follow the Lance format."""


class CorruptFileError(FormatError):
    """Bytes are damaged: bad magic, truncated, offsets outside the file, bad protobuf."""


class InconsistentDatasetError(CorruptFileError):
    """A manifest contradicts itself or its files (duplicate fragments, a fragment without data
    files, counts, sizes or file versions its files disagree with): refused rather than read
    around or rewritten (``table.validate``). A CorruptFileError: the metadata is damaged."""


class UnsupportedError(FormatError):
    """Valid Lance data that this library does not handle (unknown version, encoding, flag)."""


class SchemaError(LanceError):
    """A schema cannot be represented in the requested file version or is invalid."""


class CommitError(LanceError):
    """A commit did not happen."""


class CommitConflict(CommitError):
    """A concurrent commit conflicts in a way that a fresh attempt of the operation may resolve."""


class IncompatibleTransaction(CommitError):
    """A concurrent commit makes this operation impossible (e.g. the dataset was overwritten)."""


class CommitStateUnknown(CommitError):
    """It is unknown whether the commit landed; files written for it must not be deleted."""


class WriteRefused(LanceError):
    """An object store refused a write and said it stored nothing (S3 503 SlowDown /
    ServiceUnavailable): unlike a dropped connection or a timeout, safe to try again."""


class AccessDeniedError(LanceError):
    """The store refused access: credentials missing, invalid or expired, or a policy that does
    not allow the request (S3 403 AccessDenied, 401s, no credentials found). Retrying does not
    help; the credentials or the policy need fixing (jobs exit 8)."""


class InvalidInputError(LanceError):
    """An argument given by the caller is invalid."""
