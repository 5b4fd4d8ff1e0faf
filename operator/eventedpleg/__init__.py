"""evented-pleg-operator: turn on the kubelet's Evented PLEG safely, node by node."""

__version__ = "0.1.0"
