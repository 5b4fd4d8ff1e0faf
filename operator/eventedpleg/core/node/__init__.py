"""The node (agent) side of the pure core: what the host says (facts) and what the agent does (phases)."""
