"""Confinement for commands: the bubblewrap self-test and (with Bash) the sandbox itself."""
