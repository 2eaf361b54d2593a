"""Conversation analytics over decoded events: RPC pairing, confirm and delivery ledgers,
heartbeats, cross-connection tracing, a security audit, and the stats report built from them."""

from .stats import Analyzer, analyse

__all__ = ["Analyzer", "analyse"]
