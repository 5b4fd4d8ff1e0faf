"""The pure core: the rollout (operator) side, the node (agent) side, the contract both share, and the
leader-election rules (leaderelection) that k8s.lease applies."""
