"""Analysis sandbox: run model-written Python in an isolated, resource-limited child process.

Isolation is done by the kernel (network/mount/PID namespaces, an unprivileged uid, a read-only
filesystem except a private work directory, rlimits); Python-level guards (audit hook and import
blocker) are defence in depth only. See NOTES.md in this directory.
"""

from rag_tools.sandbox._runner import SandboxLimits, SandboxResult, run_sandboxed, sandbox_available

__all__ = ["SandboxLimits", "SandboxResult", "run_sandboxed", "sandbox_available"]
