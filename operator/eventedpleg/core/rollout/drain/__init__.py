"""The drain: which pods go and how (pods), the policy from the spec (policy), what PodDisruptionBudgets allow
(budgets), the taints a rollout puts on and takes off a node (taints), and the verdict whether the node the
planner chose is taken now, and how (takeverdict)."""
