"""The node agent (the DaemonSet): its composition root (main), its loop, and the interpreter that performs
the phases' effects."""
