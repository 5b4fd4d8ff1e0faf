"""The rollout planner: `plan(nodes, target, now) -> Plan`, pure.

The executor applies the actions (one step per node), the cluster changes, and the planner runs again on
the new snapshot; nothing is remembered between runs except what is written on the nodes. That is what
makes a killed operator resume exactly (Patroni's quorum resolver and MCO's getAllCandidateMachines work
the same way; tests/unit/core/rollout/planner/test_planner.py replays every interrupted prefix).

Rules, in the order they apply:
- Selection (selection.py): spec.nodeSelector; nodes labelled eventedpleg.io/skip are left alone; when
  two NodeConfigs select a node, the older one (creationTimestamp, then name) owns it and the other
  reports a conflict.
- Eligibility: core.compat verdict; Risky only with allowRisky. A node we own that is no longer selected
  or eligible gets our drop-ins removed (target hash_off) and is then released.
- Each node's part (decide.py, by the node's situation: taking.py, inflight.py, lettinggo.py; gathered
  by decider.py): a NodeDecision -- its step if we hold it, its notes, and its Tally of counters; a
  pass's counters are the sum of the nodes' Tallies (tally.py).
- Budget (start.py): at most maxUnavailable selected nodes unavailable (NotReady, cordoned by anyone, or
  in our hands) -- nodes already unavailable count, as in MCO. A node that is already cordoned by
  someone else costs nothing to process, and keeps its cordon afterwards.
- Gates on *starting* a node: halted (failures >= maxFailedNodes, a count or a percentage of the selected
  nodes as maxUnavailable is, or any failure before the canaries have
  passed: a canary exists to stop the rest), paused, outside the window, canary soak, then each step of
  spec.rollout.steps (start.stages) as one more canary: Done and soaked before the next one starts. A
  node already started always finishes, so no gate ever leaves a node cordoned.
- Order: zone, then spec.rollout.order within the zone (name by default; nodeorder.py), then name: zone
  by zone limits the blast radius, as MCO does.

`plan` (plan.py) decides every node: the reference. A caller that plans again and again may pass a
`SelectionMemo` (selection decided only for nodes whose facts changed) or a `PassMemo` (memo.py: the
nodes' decisions kept while their views are the same objects, with their running Tally); both give the
same plan as the reference (tests/unit/core/rollout/planner/test_planner.py replays both).
"""

from eventedpleg.core.rollout.planner.decide import decide
from eventedpleg.core.rollout.planner.decider import Inputs, NodeDecision
from eventedpleg.core.rollout.planner.gates import MAX_ATTENTION
from eventedpleg.core.rollout.planner.inflight import AGENT_GRACE
from eventedpleg.core.rollout.planner.memo import PassMemo
from eventedpleg.core.rollout.planner.plan import plan
from eventedpleg.core.rollout.planner.selection import SelectionMemo
from eventedpleg.core.rollout.planner.summary import (
    HeldNode,
    NodeNote,
    OwnerConflict,
    Plan,
    Summary,
    held_text,
    int_or_percent,
)
from eventedpleg.core.rollout.planner.tally import Tally

__all__ = [
    "AGENT_GRACE",
    "MAX_ATTENTION",
    "HeldNode",
    "Inputs",
    "NodeDecision",
    "NodeNote",
    "OwnerConflict",
    "PassMemo",
    "Plan",
    "SelectionMemo",
    "Summary",
    "Tally",
    "decide",
    "held_text",
    "int_or_percent",
    "plan",
]
