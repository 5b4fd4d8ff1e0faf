"""The lab's Kubernetes API adapter: the lab's only importer of the kubernetes client (import-linter)."""
