"""The node agent (the DaemonSet): its loop, and the interpreter that performs the phases' effects."""
