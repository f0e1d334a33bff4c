"""MSCCL XML: lowering the IR to a program (``lower``), the program model and the runtimes' constants
(``program``), and reading, checking and importing XML (``check``)."""
from .check.check import CheckReport, Problem, check_program, check_xml
from .check.importer import import_xml
from .check.parse import parse_xml, read_xml
from .lower.lower import lower, lower_program
from .lower.options import LoweringError, LoweringOptions

__all__ = ["CheckReport", "LoweringError", "LoweringOptions", "Problem", "check_program", "check_xml", "import_xml",
           "lower", "lower_program", "parse_xml", "read_xml"]
