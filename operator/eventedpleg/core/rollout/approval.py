"""Approvals under spec.rollout.approval: Manual, kept on the NodeConfig (pure).

`eventedpleg approve NODE --nodeconfig NAME` writes one annotation on the NodeConfig, ANN_APPROVED: a JSON
map node -> the config hash the node may be taken for, so an approval holds for one config. It lives on the
NodeConfig rather than on the Node because writing it must need a right no node has: a node's kubelet
credential may patch its own Node (NodeRestriction) but holds nothing on nodeconfigs.eventedpleg.io, so
approving needs `patch` on the NodeConfig (docs/security.md). The operator reads it and never writes it;
it goes with the NodeConfig.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from eventedpleg.protocol import json_map


def parse(text: str | None) -> dict[str, str]:
    """The ANN_APPROVED value; anything unreadable approves nothing."""
    return {node: config for node, config in json_map(text).items() if isinstance(config, str) and config}


def approve(existing: Mapping[str, str], node: str, config: str) -> dict[str, str]:
    """The new ANN_APPROVED map: `node` approved for `config`, plus the earlier approvals for the same
    config (those for another config can never be used again: an approval is for one config)."""
    return {**{n: h for n, h in existing.items() if h == config}, node: config}


def encode(approved: Mapping[str, str]) -> str:
    return json.dumps(dict(sorted(approved.items())), separators=(",", ":"))
