"""Diagnoses: the causes an operator can act on, read from the event stream (frames, connections,
findings and the core's ledger events), and the quirks the broker accepts. See docs/diagnose.md."""

from .engine import Diagnoser, diagnose, diagnose_connection
from .model import CAUSES, IMPACTS, Diagnosis, Quirk, Thresholds, Who, ranked

__all__ = ["CAUSES", "IMPACTS", "Diagnoser", "Diagnosis", "Quirk", "Thresholds", "Who", "diagnose",
           "diagnose_connection", "ranked"]  # fmt: skip
