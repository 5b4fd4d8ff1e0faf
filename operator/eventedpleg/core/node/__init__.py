"""The node (agent) side of the pure core: what the host says (facts), what the agent does (phases), and
what it says in its log about each step (narration)."""
