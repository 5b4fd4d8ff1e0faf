"""The API client's credential hook: the kubernetes client runs it before every request; ours runs it at
most every CREDENTIAL_REFRESH_SECONDS (it re-sets host, CA and token each time: CPU on the hot path)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from eventedpleg.k8s.client import CREDENTIAL_REFRESH_SECONDS, api_client, throttle_credential_hook

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:6443", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: "secret-token"}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
"""


def test_a_throttled_hook_runs_again_only_after_the_period_and_stays_installed() -> None:
    calls: list[str] = []
    now = [0.0]

    class Cfg:
        refresh_api_key_hook: Any = None

    def hook(cfg: Any) -> None:
        calls.append(f"at {now[0]}")
        cfg.refresh_api_key_hook = hook  # as the client's own hooks do: they install themselves again

    cfg = Cfg()
    cfg.refresh_api_key_hook = hook
    throttle_credential_hook(cfg, 10.0, clock=lambda: now[0])
    for now[0] in (0.0, 0.0, 9.9, 10.0, 12.0, 20.0):
        cfg.refresh_api_key_hook(cfg)
    assert calls == ["at 0.0", "at 10.0", "at 20.0"]


def test_a_client_from_a_kubeconfig_keeps_its_token_and_throttles_the_hook(tmp_path: Path) -> None:
    path = tmp_path / "kubeconfig"
    path.write_text(KUBECONFIG)
    cfg = api_client(str(path)).configuration
    assert cfg.api_key["BearerToken"] == "Bearer secret-token"
    cfg.api_key["BearerToken"] = "changed"
    assert cfg.get_api_key_with_prefix("BearerToken") == "Bearer secret-token"  # the first call runs it
    cfg.api_key["BearerToken"] = "changed"
    assert cfg.get_api_key_with_prefix("BearerToken") == "changed"  # within the period: not run
    assert CREDENTIAL_REFRESH_SECONDS >= 1
