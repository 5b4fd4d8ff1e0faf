"""What the agent does on its node, step by step. Pure. The phases, the steps of the agent's state machine
(agentdecide's rule for when it acts, servicephase, applyphase, donephase, hostcheckphase, and guardphase,
the guard's look at a Done node), never import one another (import-linter); what they share they take from
the building blocks (core.node.blocks)."""
