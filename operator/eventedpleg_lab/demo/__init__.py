"""`eventedpleg demo`: the whole product on this machine — local control plane, kwok nodes with simulated
hosts and real agents, the operator under its chart RBAC, a NodeConfig rolled out live."""
