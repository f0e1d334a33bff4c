"""Checker: the plan checker (static rules, replay)."""
