"""What the agent's phases (core.node.phases) are built from. Pure. A building block is no step of the agent's
state machine: it is what two or more steps share. The effects the phases yield and what answers them
(effects, host, hostfault, nodeapi), the agent's pacing (agentsettings), the record of an apply in progress
(transaction), the service restart (restart), the verification loop (verifyloop), the host verdict (judge)
and the event-consumer check (eventconsumers). Blocks read the host's facts (core.node.facts) and never
import a phase (import-linter)."""
