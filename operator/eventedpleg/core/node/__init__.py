"""The node (agent) side of the pure core: what the host says (facts), what the agent does (phases; the
guard's look at a Done node, guardphase, over the same effects), and what it says in its log about each
step (narration)."""
