"""Kubernetes API errors as domain errors, so callers outside eventedpleg.k8s never see ApiException."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

P = ParamSpec("P")
R = TypeVar("R")


class ApiError(Exception):
    """An API call failed; `status` is the HTTP status (0 when the server could not be reached)."""

    def __init__(self, status: int, reason: str, message: str) -> None:
        super().__init__(f"{status} {reason}: {message}")
        self.status, self.reason, self.message = status, reason, message


class Conflict(ApiError):  # noqa: N818 - named after the HTTP status
    """409: the object changed since we read it (resourceVersion precondition); plan again."""


class NotFound(ApiError):  # noqa: N818
    """404."""


class Forbidden(ApiError):  # noqa: N818
    """403: RBAC or an admission policy said no."""


class TooManyRequests(ApiError):  # noqa: N818
    """429: for an eviction, a PodDisruptionBudget does not allow it now."""


def from_api_exception(exc: ApiException) -> ApiError:
    message, reason = str(exc.reason or ""), str(exc.reason or "")
    try:
        body = json.loads(exc.body or "{}")
        message = str(body.get("message") or message)
        reason = str(body.get("reason") or reason)
        # An eviction refused by a PDB names the budget only in details.causes ("The disruption budget
        # web-pdb needs 1 healthy pods and has 1 currently").
        causes = [str(cause.get("message")) for cause in (body.get("details") or {}).get("causes") or []]
        if causes:
            message = f"{message} ({'; '.join(causes)})"
    except (TypeError, ValueError):
        pass
    kinds: dict[int, type[ApiError]] = {409: Conflict, 404: NotFound, 403: Forbidden, 429: TooManyRequests}
    return kinds.get(int(exc.status or 0), ApiError)(int(exc.status or 0), reason, message)


class Unreachable(ApiError):  # noqa: N818
    """No answer: the connection failed or the request timed out on our side (status 0)."""


def translated(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorator: raise ApiError subclasses instead of ApiException, and Unreachable for transport
    errors (a request timeout, a refused or reset connection) so callers handle one error type."""

    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except ApiException as exc:
            raise from_api_exception(exc) from exc
        except (HTTPError, OSError) as exc:
            raise Unreachable(0, type(exc).__name__, str(exc)) from exc

    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
