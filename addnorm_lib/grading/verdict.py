"""A judge's verdict on one check's record: the typed value between a judge worker and the grader.

The worker (``_judge_worker``) sends one per check as a line of JSON (:meth:`Verdict.to_dict`);
the grader reads it back (:meth:`Verdict.from_dict`) and words the test cell's message from it
(``judge.failure_message``). Kept light: the judge's zygote imports it.
"""

from dataclasses import dataclass
from typing import Literal, get_args

# passed: the judge accepted the record (message: its unverified claims, "; "-joined);
# failed: the judge's CheckFailed (message: its text); missing: no record; refused: the loader
# refused the file (message: its neutral reason); malformed: not the structure the judge expects;
# memory: a MemoryError under the worker's limit; error: another exception (message: its type
# only, as its text could echo the record); timeout, stopped: the worker ran past its time, or
# was stopped at its limits, on this record (the grader's words, no message).
VerdictKind = Literal[
    "passed", "failed", "missing", "refused", "malformed", "memory", "error", "timeout", "stopped"
]
VERDICT_KINDS: tuple[str, ...] = get_args(VerdictKind)


@dataclass(frozen=True)
class Verdict:
    """What a judge decided about one check's record, and what it said."""

    kind: VerdictKind
    message: str = ""

    @property
    def passed(self) -> bool:
        """Whether the judge accepted the record."""
        return self.kind == "passed"

    def to_dict(self) -> dict:
        """The verdict as a worker sends it."""
        return {"verdict": self.kind, "message": self.message}

    @staticmethod
    def from_dict(data) -> "Verdict":
        """The verdict a worker sent; anything that is not one is an ``error`` verdict (the
        record earns nothing), never an exception."""
        if not isinstance(data, dict) or set(data) != {"verdict", "message"}:
            return Verdict("error", "not a verdict")
        kind, message = data["verdict"], data["message"]
        if kind not in VERDICT_KINDS or not isinstance(message, str):
            return Verdict("error", "not a verdict")
        return Verdict(kind, message)
