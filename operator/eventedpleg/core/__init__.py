"""The pure core: the rollout (operator) side, the node (agent) side, and the contract both share."""
