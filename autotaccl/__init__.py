"""autotaccl: search communication sketches, synthesize collective algorithms, measure, track and export them."""
from .errors import InfeasibleError, InputError
from .model.algorithm import Algorithm, Transfer, VerificationError, load_algorithm, save_algorithm, verify
from .model.collectives import Collective, make_collective
from .model.hardware import HardwareProfile, load_hardware
from .model.topology import build_topology
from .sizes import parse_size, parse_size_range

__all__ = ["Algorithm", "Collective", "HardwareProfile", "InfeasibleError", "InputError", "Transfer",
           "VerificationError", "build_topology", "load_algorithm", "load_hardware", "make_collective",
           "parse_size", "parse_size_range", "save_algorithm", "verify"]
__version__ = "0.1.0"
