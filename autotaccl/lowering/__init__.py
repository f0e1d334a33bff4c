"""Lowering the IR to MSCCL XML; checking and importing XML lives in :mod:`autotaccl.xmlcheck`."""
from .lower import lower, lower_program
from .options import LoweringError, LoweringOptions

__all__ = ["LoweringError", "LoweringOptions", "lower", "lower_program", "check_xml", "CheckReport", "import_xml"]


def __getattr__(name: str):
    # the checker and importer live in xmlcheck, which imports this package's program model
    if name in ("check_xml", "CheckReport"):
        from .. import xmlcheck
        return getattr(xmlcheck, name)
    if name == "import_xml":
        from ..xmlcheck.importer import import_xml
        return import_xml
    raise AttributeError(name)
