"""What a node's host says: readers of its kubelet and runtime configuration, logs and metrics, the host
plan, verification and the benefit figures. Pure; imports nothing from core.node.blocks or
core.node.phases."""
