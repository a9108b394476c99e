"""Provider errors → failure classes, the same for every SDK (by HTTP status and body)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from turnstream.core.turn import ProviderFailure


def _transport_errors() -> tuple[type[Exception], ...]:
    """What a broken connection raises: httpx's errors, and httpx2's (which the
    anthropic SDK uses and does not wrap when a stream breaks off)."""
    import httpx

    errors: list[type[Exception]] = [httpx.HTTPError]
    try:
        import httpx2

        errors.append(httpx2.HTTPError)
    except ImportError:
        pass
    return tuple(errors)


TRANSPORT_ERRORS = _transport_errors()

_TOO_LONG = ("prompt is too long", "context_length_exceeded", "maximum context length")


def status_failure(
    status: int, message: str, headers: Any, code: str | None = None
) -> ProviderFailure:
    """A failure from an HTTP error response."""
    lowered = f"{message} {code or ''}".lower()
    if status == 429:
        error_class, retryable = "rate_limit", True
    elif status == 529:
        error_class, retryable = "overloaded", True
    elif status >= 500:
        error_class, retryable = "server_error", True
    elif status == 408:
        error_class, retryable = "timeout", True
    elif any(marker in lowered for marker in _TOO_LONG):
        error_class, retryable = "prompt_too_long", False
    elif status in (401, 403):
        error_class, retryable = "auth", False
    else:
        error_class, retryable = "bad_request", False
    return ProviderFailure(
        error_class=error_class,
        message=f"HTTP {status}: {message}"[:500],
        retryable=retryable,
        failed_at=datetime.now(UTC),
        status_code=status,
        retry_after_s=_retry_after(headers),
    )


_TYPES = {
    "overloaded_error": ("overloaded", True),
    "rate_limit_error": ("rate_limit", True),
    "rate_limit_exceeded": ("rate_limit", True),
    "api_error": ("server_error", True),
    "server_error": ("server_error", True),
}


def stream_failure(error_type: str | None, message: str) -> ProviderFailure:
    """An error event inside an HTTP 200 stream (the provider failed mid-answer)."""
    error_class, retryable = _TYPES.get(error_type or "", ("server_error", True))
    if any(marker in message.lower() for marker in _TOO_LONG):
        error_class, retryable = "prompt_too_long", False
    return ProviderFailure(
        error_class=error_class,
        message=f"mid-stream {error_type or 'error'}: {message}"[:500],
        retryable=retryable,
        failed_at=datetime.now(UTC),
    )


def connection_failure(exc: BaseException) -> ProviderFailure:
    """The connection failed or the stream broke off: worth another attempt."""
    return ProviderFailure(
        error_class="connection",
        message=f"{type(exc).__name__}: {exc}"[:500],
        retryable=True,
        failed_at=datetime.now(UTC),
    )


def _retry_after(headers: Any) -> float | None:
    if headers is None:
        return None
    value = headers.get("retry-after")
    try:
        return max(0.0, float(value)) if value is not None else None
    except ValueError:
        return None  # an HTTP date: fall back to our own backoff
