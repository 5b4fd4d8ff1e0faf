"""The one package that talks to the Kubernetes API: reads, writes, watches and Events."""
