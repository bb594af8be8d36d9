"""What is installed and what is ready: the host kinds and effect providers found
through entry points (:mod:`.catalog`) and the checks that say whether each can
work on this machine (:mod:`.doctor`, with :mod:`.agent_clis` for the Codex CLI and
Claude Code).

The ``turnkeeper extensions`` and ``turnkeeper doctor`` commands print them.
"""
