"""What the agent does on its node. Pure. The phases, the steps of the agent's state machine (agentdecide's
rule for when it acts, servicephase, applyphase, donephase, hostcheckphase), never import one another
(import-linter); what they share are building blocks: the effects they yield (effects, host, hostfault,
nodeapi, agentsettings, transaction), the service restart (restart), the verification loop (verifyloop), the
host verdict (judge) and the event-consumer check (eventconsumers)."""
