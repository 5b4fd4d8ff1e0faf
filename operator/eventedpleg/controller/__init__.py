"""The operator (the Deployment): kopf handlers, the rollout engine and its composition root (wiring)."""
