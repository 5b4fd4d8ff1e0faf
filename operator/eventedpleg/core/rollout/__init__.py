"""The rollout (operator) side of the pure core: the planner, the steps, the drain, the status."""
