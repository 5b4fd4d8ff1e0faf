"""What an agent's host check found before any node is taken: the `eventedpleg.io/host-check` annotation.

The agent writes it on its own Node (at start and while idle), from the same pure decision it makes before
writing anything when asked to apply (core.node.facts.hostplan.decide), for turning Evented PLEG on in each
kubeletConfig mode. The operator reads it before the cordon: a node whose agent would refuse the change is
marked Skipped with the agent's own reason and never cordoned or drained; `eventedpleg preflight` shows it.
No annotation (an agent not started yet, or older): the operator goes on as before, and the agent's check
when asked to apply still refuses, after the drain.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime


@dataclass(frozen=True)
class HostCheck:
    at: datetime  # when the agent looked
    refusals: Mapping[str, str] = field(default_factory=dict)  # kubeletConfig mode -> refusal ("" if fine)

    def refusal(self, mode: str) -> str:
        return self.refusals.get(mode, "")

    def to_json(self) -> str:
        doc = {"at": self.at.isoformat(timespec="seconds"), "refusals": dict(sorted(self.refusals.items()))}
        return json.dumps(doc, separators=(",", ":"))


def parse(text: str | None) -> HostCheck | None:
    """The annotation's value; anything unreadable is no check at all."""
    try:
        doc = json.loads(text or "")
        at = datetime.fromisoformat(str(doc["at"]))
        refusals = {str(mode): str(why) for mode, why in dict(doc.get("refusals") or {}).items()}
    except (ValueError, KeyError, TypeError):
        return None
    return HostCheck(at, refusals)
