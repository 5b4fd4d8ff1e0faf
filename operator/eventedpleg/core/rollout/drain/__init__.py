"""The drain: which pods go and how (pods), the policy from the spec (policy), what PodDisruptionBudgets allow
(budgets), and the taints a rollout puts on and takes off a node (taints)."""
