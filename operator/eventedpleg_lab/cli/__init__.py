"""The lab's `eventedpleg` commands, registered through the `eventedpleg.commands` entry-point group
(operator/pyproject.toml) and loaded only when one of them runs."""
