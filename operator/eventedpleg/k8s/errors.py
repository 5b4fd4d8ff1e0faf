"""Kubernetes API errors as domain errors, so callers outside eventedpleg.k8s never see ApiException, and
`diagnose`: the one place that turns any failure to reach, authenticate to or read from the API server into
a one-line explanation and a kind (the CLI maps kinds to exit codes)."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from enum import StrEnum
from typing import ParamSpec, TypeVar

import yaml
from kubernetes.client.exceptions import ApiException
from kubernetes.config.config_exception import ConfigException
from urllib3.exceptions import HTTPError, MaxRetryError

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
    """404: no such object."""


class NotServed(NotFound):
    """404 for the resource type itself, not an object: the server does not serve this API (a CRD that is not
    installed). Its body is the plain "404 page not found", not a Status naming the object."""


class Unauthorized(ApiError):  # noqa: N818
    """401: the credentials were not accepted (expired or revoked token, wrong certificate)."""


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
    kinds: dict[int, type[ApiError]] = {
        409: Conflict,
        404: NotFound if _names_an_object(exc.body) else NotServed,
        403: Forbidden,
        401: Unauthorized,
        429: TooManyRequests,
    }
    return kinds.get(int(exc.status or 0), ApiError)(int(exc.status or 0), reason, message)


class Unreachable(ApiError):  # noqa: N818
    """No answer: the connection failed or the request timed out on our side (status 0)."""


def _names_an_object(body: object) -> bool:
    """A 404 for a missing object is a Status with details.name; for an unknown type it is not."""
    try:
        status = json.loads(body or "{}") if isinstance(body, str | bytes) else {}
    except ValueError:
        return False
    return isinstance(status, dict) and bool((status.get("details") or {}).get("name"))


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


class KubeconfigError(Exception):
    """No usable credentials: the kubeconfig is missing, unreadable, not YAML, or names no usable context, and
    we are not in a pod either."""


class Problem(StrEnum):
    """What kind of failure, so a caller can choose an exit code without knowing the client library."""

    CREDENTIALS = "credentials"  # kubeconfig missing or invalid
    UNREACHABLE = "unreachable"  # no answer: connection refused, DNS, TLS, timeout
    UNAUTHORIZED = "unauthorized"  # 401
    FORBIDDEN = "forbidden"  # 403 (RBAC)
    NOT_FOUND = "not found"  # 404 for an object
    NOT_SERVED = "not served"  # 404 for a resource type: the CRD is not installed
    API = "api"  # any other answer (5xx, 409, 422 ...)


@dataclass(frozen=True)
class Diagnosis:
    problem: Problem
    message: str  # one line, says what to do where we know it


# The one resource type we use that a cluster may not serve: ours.
CRD_HINT = "the NodeConfig CRD (nodeconfigs.eventedpleg.io) is not installed: kubectl apply -f crds/"


def diagnose(exc: BaseException) -> Diagnosis | None:
    """One line for a failure to reach or read the API server; None for anything else (a bug: traceback)."""
    if isinstance(exc, ApiException):
        exc = from_api_exception(exc)
    if isinstance(exc, KubeconfigError):
        return Diagnosis(Problem.CREDENTIALS, f"no usable kubeconfig: {exc}")
    if isinstance(exc, Unreachable) and isinstance(exc.__cause__, HTTPError):
        exc = exc.__cause__  # `translated` wrapped the transport error: name its root cause
    if isinstance(exc, HTTPError):
        return Diagnosis(Problem.UNREACHABLE, f"cannot reach the API server: {_network_text(exc)}")
    if isinstance(exc, Unreachable):
        return Diagnosis(Problem.UNREACHABLE, f"cannot reach the API server: {_one_line(exc.message)}")
    if isinstance(exc, NotServed):
        return Diagnosis(Problem.NOT_SERVED, CRD_HINT)
    if isinstance(exc, ApiError):
        kinds = {
            Unauthorized: (Problem.UNAUTHORIZED, "the API server did not accept the credentials (401)"),
            Forbidden: (Problem.FORBIDDEN, "RBAC denies it (403)"),
            NotFound: (Problem.NOT_FOUND, "not found (404)"),
        }
        problem, what = kinds.get(type(exc), (Problem.API, f"the API server answered {exc.status}"))
        return Diagnosis(problem, f"{what}: {_one_line(exc.message)}")
    return None


def _network_text(exc: HTTPError) -> str:
    """urllib3 nests the cause (MaxRetryError -> NewConnectionError -> ConnectionRefused); name the root."""
    reason: BaseException = exc
    if isinstance(exc, MaxRetryError) and exc.reason is not None:
        reason = exc.reason
    where = ""
    if isinstance(exc, MaxRetryError):
        pool = exc.pool
        server = f"{pool.scheme}://{pool.host}:{pool.port}" if pool is not None else ""
        where = f"{server}{exc.url or ''}"
    root: BaseException = reason
    while root.__context__ is not None and not isinstance(root, OSError | ConnectionError):
        root = root.__context__
    text = _one_line(str(root) or type(root).__name__)
    return f"{text} ({where})" if where else text


def _one_line(text: str) -> str:
    return " ".join(text.split())


def config_failure(exc: Exception) -> KubeconfigError | None:
    """The kubernetes client's ways of refusing a kubeconfig, as one error type."""
    if isinstance(exc, ConfigException | yaml.YAMLError):
        return KubeconfigError(_one_line(str(exc)))
    if isinstance(exc, TypeError | AttributeError | KeyError):  # valid YAML, not a kubeconfig
        return KubeconfigError(f"not a kubeconfig ({type(exc).__name__}: {exc})")
    return None
