"""A real node on this machine: a kubelet and containerd built from Go modules, run without systemd.

Test and benchmark infrastructure: the agent is verified against the real kubelet through
`eventedpleg_lab.realnode.host.RigHost`, and bench/benefit.py measures what Evented PLEG saves. Nothing
here runs in the operator or agent images. Recipe: docs/realnode.md.
"""
