"""eventedpleg.k8s.access against the code: every function that sends an API request has its rows, with the
verbs its requests need, and every row's function sends them (a row no call uses would grant for nothing).
kopf's rows follow the settings controller/ gives it."""

from __future__ import annotations

import ast
import inspect
import re
from collections.abc import Iterator
from pathlib import Path

import kopf
import pytest

from eventedpleg import constants as c
from eventedpleg.controller import handlers, main
from eventedpleg.k8s import access
from eventedpleg.k8s.access import Account, Scope

PRODUCT = Path(access.__file__).resolve().parents[1]
# The generic transport: its callers choose path and verb, so they are the sites.
TRANSPORT = {"eventedpleg.k8s.client", "eventedpleg.k8s.informer"}
GENERATED = re.compile(r"^(read|list|create|patch|replace|delete)_(namespaced_|cluster_)?\w+$")
GENERATED_VERB = {"read": "get", "list": "list", "create": "create", "patch": "patch", "replace": "update"}
GENERATED_VERB["delete"] = "delete"
HTTP_VERB = {"GET": "get", "POST": "create", "PATCH": "patch", "PUT": "update", "DELETE": "delete"}


def _generated_receiver(node: ast.expr) -> bool:
    """`client.CoreV1Api(api).x(...)` or `self._core.x(...)` / `self._api.x(...)` set from one."""
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        return node.func.attr.endswith("Api")
    return isinstance(node, ast.Attribute) and node.attr in ("_api", "_core")


def _verbs(call: ast.Call) -> frozenset[str] | None:
    """The RBAC verbs one call's request may need (None: not an API request)."""
    func = call.func
    name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
    if name == "send_json":
        method = call.args[1]
        assert isinstance(method, ast.Constant), ast.unparse(call)
        return frozenset({HTTP_VERB[str(method.value)]})
    if name == "get_json":
        return frozenset({"get", "list"})  # an object or a collection, by its path
    if name in ("list_all", "list_page"):
        return frozenset({"list"})
    if name == "open_watch":
        return frozenset({"watch"})
    if name == "NodeInformer":
        return frozenset({"list", "watch"})
    if name == "stream" and call.args and isinstance(call.args[0], ast.Attribute):
        return frozenset({"watch"}) if call.args[0].attr.startswith("list_") else None
    if isinstance(func, ast.Attribute) and GENERATED.match(name) and _generated_receiver(func.value):
        return frozenset({GENERATED_VERB[name.split("_")[0]]})
    return None


def _sites() -> Iterator[tuple[str, frozenset[str]]]:
    """(module.qualname of the enclosing function, verbs) for every API request in the product."""
    for path in sorted(PRODUCT.rglob("*.py")):
        module = ".".join(("eventedpleg", *path.relative_to(PRODUCT).with_suffix("").parts))
        if module in TRANSPORT:
            continue

        def walk(
            node: ast.AST, scope: tuple[str, ...], module: str = module
        ) -> Iterator[tuple[str, frozenset[str]]]:
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                    yield from walk(child, (*scope, child.name))
                    continue
                if isinstance(child, ast.Call) and (verbs := _verbs(child)) is not None:
                    yield ".".join((module, *scope)), verbs
                yield from walk(child, scope)

        yield from walk(ast.parse(path.read_text()), ())


def _in_code() -> dict[str, list[frozenset[str]]]:
    found: dict[str, list[frozenset[str]]] = {}
    for site, verbs in _sites():
        found.setdefault(site, []).append(verbs)
    return found


def test_the_scan_sees_requests() -> None:
    """The scan itself: it finds the calls of each shape (a scan that found none would pass below)."""
    found = _in_code()
    assert found["eventedpleg.k8s.nodes.patch_node"] == [frozenset({"patch"})]  # send_json
    assert found["eventedpleg.k8s.lease.LeaseLock._replace"] == [frozenset({"update"})]  # generated
    assert found["eventedpleg.k8s.agentapi.KubeAgentApi.watch_node"] == [frozenset({"watch"})]  # stream
    assert found["eventedpleg.controller.main._agent_pod_informer"] == [frozenset({"list", "watch"})]
    assert "eventedpleg.k8s.client.get_json" not in found  # the transport's callers are the sites


def test_every_request_in_the_code_has_its_rows() -> None:
    declared: dict[str, set[str]] = {}
    for row in access.CALLS:
        declared.setdefault(row.site, set()).update(row.verbs)
    missing = {
        site: sorted(set().union(*calls))
        for site, calls in _in_code().items()
        if not all(verbs & declared.get(site, set()) for verbs in calls)
    }
    assert missing == {}, "API calls with no row in eventedpleg/k8s/access.py"


def test_every_row_is_a_request_the_code_makes() -> None:
    found = _in_code()
    unused = [
        (row.site, row.resource, verb)
        for row in access.CALLS
        if not row.site.startswith("kopf:") and row.scope is not Scope.KUBELET
        for verb in row.verbs
        if not any(verb in verbs for verbs in found.get(row.site, []))
    ]
    assert unused == [], "rows of eventedpleg/k8s/access.py that no call uses"


def test_kopf_rows_follow_its_settings() -> None:
    """kopf, as controller/ runs it: cluster-wide (watch), standalone (no peering objects, so no
    kopfpeerings rule), a finalizer and annotation storage (patch, never update or status), Events posted
    only at WARNING into its login's namespace (the operator's: it logs in with the pod's account)."""
    settings = kopf.OperatorSettings()
    handlers.configure(settings)
    assert settings.persistence.finalizer == c.FINALIZER
    assert isinstance(settings.persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(settings.persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert settings.posting.enabled and settings.posting.level > 20  # WARNING: handler failures only
    run = inspect.getsource(main.run)
    assert "clusterwide=True" in run and "standalone=True" in run
    kopf_rows = {row.site for row in access.CALLS if row.site.startswith("kopf:")}
    assert kopf_rows == {"kopf:clusterwide", "kopf:persistence", "kopf:observation", "kopf:posting"}


def test_the_agent_reads_the_kubelet_metrics_its_row_names() -> None:
    (row,) = [r for r in access.CALLS if r.scope is Scope.KUBELET]
    assert "https://127.0.0.1:10250/metrics" in (PRODUCT / "agent" / "linuxhost.py").read_text()
    assert row.resource == "nodes/metrics" and row.accounts == (Account.AGENT,)


@pytest.mark.parametrize("account", list(Account))
def test_rows_are_distinct(account: Account) -> None:
    keys = [
        (r.site, r.group, r.resource, r.scope)
        for r in access.calls_of(account, {r.value for r in access.CALLS})
    ]
    assert len(keys) == len(set(keys))
