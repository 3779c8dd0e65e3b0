"""Analysis sandbox: run model-written Python in Monty, Pydantic's interpreter for untrusted code.

The program runs in a ``monty`` worker process with no file, network, process or environment
access, under time, memory, recursion and call limits; its ``kb`` calls are answered by this
process. See NOTES.md in this directory for why, and what the interpreter does not offer.
"""

from rag_tools.sandbox._runner import SANDBOX_MODULES, SandboxLimits, SandboxResult, run_sandboxed

__all__ = ["SANDBOX_MODULES", "SandboxLimits", "SandboxResult", "run_sandboxed"]
