"""Reading and checking MSCCL XML: a strict parser, static rules, a symbolic replay, and import to the IR."""
from .check import CheckReport, Problem, check_program, check_xml
from .parse import parse_xml, read_xml

__all__ = ["CheckReport", "Problem", "check_program", "check_xml", "parse_xml", "read_xml"]
