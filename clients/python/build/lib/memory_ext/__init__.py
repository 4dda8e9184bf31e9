"""memory_ext: governed AI-agent memory in PostgreSQL, from Python.

`Memory` / `AsyncMemory`: typed calls of the agent API. `memory_ext.langgraph.MemoryStore` /
`AsyncMemoryStore` (extra `[langgraph]`): a LangGraph BaseStore over memory.put/get/search/delete."""
from .client import AsyncMemory, ChainCheck, Forgotten, Memory, Outcome, Recalled, Remembered, Retrieved
from .errors import (AuditAppendOnly, BadArgument, ConsentRequired, DowngradeRefused, Held, InvalidTransition, MemoryError,
                     NotAllowed, NotFound, SensitiveInput, SupersessionRefused)

__version__ = "0.4.0"

__all__ = ["Memory", "AsyncMemory", "Remembered", "Recalled", "Forgotten", "Retrieved", "Outcome", "ChainCheck",
           "MemoryError", "BadArgument", "NotAllowed", "Held", "ConsentRequired", "DowngradeRefused", "InvalidTransition",
           "SensitiveInput", "SupersessionRefused", "NotFound", "AuditAppendOnly"]
