"""What the Pub/Sub and Firestore drivers share: project ids and google.api_core errors.

The google-cloud clients raise ``google.api_core.exceptions.GoogleAPICallError``
subclasses (one per gRPC status) and ``google.auth`` errors; :func:`code_of`
maps them onto portable's stable codes. Both drivers pass ``retry=None`` on
every RPC, so these clients never retry behind portable's back.
"""

from __future__ import annotations

import re

import google.api_core.exceptions as gexc
import google.auth.exceptions

from portable.errors import ErrorCode, InvalidURL, PermissionDenied

__all__ = ["EXACTLY_ONCE_FAILURE", "check_project", "code_of", "no_credentials"]

#: The ErrorInfo reason of an ack/modify refused on an exactly-once subscription.
EXACTLY_ONCE_FAILURE = "EXACTLY_ONCE_ACKID_FAILURE"

_PROJECT = re.compile(r"^(?:[a-z0-9][a-z0-9.-]{0,61}[a-z0-9]:)?[a-z][a-z0-9-]{4,28}[a-z0-9]$")

_CODES: tuple[tuple[type[BaseException], ErrorCode], ...] = (
    (gexc.NotFound, ErrorCode.NOT_FOUND),
    (gexc.AlreadyExists, ErrorCode.ALREADY_EXISTS),
    (gexc.Conflict, ErrorCode.ALREADY_EXISTS),
    (gexc.FailedPrecondition, ErrorCode.PRECONDITION_FAILED),
    (gexc.PreconditionFailed, ErrorCode.PRECONDITION_FAILED),
    (gexc.PermissionDenied, ErrorCode.PERMISSION_DENIED),
    (gexc.Unauthenticated, ErrorCode.PERMISSION_DENIED),
    (gexc.Unauthorized, ErrorCode.PERMISSION_DENIED),
    (gexc.Forbidden, ErrorCode.PERMISSION_DENIED),
    (gexc.ResourceExhausted, ErrorCode.THROTTLED),
    (gexc.TooManyRequests, ErrorCode.THROTTLED),
    (gexc.DeadlineExceeded, ErrorCode.DEADLINE_EXCEEDED),
    (gexc.GatewayTimeout, ErrorCode.DEADLINE_EXCEEDED),
    (gexc.ServiceUnavailable, ErrorCode.UNAVAILABLE),
    (gexc.InternalServerError, ErrorCode.UNAVAILABLE),
    (gexc.BadGateway, ErrorCode.UNAVAILABLE),
    (gexc.Unknown, ErrorCode.UNAVAILABLE),
    (gexc.Aborted, ErrorCode.UNAVAILABLE),  # a transaction contention: try again
    (gexc.Cancelled, ErrorCode.UNAVAILABLE),  # the server or a proxy dropped the call
    (gexc.OutOfRange, ErrorCode.INVALID_ARGUMENT),
    (gexc.MethodNotImplemented, ErrorCode.UNSUPPORTED),
    (gexc.RetryError, ErrorCode.UNAVAILABLE),
    (google.auth.exceptions.TransportError, ErrorCode.UNAVAILABLE),
)


def check_project(project: str, url: object) -> str:
    """Return ``project`` if it is a GCP project id, else raise InvalidURL saying what one looks like."""
    if not _PROJECT.match(project or ""):
        raise InvalidURL(
            f"{project!r} in {url} is not a project id: 6-30 characters of a-z, 0-9 and '-', "
            "starting with a letter and not ending with '-' (such as my-project-123)"
        )
    return project


def code_of(exc: BaseException) -> ErrorCode | None:
    """The code of a google-cloud or google-auth error, or None if it is neither."""
    if isinstance(exc, gexc.InvalidArgument | gexc.BadRequest):
        if getattr(exc, "reason", None) == EXACTLY_ONCE_FAILURE:
            return ErrorCode.PRECONDITION_FAILED
        text = str(exc).lower()
        if "too large" in text or "exceeds the limit" in text or "size limit" in text:
            return ErrorCode.TOO_LARGE
        return ErrorCode.INVALID_ARGUMENT
    for kind, code in _CODES:
        if isinstance(exc, kind):
            return code
    if isinstance(exc, google.auth.exceptions.RefreshError):
        return ErrorCode.UNAVAILABLE if getattr(exc, "retryable", False) else ErrorCode.PERMISSION_DENIED
    if isinstance(exc, google.auth.exceptions.GoogleAuthError):
        return ErrorCode.PERMISSION_DENIED
    if isinstance(exc, gexc.GoogleAPIError):
        return ErrorCode.UNKNOWN
    return None


def no_credentials(scheme: str, option: str) -> PermissionDenied:
    """The error for a client that found no application-default credentials."""
    return PermissionDenied(
        f"{scheme}:// found no Google credentials: set GOOGLE_APPLICATION_CREDENTIALS to a key file, "
        f"run 'gcloud auth application-default login', run on Google Cloud, or give {option}= "
        "to use an emulator",
        provider=scheme,
    )
