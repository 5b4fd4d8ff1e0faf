"""The node (agent) side of the pure core: what the host says (facts), what the agent's steps are built
from (blocks: the effects, the restart, the verification loop, ...), what the agent does (phases, the
guard's look at a Done node among them), and what it says in its log about each step (narration)."""
