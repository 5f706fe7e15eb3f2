"""NVIDIA Xid error codes hpcscope names in reports.

``DCGM_FI_DEV_XID_ERRORS`` is the value of the last Xid, not a count. The meanings below follow
NVIDIA's Xid catalogue (docs.nvidia.com, "Xid Errors"); the action column says what an operator
does first. Unknown codes are reported by number.
"""

from __future__ import annotations

XID_MEANINGS: dict[int, tuple[str, str]] = {
    13: ("graphics engine exception", "usually an application bug; check the job's code"),
    31: ("GPU memory page fault", "usually an application bug (illegal address)"),
    43: ("GPU stopped processing", "the application was killed; check the job"),
    45: ("preemptive cleanup after a previous error", "follows another Xid"),
    48: ("double-bit ECC error", "drain the node; a reset or RMA may be needed"),
    61: ("internal micro-controller breakpoint", "reset the GPU; report if it repeats"),
    62: ("internal micro-controller halt", "reset the GPU; report if it repeats"),
    63: ("ECC page retirement or row remapping event", "check remapped rows"),
    64: ("ECC page retirement or row remapping failure", "drain the node; RMA candidate"),
    74: ("NVLink error", "check NVLink and NVSwitch health"),
    79: ("GPU has fallen off the bus", "drain the node; reseat or replace the GPU"),
    92: ("high single-bit ECC error rate", "watch the GPU; RMA candidate if it persists"),
    94: ("contained ECC error", "the application was stopped; the GPU can keep running"),
    95: ("uncontained ECC error", "drain the node and reset the GPU"),
    119: ("GSP RPC timeout", "reset the GPU; update the driver if it repeats"),
    120: ("GSP error", "reset the GPU; update the driver if it repeats"),
}


def describe_xid(code: int) -> str:
    """A short meaning for an Xid code (``"Xid 1234"`` style fallback for unknown codes)."""
    meaning = XID_MEANINGS.get(code)
    return meaning[0] if meaning else "see NVIDIA's Xid catalogue"


def xid_action(code: int) -> str | None:
    """What an operator should do first about this Xid, when known."""
    meaning = XID_MEANINGS.get(code)
    return meaning[1] if meaning else None
